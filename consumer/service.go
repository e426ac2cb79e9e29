package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// ServiceOptions configure a Service: the NATS resources, the engine, the
// processor, the state views and the verdict publisher.
type ServiceOptions struct {
	Config    Config
	Engine    Options
	Processor ProcessorOptions
	Views     ViewOptions
	Publisher publisher.Options
	// Directives configures the projector of directives in force
	// (directives.go).
	Directives DirectivesOptions
	// Member names this worker among the workers that share the
	// partitions when Config.Partitions > 1 (default DefaultMember()).
	Member string
	// OutcomeFlushInterval is how often the outcome counts held in memory
	// are stored while the service runs (Store.Flush; default
	// DefaultOutcomeFlushInterval). It bounds how long a tool's counts
	// depend on the telemetry stream keeping its invocations: a quiet tool
	// may not reach its next quality checkpoint for days, longer than the
	// stream's max age.
	OutcomeFlushInterval time.Duration
}

// DefaultOutcomeFlushInterval is ServiceOptions.OutcomeFlushInterval's
// default.
const DefaultOutcomeFlushInterval = 30 * time.Second

// Service is a running toolsentry worker: resources provisioned, state
// views loaded, the processor consuming. `toolsentry serve` runs one; tests
// and the benchmark run them in-process.
type Service struct {
	Resources *Resources
	Store     *Store
	Engine    *Engine // the engine of a single worker; nil when partitioned
	Group     *Group  // the partitioned worker; nil when Config.Partitions is 1

	pub      *publisher.Publisher
	log      zerolog.Logger
	flushInt time.Duration
	ready    atomic.Bool
	stopping atomic.Bool

	directives *Directives // nil when disabled
}

// StartService provisions the resources on nc, loads the state views and
// builds the engine. Call Run to consume.
func StartService(ctx context.Context, nc *nats.Conn, opts ServiceOptions) (*Service, error) {
	names, err := events.NewNames(opts.Config.withDefaults().Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	opts.Processor.Names = names
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("creating jetstream context: %w", err)
	}
	res, err := provision(ctx, js, opts.Config)
	if err != nil {
		return nil, err
	}
	store, err := OpenStore(ctx, res, opts.Views)
	if err != nil {
		return nil, fmt.Errorf("loading state: %w", err)
	}
	pub, err := publisher.New(nc, opts.Publisher)
	if err != nil {
		store.Close()
		return nil, err
	}
	proc := NewProcessor(store, pub, opts.Processor)
	if opts.Engine.Key == nil {
		opts.Engine.Key = func(m *Message) string { return core.OrderingKey(KindToken(m), LastToken(m)) }
	}
	if opts.Engine.DeadLetterSubject == nil {
		cfg := res.Config
		opts.Engine.DeadLetterSubject = func(_, reason string) string { return cfg.DeadLetterSubject(reason) }
	}
	s := &Service{Resources: res, Store: store, pub: pub, log: *zerolog.Ctx(ctx), flushInt: opts.OutcomeFlushInterval}
	if s.flushInt <= 0 {
		s.flushInt = DefaultOutcomeFlushInterval
	}
	if res.Config.Partitions > 1 {
		if opts.Member == "" {
			opts.Member = DefaultMember()
		}
		if opts.Engine.OnPinned == nil {
			opts.Engine.OnPinned = store.CatchUp
		}
		s.Group, err = NewGroup(js, res, proc, opts.Member, opts.Engine)
	} else {
		s.Engine, err = New(js, res.Consumer, proc, opts.Engine)
	}
	if err != nil {
		store.Close()
		return nil, err
	}
	if s.directives, err = startServiceDirectives(ctx, js, res, opts); err != nil {
		store.Close()
		return nil, err
	}
	s.ready.Store(true)
	zerolog.Ctx(ctx).Info().Str("stream", res.Config.TelemetryStream()).Str("consumer", res.Config.Durable).
		Int("partitions", res.Config.Partitions).Int("replicas", res.Config.Replicas).Msg("streams, buckets and consumer ready")
	return s, nil
}

// flushTimeout bounds Store.Flush at Close.
const flushTimeout = 5 * time.Second

// Run consumes until ctx is cancelled or Close is called; see Engine.Run.
func (s *Service) Run(ctx context.Context) error {
	defer s.runDirectives(ctx)()
	flushCtx, stopFlush := context.WithCancel(ctx)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		s.flushOutcomes(flushCtx)
	}()
	defer func() {
		stopFlush()
		<-flushed
	}()
	var err error
	if s.Group != nil {
		err = s.Group.Run(ctx)
	} else {
		err = s.Engine.Run(ctx)
	}
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// flushOutcomes stores the outcome counts held in memory every flushInt
// until ctx ends; Close stores them a last time.
func (s *Service) flushOutcomes(ctx context.Context) {
	t := time.NewTicker(s.flushInt)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		n, err := s.Store.Flush(fctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Int("stored", n).Msg("storing the outcome counts held in memory failed; trying again at the next interval")
		} else if n > 0 {
			s.log.Debug().Int("tools", n).Msg("stored the outcome counts held in memory")
		}
	}
}

// Ready reports whether the service consumes and is not shutting down: the
// answer of /readyz.
func (s *Service) Ready() bool { return s.ready.Load() && !s.stopping.Load() }

// Close shuts down in order: readiness off, the engine drained (in-flight
// handlers finish under the engine's ShutdownTimeout, which also covers
// their pending publishes), the outcome counts held in memory stored
// (Store.Flush, within flushTimeout: what is not stored is rebuilt from the
// stream at the next start), then the state views. It is idempotent.
func (s *Service) Close() error {
	if s.stopping.Swap(true) {
		return nil
	}
	var err error
	if s.Group != nil {
		err = s.Group.Close()
	} else {
		err = s.Engine.Close()
	}
	err = errors.Join(err, s.closeDirectives())
	fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	n, ferr := s.Store.Flush(fctx)
	cancel()
	if ferr != nil {
		s.log.Warn().Err(ferr).Int("stored", n).Msg("storing the outcome counts at shutdown failed; the next start rebuilds them from the stream")
	} else if n > 0 {
		s.log.Info().Int("tools", n).Msg("stored the outcome counts held in memory")
	}
	s.Store.Close()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}
