// Package workflow judges compositions of tools beyond the seed's chain:
// chains, parallel blocks, k-of-n votes and conditionals, measured
// accuracies with confidence bounds, stage compatibility from JSON Schemas
// (package toolschema), and a failure-mode manifest. A plain chain gives
// exactly the seed's manifest (guards.EvaluateComposition). Pure, like
// package guards: the Monte Carlo bounds draw from a PRNG with a fixed seed
// and sample count.
//
//	raw ─▶ ParseWorkflow ─▶ Workflow ─▶ EvaluateWorkflow ─▶ WorkflowManifest
//	                                    (the seed's gates,    ├─ guards.CompositionManifest: verdict, quality, digest
//	                                     in the seed's order) ├─ ComposedQualityLower/Upper, Confidence
//	                                                          └─ FailureModes, Incompatibilities, Measurements
//	predicted, runs, successes ─▶ CompareObserved ─▶ ApplyObserved(manifest, workflow, observed)
package workflow
