package mcpproxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// Sink receives the proxy's telemetry events.
type Sink interface {
	// Send hands msg over for publishing. It must not block: a sink that
	// cannot keep up drops the event and counts it. Safe for concurrent
	// use.
	Send(msg events.Message)
}

// Defaults of SinkOptions.
const (
	DefaultQueue      = 4096
	DefaultAckTimeout = 2 * time.Second
	sinkBatch         = 128
)

// SinkOptions tune a JetStreamSink. Zero fields take defaults.
type SinkOptions struct {
	// Queue is how many events may wait to be published (default
	// DefaultQueue); Send drops beyond it.
	Queue int
	// AckTimeout bounds the wait for a batch's acknowledgements (default
	// DefaultAckTimeout).
	AckTimeout time.Duration
}

// SinkStats counts a JetStreamSink's events.
type SinkStats struct {
	Stored     int64 // stored by the stream
	Duplicates int64 // already in the stream (same id)
	Dropped    int64 // not queued: the queue was full, or the sink closed
	Failed     int64 // published but not acknowledged
}

// JetStreamSink publishes events to the telemetry stream from a goroutine
// of its own, in batches awaited together, so that Send never waits for
// NATS. Create it with NewJetStreamSink; Close it to publish what is
// queued.
type JetStreamSink struct {
	queue chan events.Message
	done  chan struct{}

	mu     sync.RWMutex // guards closed against Send
	closed bool
	once   sync.Once

	stored, duplicates, dropped, failed atomic.Int64
}

// NewJetStreamSink returns a sink publishing on nc to names' telemetry
// subjects. Failures are logged through the logger of ctx, one line per
// failed batch; ctx's end does not stop the sink (Close does), so that the
// events of a session that is being shut down still go out.
func NewJetStreamSink(ctx context.Context, nc *nats.Conn, names events.Names, opts SinkOptions) (*JetStreamSink, error) {
	if opts.Queue == 0 {
		opts.Queue = DefaultQueue
	}
	if opts.AckTimeout == 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.Queue < 1 || opts.AckTimeout < 0 {
		return nil, ErrInvalidConfig
	}
	pub, err := publisher.New(nc, publisher.Options{AckTimeout: opts.AckTimeout, MaxPending: sinkBatch * 2})
	if err != nil {
		return nil, err
	}
	s := &JetStreamSink{queue: make(chan events.Message, opts.Queue), done: make(chan struct{})}
	em := publisher.NewEmitter(pub, names.Prefix()+".telemetry")
	go s.run(context.WithoutCancel(ctx), em, opts.AckTimeout)
	return s, nil
}

// Send queues msg, or drops it when the queue is full or the sink closed.
func (s *JetStreamSink) Send(msg events.Message) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	select {
	case s.queue <- msg:
	default:
		s.dropped.Add(1)
	}
}

// Stats returns the counts so far.
func (s *JetStreamSink) Stats() SinkStats {
	return SinkStats{Stored: s.stored.Load(), Duplicates: s.duplicates.Load(), Dropped: s.dropped.Load(), Failed: s.failed.Load()}
}

// Close stops accepting events and waits until the queued ones are
// published or ctx ends (then they count as failed once their
// acknowledgements time out; Close returns ctx's error). Idempotent.
func (s *JetStreamSink) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.queue)
		s.mu.Unlock()
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *JetStreamSink) run(ctx context.Context, em *publisher.Emitter, ackTimeout time.Duration) {
	defer close(s.done)
	log := zerolog.Ctx(ctx)
	for {
		msg, ok := <-s.queue
		if !ok {
			return
		}
		n := 1
		_ = em.Emit(ctx, msg.Subject, msg.ID, msg.Header, msg.Data) // Flush reports a failure again
		open := true
	batch:
		for n < sinkBatch {
			select {
			case msg, open = <-s.queue:
				if !open {
					break batch
				}
				_ = em.Emit(ctx, msg.Subject, msg.ID, msg.Header, msg.Data)
				n++
			default:
				break batch
			}
		}
		fctx, cancel := context.WithTimeout(ctx, ackTimeout+time.Second)
		res, err := em.Flush(fctx)
		cancel()
		s.stored.Add(int64(res.Stored))
		s.duplicates.Add(int64(res.Duplicates))
		if failed := n - res.Stored - res.Duplicates; failed > 0 {
			s.failed.Add(int64(failed))
			if err == nil {
				err = errors.New("not acknowledged")
			}
			log.Warn().Int("events", failed).Err(firstError(err)).Msg("mcp-proxy: telemetry not published (the MCP session is not affected)")
		}
		if !open {
			return
		}
	}
}

// firstError keeps a log line short: the first of joined errors.
func firstError(err error) error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		if errs := j.Unwrap(); len(errs) > 0 {
			return errs[0]
		}
	}
	return err
}
