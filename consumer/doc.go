// Package consumer is toolsentry's worker: it provisions the streams and KV
// buckets (Provision), runs an embedded nats-server when no cluster is
// given (StartServer), and runs the lanes of a deployment (Service) on the
// runtime of package engine, with the domain's handler: decode the
// CloudEvent, apply the pure core (consumer/core) to the state held in KV
// views, publish the verdicts, write the state.
//
// # Lanes
//
//	producers ─ <prefix>.telemetry.<kind>.<key> ─▶ TOOLSENTRY_TELEMETRY
//	               subject transform: stored as <prefix>.telemetry.<kind>.<p>.<key>,
//	               p = {{partition(N,2)}} of the key token
//
//	lane tools.0 … tools.N-1   the tool kinds (schema, invocation, operator
//	                           actions) of partition p: filter <kind>.<p>.*
//	lane composition           contract, workflow, quality, observed of
//	                           every partition: filter <kind>.*.*
//	lane directives            TOOLSENTRY_VERDICTS → toolsentry-directives
//
//	members bucket (TTL MemberTTL) ─▶ Assign: lane i → i-th live worker
//	leases bucket: per lane {owner, epoch, checkpoint, lag}, compare-and-set
//
// Every stored message is read by exactly one lane, so N workers on N
// partitions read the stream once between them. A worker announces itself
// in the members bucket every MemberTTL/4 (the value is its partition
// count: a worker that finds a member with another count stops with
// ErrPartitionsMismatch), assigns the lanes over the live members (round
// robin over the sorted names), and for each lane it owns takes the lane's
// lease (engine.AcquireLease) and runs an engine on it (engine.New): the
// runtime's Lanes does this with the worker's lane specs (service.go); an
// ordered consumer from the lease's checkpoint, batches per key, the
// checkpoint committed with compare-and-set on the lease. A lane that moves
// to another worker is stopped gracefully (in-flight calls finish, the
// checkpoint is committed, the outcome counts stored) and its lease
// released, so the new owner takes it at once; the new owner catches its
// state views up with the buckets before it reads (Store.CatchUp).
//
// Takeover. A worker that dies keeps its member entry until MemberTTL
// expires; the others notice within MemberTTL/4, and the new owner of each
// of its lanes takes the lease once it has watched it unrenewed for
// LeaseTTL on its own clock: within about MemberTTL + LeaseTTL (20s with
// the defaults, 5s in the chaos tests). A worker paused or cut off longer
// than LeaseTTL stops committing by its own clock before a successor can
// take over, and any commit it still tries fails the compare-and-set: it
// can never commit after its successor. What it applied and did not
// commit is read again by the successor and changes nothing twice.
//
// Changing N. Provision updates the stream's transform in place and
// records the first sequence stored under the new layout (layout_since).
// Each lane of the new layout first reads what lies below it, from the
// lowest checkpoint of the old layout's lanes, in every stored form, and
// applies its own keys, then goes on with its filters (engine.CatchUp); the
// 4-token messages of a stream from before the transform are read the
// same way. Replicas: the streams and every
// bucket (members and leases too) are created with Config.Replicas (3 on a
// cluster). Ordered consumers are ephemeral, in memory, R1: the server
// keeps no acknowledgement state for the lanes.
//
// Upgrade from the per-message-ack workers. A lane whose lease was never
// committed starts after the lowest ack floor of the durable consumers they
// left on the telemetry stream (<Durable>, <Durable>-<i>of<N>), the
// directives lane after that of <prefix>-directives on the verdicts: the
// history is not read again. Those consumers are then stale (toolsentry
// status lists them; nats consumer rm removes them).
//
// # Lag
//
// An ordered consumer does not show in nats consumer report. A lane's
// holder measures its lag (the consumer's pending count plus what it holds)
// every commit interval and stores it with its lease; ReadLag (serve's
// toolsentry_lag_events and /readyz) reads those, ReadStatus (toolsentry
// status) counts the messages at or after each checkpoint itself.
//
// # Handlers and outputs
//
// A handler call returns only when its outputs are stored: it publishes
// verdicts with a publisher.Batch and waits for the PubAcks, writes state
// with compare-and-set, then returns nil. Any error from those is
// transient: the key is handed again after a backoff, and the same
// deterministic ids are deduplicated by the streams.
//
// One kind of write is deferred: an invocation that only adds one outcome
// to its tool's counts. The store keeps the tool's outcome record in
// memory and stores it at every quality checkpoint, when a schema verdict
// moves the tool's chain head, every OutcomeFlushInterval and at a
// graceful stop (Store.Flush); after
// a crash or a takeover the record is rebuilt from the stored one and the
// tool's invocations since, read from the telemetry stream, which is the
// log of every count (outcomes.go). A compare-and-set per invocation was
// the largest cost of the pipeline.
//
// # Batches
//
// The Processor is every telemetry lane's handler (Processor.HandleBatch;
// Handle is a batch of one). One call applies a
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
// The directives lane reads the verdict stream, in order per tool (several
// tools at a time), and
// keeps the bucket toolsentry-directives: per (tool, agent), per tool and
// per composition, what the latest verdict tells agents to do
// (events.Directive, action PROCEED, MIGRATE or HALT). It is a lane like
// the others, so one worker at a time projects (disable it with
// ServiceOptions.Directives.Disable); agents read the bucket through the
// agent SDK; `toolsentry baseline accept` reaches it as the SCHEMA_MATCH
// verdict the tool's lane publishes for the accept.
package consumer
