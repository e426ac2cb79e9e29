package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// HandleBatch implements engine.BatchHandler: it applies consecutive
// inputs of one ordering key, in stream order, as one step.
//
//	decode each ─ bad ─────────────────────────▶ that one permanent (its reason)
//	   │
//	core.Batch over one transaction: input k+1
//	reads input k's writes ─ bad ──────────────▶ that one permanent, the rest go on
//	   │
//	publish every verdict and checkpoint of the
//	batch, await the PubAcks once ─ failed ────▶ all transient: the key retries
//	   │
//	write the state once per record (a verdict's
//	input in its own commit) ─ conflict ───────▶ apply the batch again on fresh state
//	   │
//	nil: applied
//
// A failure to read or write the state or to publish is transient for every
// message of the call: the engine hands the key again from the first one,
// and everything is idempotent (deterministic verdict ids, each record's
// LastSeq). Handle is HandleBatch of one message.
func (p *Processor) HandleBatch(ctx context.Context, key string, msgs []*engine.Message) []error {
	ins := make([]rawInput, len(msgs))
	for i, m := range msgs {
		ins[i] = rawInput{subject: m.Subject, header: m.Header, data: m.Data, seq: m.StreamSeq}
	}
	results := p.apply(ctx, ins)
	for _, err := range results {
		if err != nil {
			return results
		}
	}
	return nil
}

// EngineKey is the engine.Options.Key of the telemetry stream: the
// ordering key (core.OrderingKey) of the stored subject's kind and key
// tokens, so a tool's inputs are one key and the composition lane's kinds
// another.
func EngineKey(m *engine.Message) string {
	return core.OrderingKey(kindToken(m.Subject), engine.LastToken(m))
}

// rawInput is one stream message to apply.
type rawInput struct {
	subject string
	header  nats.Header
	data    []byte
	seq     uint64
}

// apply applies the inputs (of one ordering key, in stream order) and
// returns one result per input: nil (applied), an error matching
// engine.ErrPermanent with the reason (bad input), or a transient error
// (the same for every input).
func (p *Processor) apply(ctx context.Context, ins []rawInput) []error {
	results := make([]error, len(ins))
	decoded := make([]core.Input, 0, len(ins))
	at := make([]int, 0, len(ins)) // index in ins of each decoded input
	for i, in := range ins {
		ev, err := p.opts.Names.Decode(in.subject, in.header, in.data)
		if err != nil {
			results[i] = engine.Permanent(reasonFor(err), err)
			continue
		}
		decoded = append(decoded, core.Input{Event: ev, Subject: in.subject, Seq: in.seq})
		at = append(at, i)
	}
	if len(decoded) == 0 {
		return results
	}
	transient := func(err error) []error {
		for _, i := range at {
			results[i] = err
		}
		return results
	}
	for attempt := 1; ; attempt++ {
		// The transaction stands for the state before the batch's first
		// input: a deferred outcome record not in memory is rebuilt from
		// the stream up to it (outcomes.go), and the batch's own inputs
		// reach it through the batch's writes.
		tx := p.store.BeginAt(decoded[0].Seq)
		b := p.core.NewBatch(tx)
		var verdicts, telemetry []events.Message
		for j, in := range decoded {
			eff, err := b.Apply(in)
			if terr := tx.Err(); terr != nil {
				return transient(terr) // the state cannot be read: retried, then dead-lettered
			}
			if err != nil {
				results[at[j]] = engine.Permanent(reasonFor(err), err)
				continue
			}
			results[at[j]] = nil
			verdicts = append(verdicts, eff.Verdicts...)
			telemetry = append(telemetry, eff.Telemetry...)
		}
		if err := p.publish(ctx, verdicts, telemetry); err != nil {
			return transient(err)
		}
		err := p.commit(ctx, tx, b.Commits())
		if err == nil {
			return results
		}
		if !errors.Is(err, ErrConflict) || attempt >= p.opts.ConflictAttempts {
			return transient(fmt.Errorf("writing state of %s: %w", decoded[0].Subject, err))
		}
		zerolog.Ctx(ctx).Debug().Uint64("seq", decoded[0].Seq).Int("inputs", len(decoded)).Int("attempt", attempt).
			Msg("state changed under the inputs; applying them again")
	}
}

// commit stores the batch's commits in order.
func (p *Processor) commit(ctx context.Context, tx *Txn, commits [][]core.Write) error {
	for _, writes := range commits {
		if err := tx.Commit(ctx, writes); err != nil {
			return err
		}
	}
	return nil
}

// reasonFor is the dead-letter reason of bad input.
func reasonFor(err error) string {
	if r, ok := events.ReasonFor(err); ok {
		return string(r)
	}
	if errors.Is(err, core.ErrUnsupported) {
		return string(events.ReasonUnknownType)
	}
	return ReasonPermanent
}
