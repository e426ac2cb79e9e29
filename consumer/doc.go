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
// that other keys are not starved. Across processes, order per key comes
// from partitions (below); the engine orders within one process.
//
// # Scale-out: partitions across processes
//
// With Config.Partitions = 1 (the default) one durable consumer feeds one
// engine: a single worker. With N > 1, several `toolsentry serve` processes
// on one NATS cluster share N partitions:
//
//	TELEMETRY (stored as <prefix>.telemetry.<kind>.<p>.<key>, Config.Layout)
//	  ├── consumer <durable>-0ofN  (pinned-client priority group) ──▶ worker w1: engine 0
//	  ├── consumer <durable>-1ofN  (pinned-client priority group) ──▶ worker w2: engine 1
//	  └── ...
//	members bucket (KV, TTL = MemberTTL): w1, w2, ... ──▶ Assign: partition i → i-th live member
//
// How it works:
//
//   - A message belongs to partition PartitionOf(ordering key, N) (FNV-1a),
//     the ordering key of core.OrderingKey: contracts and workflows (the
//     composition lane) all land in one partition, every kind of one tool
//     in the tool's partition. The partition is computed by the worker, not
//     read from the partition token of the stored subject (below): every
//     partition consumer reads the whole stream, and its engine
//     acknowledges other partitions' messages at once (Options.Skip).
//   - Each worker announces itself in the members bucket every MemberTTL/4
//     (the value is its partition count: a worker that finds a member with
//     another count stops with ErrPartitionsMismatch) and lists the live
//     members as often; it runs one Engine per partition that Assign gives
//     it (round robin over the sorted names, as pcgroups distributes
//     partitions) and closes the engines of partitions it lost.
//   - The fence is the server's pinned-client priority group (nats-server ≥
//     2.11): a partition's consumer delivers to one pull client at a time,
//     even while two workers briefly disagree on the membership. A worker
//     keeps the pin by pulling every PinnedTTL/3.
//   - Handover keeps per-key order: on a new pin the engine holds every key,
//     catches its state views up with the buckets (OnPinned, Store.CatchUp),
//     and waits until the consumer's unacknowledged deliveries are either
//     acknowledged by the worker that held them or redelivered to it
//     (startRecovery, as at a start after a crash). A gap in the delivery
//     sequence under one pin (deliveries dropped as a slow consumer, or lost
//     with a node) holds the keys the same way.
//
// Takeover time. A worker that stops gracefully drains, hands its messages
// back, unpins its consumers and deletes its member entry: the others take
// its partitions on their next round, within MemberTTL/4 (2.5s by default).
// A worker that dies keeps its entry until MemberTTL expires; the others
// notice within MemberTTL/4 more and pull, the dead worker's pin has lapsed
// (PinnedTTL after its last pull), and its unacknowledged messages come back
// AckWait after their last delivery or progress ack. Its partitions move
// within MemberTTL + MemberTTL/4 (12.5s by default) and their keys run
// again within max(that, AckWait): about 30s with the defaults, 3s in the
// cluster test (AckWait 3s, MemberTTL 2s, PinnedTTL 3s).
//
// Replicas: the streams, every bucket (the members bucket too) and the
// partition consumers are created with Config.Replicas (3 on a cluster);
// the single durable consumer inherits the stream's.
//
// Changing N creates a new set of consumers ("-<i>of<N>"), which starts
// after the lowest ack floor of the toolsentry consumers already on the
// stream, the single worker's included (inputs above it that were already
// applied are skipped by the state's last-applied sequence). Stop every
// worker of the old layout before starting the new one; the old consumers
// stay until deleted (nats consumer rm). Provision updates the telemetry
// stream's transform to the new N in place (a worker whose N differs from
// the stream's does not refuse to start: the stream follows the workers'
// count) and records where the new layout starts (below).
//
// The stored subject. Provision gives the telemetry stream the layout of
// Config.Layout (consumer/engine.Layout): its subjects are the published
// form <prefix>.telemetry.<kind>.* of the telemetry kinds only, and its
// subject transform stores <prefix>.telemetry.<kind>.<p>.<key>, p =
// {{partition(N,2)}}, a hash of the key token. The lanes of consumer/engine
// filter on it: tool partition i reads <prefix>.telemetry.<k>.<i>.* of the
// tool kinds, the composition lane the composition kinds of every p, so
// every stored message is read by one lane. A subject of another kind or
// shape is refused at publish (no stream takes it) rather than stored where
// no lane reads it. A telemetry stream of an earlier version (subjects
// <prefix>.telemetry.>, no transform) is updated in place; the messages it
// holds keep their 4-token subjects, and every reader of stored subjects
// (events.Names.ParseSubject and Decode, KindToken, the outcome log's
// rebuild, Replay, the dead letters' original subject) reads both forms.
// The partition consumers here do not use the token yet.
//
// The stream records its layout in its metadata (engine.StreamLayout,
// Resources.Layout): the layout's Name ("partition(4)") and Since, the
// first sequence stored under it: 1 for a stream created with it, the
// last sequence + 1 after the update for one whose layout changed (the
// 4-token form of an earlier version, or another N). The update sets the
// transform first, with no record, then the record, so everything stored
// under an earlier layout is below Since. A lane of the layout starts at
// its checkpoint or Since, whichever is later; what lies below Since from
// the lowest checkpoint of the earlier layout's lanes (or the stream's
// first sequence) is read once, in stream order and whatever its subject
// (<prefix>.telemetry.>), before the lanes start: a message stored under
// another N carries a partition token that no lane of this one may read,
// and the state's last applied sequence per key makes reading an applied
// input again change nothing.
//
// Why not orbit.go pcgroups. Static groups transform the stream as above
// but fix the membership at creation. Elastic groups copy the stream into
// a work-queue stream: twice the storage, a sourcing hop, handlers that see the copy's sequence
// numbers instead of the telemetry stream's (which verdicts cite and the
// state uses for idempotence), subjects outside the partitioning filters
// (junk that must be dead-lettered) never consumed, and a membership that
// only an administrator changes: a dead member keeps its partitions. We use
// what they rest on, the pinned-client priority group, and their balanced
// assignment. The price of partitioning in the worker: each partition
// consumer delivers every message, so deliveries and acks grow with N
// (MaxPartitions is 64): a skipped message costs a delivery and an ack.
// That is cheap next to the guard pipeline (verdict PubAcks and KV
// compare-and-sets, ~5k events/s per process) but not next to a trivial
// handler: on 2 cores, BenchmarkPartitioned moves 34k events/s through one
// engine, 14k through 3 partitions in one process and 18k through 3
// in-process workers sharing 3 partitions (one server and every worker on
// the same 2 cores). Partitions pay off when workers run on their own
// machines and the handler is the bottleneck; with N equal to the number of
// workers each worker reads the stream once and handles 1/N of it.
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
// One kind of write is deferred: an invocation that only adds one outcome
// to its tool's counts. The store keeps the tool's outcome record in
// memory and stores it at every quality checkpoint, when a schema verdict
// moves the tool's chain head, every OutcomeFlushInterval and at a
// graceful stop (Store.Flush); after
// a crash or a handover the record is rebuilt from the stored one and the
// tool's invocations since, read from the telemetry stream, which is the
// log of every count (outcomes.go). A compare-and-set per invocation was
// the largest cost of the pipeline.
//
// # Batches
//
// The Processor is also the batch engine's handler (consumer/engine,
// Processor.HandleBatch; Handle is a batch of one). One call applies a
// key's consecutive inputs over one transaction through a core.Batch, so
// that each input reads the writes of the ones before it; it publishes
// every verdict and checkpoint of the call and awaits the PubAcks once,
// then writes the state: each run of inputs without verdicts as one commit
// holding each record's last write, and each input with verdicts (or an
// operator's action) as a commit of its own, whose order of writes is what
// makes it safe to apply again after a crash between them. A bad input is
// that message's permanent result; any failure to read, publish or write
// is transient for the whole call, which the engine hands again from its
// first message: every step is idempotent.
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
// verdict stream ("<prefix>-directives"; with partitions it is pinned, so
// that of several workers one projects and the others stand by), keeps the
// bucket toolsentry-directives: per (tool, agent), per tool and per
// composition, what the latest verdict tells agents to do
// (events.Directive, action PROCEED, MIGRATE or HALT). StartService starts
// it (Directives; disable with ServiceOptions.Directives.Disable); agents
// read it through agent.Agent; `toolsentry baseline accept` reaches
// it as the SCHEMA_MATCH verdict the tool's lane publishes for the accept.
package consumer
