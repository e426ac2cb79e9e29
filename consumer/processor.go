package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// VerdictObserver is told of every verdict the processor stored, for
// metrics. Labels are low-cardinality: guard and verdict name, never a tool
// or agent id.
type VerdictObserver interface {
	OnVerdict(guard, verdict string, duplicate bool)
}

// ProcessorOptions configure a Processor.
type ProcessorOptions struct {
	// Names are the subjects and buckets (default prefix toolsentry).
	Names events.Names
	// Core tunes the decision step (Names is taken from above).
	Core core.Options
	// ConflictAttempts bounds how often one input (with HandleBatch, the
	// whole batch) is applied again after a compare-and-set conflict on its
	// state before the conflict is treated as a transient failure (default
	// 5).
	ConflictAttempts int
	// Verdicts is told of every verdict stored (default: nobody).
	Verdicts VerdictObserver
	// Signer signs each verdict before it is published (default: none,
	// verdicts are published unsigned).
	Signer Signer
}

// Processor is the Handler that turns telemetry into verdicts: decode the
// CloudEvent, apply the core to the store's state, publish the verdicts and
// wait for their acknowledgements, then write the state. The engine acks the
// input only after Handle returns nil. The Processor is also the batch
// engine's engine.BatchHandler (HandleBatch, batch.go): Handle is a batch
// of one message, on the same code path.
//
//	decode ─ bad ──────────────────────────────▶ Permanent(reason): dead letter
//	   │
//	core.Apply(state) ─ bad ───────────────────▶ Permanent(reason): dead letter
//	   │
//	publish verdicts and quality checkpoints,
//	await PubAcks ─ failed ────────────────────▶ transient: nak, retried
//	   │
//	write state (compare-and-set) ─ conflict ──▶ apply again on fresh state
//	   │
//	nil: the engine acks
type Processor struct {
	opts  ProcessorOptions
	core  *core.Core
	store *Store
	pub   *publisher.Publisher
}

// NewProcessor returns a processor over the store, publishing with pub.
func NewProcessor(store *Store, pub *publisher.Publisher, opts ProcessorOptions) *Processor {
	if opts.ConflictAttempts <= 0 {
		opts.ConflictAttempts = 5
	}
	opts.Core.Names = opts.Names
	return &Processor{opts: opts, core: core.New(opts.Core), store: store, pub: pub}
}

// Handle implements Handler: it is HandleBatch of one message, its
// permanent failure returned as this package's *PermanentError.
func (p *Processor) Handle(ctx context.Context, m *Message) error {
	err := p.apply(ctx, []rawInput{{subject: m.Subject, header: m.Header, data: m.Data, seq: m.StreamSeq}})[0]
	var pe *engine.PermanentError
	if errors.As(err, &pe) {
		return Permanent(pe.Reason, pe.Err)
	}
	return err
}

// publish stores the verdicts and the telemetry for other lanes, and waits
// for every acknowledgement.
func (p *Processor) publish(ctx context.Context, verdicts, telemetry []events.Message) error {
	if len(verdicts) == 0 && len(telemetry) == 0 {
		return nil
	}
	b := p.pub.NewBatch()
	for _, v := range verdicts {
		v, err := p.sign(v)
		if err != nil {
			return err
		}
		if err := b.Publish(ctx, v.Subject, v.ID, nats.Header(v.Header), v.Data); err != nil {
			return fmt.Errorf("publishing verdict %s: %w", v.ID, err)
		}
	}
	// Checkpoints go in a batch of their own, so that the stream's count
	// of duplicates below is the verdicts' alone.
	var tb *publisher.Batch
	if len(telemetry) > 0 {
		tb = p.pub.NewBatch()
	}
	for _, t := range telemetry {
		if err := tb.Publish(ctx, t.Subject, t.ID, nats.Header(t.Header), t.Data); err != nil {
			return fmt.Errorf("publishing %s: %w", t.Subject, err)
		}
	}
	res, err := b.Wait(ctx)
	if tb != nil {
		if _, terr := tb.Wait(ctx); terr != nil {
			err = errors.Join(err, fmt.Errorf("storing %d telemetry events: %w", len(telemetry), terr))
		}
	}
	if err != nil {
		return fmt.Errorf("storing %d verdicts: %w", len(verdicts), err)
	}
	if o := p.opts.Verdicts; o != nil {
		dups := res.Duplicates
		for _, v := range verdicts {
			guard, verdict := verdictLabels(v.Subject)
			o.OnVerdict(guard, verdict, dups > 0)
			dups--
		}
	}
	return nil
}

// verdictLabels reads guard and verdict from a verdict subject
// (<prefix>.verdicts.<guard>.<verdict>.<key>).
func verdictLabels(subject string) (guard, verdict string) {
	_, rest, _ := strings.Cut(subject, ".verdicts.")
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) < 2 {
		return "unknown", "unknown"
	}
	return parts[0], parts[1]
}

// permanent marks bad input with its dead-letter reason.
func permanent(err error) error { return Permanent(reasonFor(err), err) }
