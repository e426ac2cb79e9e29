package publisher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoMsgID is returned when a message is published without an id: the id
// is what lets the stream drop a republished duplicate.
var ErrNoMsgID = errors.New("message id is required")

// ErrNotAcked is returned (wrapped, with the subject and id, and joined for
// every failed message) by Batch.Wait and Emitter.Flush when the stream did
// not acknowledge a message: the caller must not consider it stored, and a
// consumer naks its input. When no stream took the subject it also matches
// ErrNoStream.
var ErrNotAcked = errors.New("publish not acknowledged")

// ErrInvalidSubject is returned by Emitter.Emit for a subject outside the
// emitter's prefix, with wildcards or empty tokens.
var ErrInvalidSubject = errors.New("invalid subject")

// ErrInvalidConfig is returned by New for unusable Options.
var ErrInvalidConfig = errors.New("invalid configuration")

// Defaults of Options.
const (
	DefaultMaxPending = 256
	DefaultAckTimeout = 5 * time.Second
)

// Options tune a Publisher. Zero fields take defaults.
type Options struct {
	// MaxPending bounds the asynchronous publishes awaiting their PubAck
	// on the connection (default 256). A publish beyond it waits for a
	// slot, up to the context's deadline or AckTimeout.
	MaxPending int
	// AckTimeout is how long an asynchronous publish waits for its PubAck
	// before it fails with jetstream.ErrAsyncPublishTimeout (default 5s).
	AckTimeout time.Duration
}

// Publisher publishes messages with ids to JetStream streams. It is safe for
// concurrent use; a Batch is not.
type Publisher struct {
	js   jetstream.JetStream
	opts Options
}

// New returns a publisher on nc with its own JetStream context, so that its
// bound on pending publishes and its ack timeout apply to it alone.
func New(nc *nats.Conn, opts Options) (*Publisher, error) {
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.AckTimeout == 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.MaxPending < 1 || opts.AckTimeout < 0 {
		return nil, fmt.Errorf("%w: max pending %d, ack timeout %s", ErrInvalidConfig, opts.MaxPending, opts.AckTimeout)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("creating jetstream context: %w", err)
	}
	return &Publisher{js: js, opts: opts}, nil
}

func (p *Publisher) msg(subject, id string, header nats.Header, data []byte) (*nats.Msg, error) {
	if id == "" {
		return nil, fmt.Errorf("publishing to %s: %w", subject, ErrNoMsgID)
	}
	h := make(nats.Header, len(header)+1)
	for k, v := range header {
		h[k] = slices.Clone(v)
	}
	return &nats.Msg{Subject: subject, Header: h, Data: data}, nil
}

// Publish sends one message asynchronously, with id as its Nats-Msg-Id so
// that the stream drops a republished duplicate, and returns the future of
// its PubAck without waiting for it. When MaxPending publishes are
// outstanding it waits for a slot until ctx's deadline (or AckTimeout).
// header is copied, data is not: keep it unchanged until the ack.
func (p *Publisher) Publish(ctx context.Context, subject, id string, header nats.Header, data []byte) (jetstream.PubAckFuture, error) {
	m, err := p.msg(subject, id, header, data)
	if err != nil {
		return nil, err
	}
	stall := p.opts.AckTimeout
	if dl, ok := ctx.Deadline(); ok {
		stall = time.Until(dl)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("publishing to %s: %w", subject, err)
	}
	f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(max(stall, time.Millisecond)))
	if err != nil {
		return nil, fmt.Errorf("publishing to %s: %w", subject, err)
	}
	return f, nil
}

// PublishSync sends one message and waits for its PubAck: the convenience
// for command-line tools, one round trip per message.
func (p *Publisher) PublishSync(ctx context.Context, subject, id string, header nats.Header, data []byte) (*jetstream.PubAck, error) {
	m, err := p.msg(subject, id, header, data)
	if err != nil {
		return nil, err
	}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
	if err != nil {
		return nil, fmt.Errorf("%w: subject %s id %s: %w", ErrNotAcked, subject, id, NoStream(subject, err))
	}
	return ack, nil
}

