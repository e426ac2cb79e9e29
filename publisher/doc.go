// Package publisher publishes messages with ids to JetStream: verdicts from
// handlers (asynchronously, awaited in batches) and raw telemetry from
// command-line tools and SDKs (Emitter); and it signs verdicts and audits
// their chains. The client that agents embed is package publisher/agent.
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
//	      head[chain] = events.VerdictDigest(msg.Data); msg.Digest = head[chain]
//	processor: signed := signer.Sign(msg) (takes msg.Digest) ─▶ publish
//	verify: Auditor.Add(seq, ...) for each verdict in stream order ─▶ AuditReport
//
// VerifyVerdict checks one verdict; an Auditor checks a whole stream:
// signatures, the chain of each events.ChainKey, and gaps in the stream's
// sequences, and names every tampered, untrusted, unsigned, missing,
// out-of-order or deleted verdict by stream sequence.
package publisher
