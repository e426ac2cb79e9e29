// Package publisher publishes messages with ids to JetStream: verdicts from
// handlers (asynchronously, awaited in batches), raw telemetry from
// command-line tools and SDKs (Emitter), and the client that agents embed
// (Agent): invocation telemetry off the call path, and calls guarded by the
// directives in force.
//
// Every message carries an id as its Nats-Msg-Id, so a stream drops a
// message it already stored within its duplicate window: a handler whose
// input is redelivered republishes the same verdict ids and nothing is
// stored twice.
//
// The lifecycle of a batch inside a handler:
//
//	b := pub.NewBatch()
//	b.Publish(ctx, subject, id, header, data)   ─▶ PublishMsgAsync (at most MaxPending in flight;
//	b.Publish(...)                                  beyond that, wait for a slot)
//	res, err := b.Wait(ctx)                      ◀─ every PubAck, or ErrNotAcked joining the failures
//	err != nil: return it (transient) ─▶ the engine naks the input; redelivery republishes the same ids
//	err == nil: return nil            ─▶ the engine acks the input
//
// Publisher.PublishSync is the one-round-trip convenience for CLIs.
//
// # Signed verdicts and their audit
//
// A Signer (an ed25519 key in the NATS nkeys format, server type, from
// `toolsentry keygen`) adds to each verdict the signature attribute of the
// CloudEvents verifiability extension: a DSSE envelope over the verdict's
// events.VerdictDigest, with the public key as keyid. The digest covers the
// chain link (events.AttrPrevious), so a verdict names its predecessor
// under signature:
//
//	core: msg := names.NewSchemaVerdict(v, t, events.WithPrevious(head[chain]))
//	      head[chain] = events.VerdictDigest(msg.Data)
//	processor: signed := signer.Sign(msg) ─▶ publish
//	verify: Auditor.Add(seq, ...) for each verdict in stream order ─▶ AuditReport
//
// VerifyVerdict checks one verdict; an Auditor checks a whole stream:
// signatures, the chain of each events.ChainKey, and gaps in the stream's
// sequences, and names every tampered, untrusted, unsigned, missing,
// out-of-order or deleted verdict by stream sequence.
//
// # The agent's client
//
// Agent is what an agent embeds to close the loop (see ExampleAgent):
//
//	agent, _ := publisher.NewAgent(ctx, nc, publisher.AgentOptions{AgentID: "billing-7"})
//	args, err := agent.Guard(ctx, "crm.lookup", args)   ◀─ local view of the agent's directives
//	var halt *publisher.HaltError                          (KV watch on schema.*.<agent>, schema.*,
//	if errors.As(err, &halt) { ... do not call ... }        composition.*): no round trip per call
//	... call the tool with args (rewritten by the migration in force) ...
//	agent.Emit(publisher.Invocation{Tool: "crm.lookup", Arguments: args})
//	    ─▶ bounded queue ─▶ batched async publishes ─▶ TOOLSENTRY_TELEMETRY
//	       (full or NATS down: dropped and counted in Stats, never blocking)
//	d, err := agent.Workflow(ctx, "etl")                  ◀─ a degraded composition is a *HaltError
//
// Guard's answer is the payload's, under the directive in force: PROCEED
// (or no directive) sends it as given; under MIGRATE or HALT it is judged
// against the tool's current input schema, which the view follows in the
// baselines bucket (ToolState): migrated by the verdict's
// guards.MigrationPlan when the result fits, as given when it already fits
// (the agent speaks the new version), else a HALT whose Cause is the
// plan's blocker it hits or ErrDoesNotFit with the places that do not fit.
// Without a known current schema the directive's action applies as it is.
// Guard has the shape of a call hook, func(ctx, tool, args) (args, error),
// for proxies; DirectiveView.Guard decides for any agent (the HTTP endpoint
// of `toolsentry serve` uses it).
package publisher
