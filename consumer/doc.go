// Package consumer is toolsentry's JetStream runtime: it provisions the
// streams, the durable consumer and the KV buckets (Provision), runs an
// embedded nats-server when no cluster is given (StartServer), consumes the
// telemetry stream with a generic Handler (Engine), and keeps local views of
// KV buckets for the hot path (View). It knows nothing of the event types
// or the guards: a Handler gets the raw message and returns an error.
//
// # Ordering and parallelism
//
// Messages are put into a FIFO per key (Options.Key, by default the last
// subject token: the tool or composition id), sorted by stream sequence. A
// key is handed to at most one worker of a bounded conc pool at a time, so
// one key's messages are handled strictly in stream order while different
// keys run in parallel; a worker yields a busy key after a few messages so
// that other keys are not starved. Across processes, order per key needs
// partitioning by key (orbit.go pcgroups); the engine orders within one
// process.
//
// # Ack lifecycle
//
// One function, Engine.settle, maps a handler's result to the ack verbs:
//
//	             pull (PullMaxMessages ≈ Workers)
//	TELEMETRY ───────────────────────────────▶ key FIFO ──▶ worker: Handle(ctx, m)
//	    ▲                                      │  (InProgress every AckWait/3
//	    │                                      │   while queued or handled)
//	    │            ┌─────────────────────────┴──────────────┬──────────────────────────┐
//	    │            ▼ nil                                    ▼ transient                ▼ permanent, panic, or
//	    │           Ack                               NumDelivered < MaxDeliver:         transient at MaxDeliver
//	    │                                             NakWithDelay(backoff);            publish to DLQ (original
//	    └──────────── redelivery ─────────────────────  key waits for it                 bytes + headers + reason),
//	                                                                                    then TermWithReason
//	                                                                                    (DLQ publish failed:
//	                                                                                     NakWithDelay, key waits)
//
// A transiently failed message is nak'd with an exponential delay
// (Options.BackoffInitial doubling up to BackoffMax) and its key waits for
// the redelivery: later messages of the key stay queued (kept alive with
// progress acks) until it is handled, so no later message overtakes it. If
// the redelivery never comes (the message was deleted from the stream, or
// another process took it) the key goes on after 2×AckWait past the delay.
//
// MaxDeliver is the application's threshold (consumer metadata
// MaxDeliverMetadata); the server's MaxDeliver is unlimited, so a message is
// never dropped by the server: a delivery beyond MaxDeliver (its last one
// ended in a crash or a failed dead-letter publish) is dead-lettered
// without calling the handler again. Dead letters are published with a
// deterministic Nats-Msg-Id, so a dead letter whose Term was lost is stored
// once.
//
// Acks are fire-and-forget: a lost ack means a redelivery, which the handler
// must tolerate (the state remembers the last stream sequence applied per
// key). On Close or context cancellation the engine stops fetching, lets
// in-flight handlers finish within Options.ShutdownTimeout (then cancels
// them: their messages are nak'd, never dead-lettered), and hands every
// queued message back with a nak: a key's first one at once, its later ones
// a moment after (and all of them after an awaited redelivery), so that the
// next worker receives each key in order.
//
// # Handlers and outputs
//
// A handler returns only when its outputs are stored: it publishes verdicts
// with a publisher.Batch and waits for the PubAcks, writes state with
// View.Update, then returns nil. Any error from those is transient: the
// input is redelivered and the same deterministic ids are deduplicated by
// the streams.
//
// # State views
//
// A View follows a KV bucket with a watch; Get reads memory, never the
// server. Writes are compare-and-set on the entry's revision (Update retries
// a merge function on conflicts) and are visible in the view at once; watch
// updates older than what the view holds are ignored. Staleness tells how
// long ago the view was last known to be caught up.
//
// # Audit replay
//
// Replay is the audit of all of the above: it reads the telemetry stream
// from its first sequence with an ordered consumer, applies every input with
// the same core (consumer/core) to a state in memory, in stream order, and
// compares the verdicts it derives with the verdict stream, by input and
// key, as canonical CloudEvents. It publishes nothing and writes no state.
//
//	TOOLSENTRY_VERDICTS ── index by (input, guard, key, agent) ─┐
//	TOOLSENTRY_DLQ ─────── dead-lettered sequences ─────────────┤
//	TOOLSENTRY_TELEMETRY ─ decode ─ core.Apply(MemState) ───────┴─▶ ReplayReport:
//	                        (what-if: a second MemState)             matched, mismatched, missing,
//	                                                                 extra, policy changed, what-if
//
// # Directives in force
//
// A second engine, with one worker and its own durable consumer on the
// verdict stream ("<prefix>-directives"), keeps the bucket
// toolsentry-directives: per (tool, agent), per tool and per composition,
// what the latest verdict tells agents to do (events.Directive, action
// PROCEED, MIGRATE or HALT). StartService starts it (Directives; disable
// with ServiceOptions.Directives.Disable); agents read it through
// publisher.Agent; `toolsentry baseline accept` calls AcceptDirectives.
package consumer
