// Package core is the stream processor's decision step: given the state it
// reads and one decoded telemetry event, the verdicts to publish and the
// state to write. It calls the guards and holds no I/O, so the live workers
// (package consumer) and the audit replay run the very same code.
//
//	        State (KV views, or memory in a replay)
//	            │ read
//	input ──▶ Core.Apply ──▶ Effects{Verdicts, Writes}
//	                              │            │
//	                   publish, await acks ──▶ then write (compare-and-set) ──▶ ack the input
//
// Verdict ids are derived from the input event and the verdict, so that a
// redelivered input republishes the same ids and the verdict stream drops
// them; each record remembers the stream sequence it last applied, so that a
// redelivered input changes no state twice.
//
// Order: the caller applies the events of one ordering key in stream order
// (OrderingKey): schema observations and invocations by tool; contracts and
// workflow declarations all in one composition lane, because a workflow's
// verdict depends on the contracts of every tool it calls, so those two
// kinds must see each other in stream order. Measured outcomes reach the
// workflows every Options.QualityEvery outcomes of a tool, from the tool's
// lane: that re-evaluation reads the workflows as they stand when it runs.
//
// Operators' actions (accept or reset a baseline, mark an agent migrated,
// forget an agent's usage) are inputs too, on the tool's subject: the
// tool's lane applies them in stream order, and a replay re-derives the
// verdicts after them (operator.go).
//
// Observed runs (io.toolsentry.workflow.observed.v1, from traces) are
// counted per composition in the composition lane too; every
// ObservedCheckpoint runs of a declared workflow, its verdict compares the
// predicted quality with the observed end-to-end success (observed.go).
package core