// NewBatch returns an empty batch of asynchronous publishes.
func (p *Publisher) NewBatch() *Batch { return &Batch{p: p} }

// Result counts the acknowledged messages of a batch.
type Result struct {
	// Stored is the number of messages the stream stored.
	Stored int
	// Duplicates is the number of messages the stream had already stored
	// under the same id within its duplicate window, and dropped.
	Duplicates int
}

// Batch collects asynchronous publishes and waits for all their PubAcks at
// once: a handler publishes its verdicts, waits, and acknowledges its input
// only if Wait returned nil. A Batch is used by one goroutine at a time.
type Batch struct {
	p       *Publisher
	pending []pending
	failed  []error
}

type pending struct {
	subject, id string
	f           jetstream.PubAckFuture
}

// Publish sends one message asynchronously as part of the batch (see
// Publisher.Publish). An error here means the message was not sent;
// Wait reports it again, so a caller may just publish everything and Wait.
func (b *Batch) Publish(ctx context.Context, subject, id string, header nats.Header, data []byte) error {
	f, err := b.p.Publish(ctx, subject, id, header, data)
	if err != nil {
		b.failed = append(b.failed, fmt.Errorf("%w: %w", ErrNotAcked, err))
		return err
	}
	b.pending = append(b.pending, pending{subject: subject, id: id, f: f})
	return nil
}

// Len is the number of messages published since the last Wait.
func (b *Batch) Len() int { return len(b.pending) + len(b.failed) }

// Wait waits for the PubAck of every message published since the last Wait
// and empties the batch. It returns the counts of the acknowledged ones and,
// if any message failed or ctx ended first, an error matching ErrNotAcked
// (or ctx's error) that joins every failure.
func (b *Batch) Wait(ctx context.Context) (Result, error) {
	var res Result
	errs := b.failed
	for _, pd := range b.pending {
		select {
		case ack := <-pd.f.Ok():
			if ack.Duplicate {
				res.Duplicates++
			} else {
				res.Stored++
			}
		case err := <-pd.f.Err():
			errs = append(errs, fmt.Errorf("%w: subject %s id %s: %w", ErrNotAcked, pd.subject, pd.id, NoStream(pd.subject, err)))
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%w: subject %s id %s: %w", ErrNotAcked, pd.subject, pd.id, ctx.Err()))
		}
	}
	b.pending, b.failed = b.pending[:0], nil
	return res, errors.Join(errs...)
}

// Emitter sends raw telemetry (bodies and headers as given, each with its
// id) to the telemetry stream, as `toolsentry emit` and SDKs do. Emit is
// asynchronous; Flush waits for the acknowledgements. It is safe for
// concurrent use.
type Emitter struct {
	prefix string
	mu     sync.Mutex
	batch  *Batch
}

// NewEmitter returns an emitter that accepts subjects under prefix (for
// example "toolsentry.telemetry").
func NewEmitter(p *Publisher, prefix string) *Emitter {
	return &Emitter{prefix: prefix + ".", batch: p.NewBatch()}
}

// Emit publishes body with header on subject, with id as its Nats-Msg-Id.
func (e *Emitter) Emit(ctx context.Context, subject, id string, header nats.Header, body []byte) error {
	if err := e.checkSubject(subject); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.batch.Publish(ctx, subject, id, header, body)
}

// Flush waits for the PubAck of everything emitted since the last Flush.
func (e *Emitter) Flush(ctx context.Context) (Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.batch.Wait(ctx)
}

func (e *Emitter) checkSubject(subject string) error {
	rest, ok := strings.CutPrefix(subject, e.prefix)
	if !ok || rest == "" {
		return fmt.Errorf("%w: %q is not under %s", ErrInvalidSubject, subject, strings.TrimSuffix(e.prefix, "."))
	}
	for tok := range strings.SplitSeq(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("%w: %q", ErrInvalidSubject, subject)
		}
	}
	return nil
}
