// Package guards holds toolsentry's decision logic: pure, deterministic
// functions from values to a decision value. No I/O, no NATS, no clock, no
// randomness: the same ordered input yields the same verdicts and digests,
// which is what makes a replay of the telemetry stream an audit.
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
package guards

// Version names the decision logic that produced a verdict. Every verdict
// carries it, so that an audit replay under newer logic reports a policy
// change rather than suspecting tampering. Bump it whenever a guard's
// verdicts, directives, digests or migrations change for the same input.
const Version = "1"
