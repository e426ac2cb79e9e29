// Package guards holds toolsentry's decision logic: pure, deterministic
// functions from values to a decision value. No I/O, no NATS, no clock, no
// entropy: the same ordered input yields the same verdicts and digests,
// which is what makes a replay of the telemetry stream an audit. (The Monte
// Carlo bounds of measured quality draw from a PRNG with a fixed seed and a
// fixed sample count: reproducible bit for bit, not random.)
//
// The two seed guards are EvaluateComposition (seed 000_918c771bac28ae93) and
// EvaluateSchema (seed 001_e5cb5c1180e470b4). They reproduce the seeds'
// reference Python gate for gate: the same verdict names, directive strings,
// composed quality and manifest digests, byte for byte. The Python text the
// digests hash (json.dumps with sort_keys, float formats, list repr) is
// written in exactly one place, pytext.go.
//
//	m := guards.EvaluateComposition(comp, guards.CompositionPolicy{RequireSchemaCompatibility: true})
//	// m.Verdict, m.ComposedQuality, m.Directive, m.ManifestDigest
//
// This package is the base that the two domains build on, each in a
// package of its own:
//
//	guards                 the seeds' two guards, the action of every verdict
//	│                      (Action), the Python text (pytext.go), DecodeStrict
//	├── guards/toolschema  tool schemas: parse, fingerprint, diff, drift, migrate
//	└── guards/workflow    compositions: workflows beyond the seed's chain
//	                       (imports toolschema for stage compatibility)
//
// DecodeStrict is the one strict JSON decoder for every input case:
// unknown, missing and mistyped fields are errors naming their path.
package guards

// Version names the decision logic that produced a verdict. Every verdict
// carries it, so that an audit replay under newer logic reports a policy
// change rather than suspecting tampering. Bump it whenever a guard's
// verdicts, directives, digests or migrations change for the same input.
// 2: one verdict per drift (a repeated observation publishes none), and
// verdicts carry their action and summary.
// 3: schemas judged by what they accept (combinators, tuples, open
// content, direction, description classes, defaults, Tool-level fields
// and _meta/icons changes reported, typeless roots judged by what agents
// send).
const Version = "3"
