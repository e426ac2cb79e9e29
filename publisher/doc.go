// Package publisher publishes messages with ids to JetStream: verdicts from
// handlers (asynchronously, awaited in batches) and raw telemetry from
// command-line tools and SDKs (Emitter).
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
package publisher
