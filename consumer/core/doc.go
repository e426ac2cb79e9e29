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
// Order: events of one key (a tool, or a composition) are applied in stream
// order by the caller. Composition verdicts that another key's event
// triggers (a contract, measured outcomes) read the workflows and the
// qualities as they stand when that event is applied.
package core
