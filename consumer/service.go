package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// ServiceOptions configure a Service: the NATS resources, the lanes'
// engines, the processor, the state views and the verdict publisher.
type ServiceOptions struct {
	Config Config
	// Engine is the template of every lane's engine. Key, DeadLetter and
	// OnDeadLetter are set by the service.
	Engine engine.Options
	// Observer receives metrics events about telemetry inputs (default:
	// none); Kind gives their kind label (default KindToken).
	Observer Observer
	Kind     func(*engine.Message) string
	// Processor, Views and Publisher configure the domain worker.
	Processor ProcessorOptions
	Views     ViewOptions
	Publisher publisher.Options
	// Directives configures the projector of directives in force
	// (directives.go).
	Directives DirectivesOptions
	// Member names this worker among the workers that share the lanes
	// (default DefaultMember()).
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
// views loaded, its lanes run. `toolsentry serve` runs one; tests and the
// benchmark run them in-process.
type Service struct {
	Resources *Resources
	Store     *Store
	Lanes     *Lanes

	pub      *publisher.Publisher
	log      zerolog.Logger
	flushInt time.Duration
	ready    atomic.Bool
	stopping atomic.Bool

	directives *Directives // nil when disabled
}

// StartService provisions the resources on nc, loads the state views and
// builds the lanes. ctx bounds the start-up only (a deadline on it does
// not reach the running service). Call Run to consume.
func StartService(ctx context.Context, nc *nats.Conn, opts ServiceOptions) (*Service, error) {
	names, err := events.NewNames(opts.Config.withDefaults().Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	opts.Processor.Names = names
	if err := opts.Engine.Validate(); err != nil {
		return nil, err
	}
	if opts.Member == "" {
		opts.Member = DefaultMember()
	}
	if !memberRE.MatchString(opts.Member) || len(opts.Member) > 128 {
		return nil, fmt.Errorf("%w: member %q: want 1 to 128 letters, digits, '-', '_', '=' or '.', not starting with '.'", ErrInvalidConfig, opts.Member)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("creating jetstream context: %w", err)
	}
	if err := checkLiveMembers(ctx, js, opts.Config.withDefaults()); err != nil {
		return nil, err
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
	s := &Service{Resources: res, Store: store, pub: pub, log: *zerolog.Ctx(ctx), flushInt: opts.OutcomeFlushInterval}
	if s.flushInt <= 0 {
		s.flushInt = DefaultOutcomeFlushInterval
	}
	specs, err := s.telemetryLanes(ctx, NewProcessor(store, pub, opts.Processor), opts)
	if err != nil {
		store.Close()
		return nil, err
	}
	if s.directives, err = startServiceDirectives(ctx, res, opts); err != nil {
		store.Close()
		return nil, err
	}
	if s.directives != nil {
		specs = append(specs, s.directives.lane(res, opts.Engine, opts.Directives.Workers))
	}
	s.Lanes = newLanes(js, res, opts.Member, specs)
	s.ready.Store(true)
	zerolog.Ctx(ctx).Info().Str("stream", res.Config.TelemetryStream()).Str("member", opts.Member).
		Int("partitions", res.Config.Partitions).Int("replicas", res.Config.Replicas).Msg("streams, buckets and leases ready")
	return s, nil
}

// telemetryLanes returns the lanes of the telemetry stream: the tool
// partitions and the composition lane of the config's Layout, all applied
// by proc.
func (s *Service) telemetryLanes(ctx context.Context, proc *Processor, opts ServiceOptions) ([]engine.LaneSpec, error) {
	cfg := s.Resources.Config
	layout := cfg.Layout()
	eo := opts.Engine
	if eo.MaxAttempts == 0 {
		eo.MaxAttempts = cfg.MaxDeliver
	}
	eo.Key = EngineKey
	eo.DeadLetter = func(_ *engine.Message, reason string) string { return cfg.DeadLetterSubject(reason) }
	var h engine.BatchHandler = proc
	if opts.Observer != nil {
		kind := opts.Kind
		if kind == nil {
			kind = KindToken
		}
		h = Observed(proc, opts.Observer, kind)
		eo.OnDeadLetter = func(m *engine.Message, reason string) { opts.Observer.OnDeadLetter(kind(m), reason) }
	}
	initial := func(ctx context.Context) (uint64, error) { return resumeSequence(ctx, s.Resources.Telemetry, cfg) }
	// A lane taken reads what the previous holder wrote, and forgets the
	// outcome counts held in memory of its tools (another worker may have
	// counted their invocations since); those of the other lanes this
	// worker holds stay.
	onAcquire := func(lane engine.Lane) func(context.Context) error {
		of := func(toolID string) bool {
			tok, err := events.KeyToken(toolID)
			return err != nil || engine.KeyPartition(tok, layout.Partitions) == lane.Partition
		}
		if lane.Composition {
			of = func(string) bool { return false }
		}
		return func(ctx context.Context) error { return s.Store.CatchUp(ctx, of) }
	}
	var out []engine.LaneSpec
	for _, lane := range layout.Lanes() {
		filters, err := layout.Filters(lane)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		out = append(out, engine.LaneSpec{
			Key: lane.Key(), Source: engine.Source{Stream: cfg.TelemetryStream(), FilterSubjects: filters},
			Handler: h, Options: eo, OnAcquire: onAcquire(lane), Initial: s.laneStart(lane, initial), Layout: layout.Name(),
			BeforeRelease: s.flushNow,
			CatchUp:       engine.NewCatchUp(layout, lane, s.Resources.Layout.Since),
		})
	}
	return out, nil
}

// checkLiveMembers refuses to start next to a live worker of another
// partition count (ErrPartitionsMismatch), before provisioning would move
// the telemetry stream's transform under it.
func checkLiveMembers(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	// Bounded: a cluster still forming may answer nothing.
	ctx, cancel := context.WithTimeout(ctx, engine.ProvisionRequestTimeout(ctx))
	defer cancel()
	kv, err := js.KeyValue(ctx, cfg.MembersBucket())
	if err != nil {
		return nil // no bucket yet, or not readable now: the lanes check again
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	want := "partitions=" + strconv.Itoa(cfg.Partitions)
	for m := range lister.Keys() {
		e, err := kv.Get(ctx, m)
		if err != nil {
			continue
		}
		if got := string(e.Value()); got != want {
			return fmt.Errorf("%w: live worker %s announces %q, this one %q: stop every worker before changing --partitions", ErrPartitionsMismatch, m, got, want)
		}
	}
	return nil
}

// flushNow stores the outcome counts held in memory (before a lane is given
// back, so that its next holder reads them rather than rebuilding them).
func (s *Service) flushNow(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if n, err := s.Store.Flush(fctx); err != nil {
		s.log.Warn().Err(err).Int("stored", n).Msg("storing the outcome counts failed; the next holder rebuilds them from the stream")
	}
}

// flushTimeout bounds Store.Flush at Close.
const flushTimeout = 5 * time.Second

// Run consumes until ctx is cancelled or Close is called; see Lanes.Run.
func (s *Service) Run(ctx context.Context) error {
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
	err := s.Lanes.Run(ctx)
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

// Close shuts down in order: readiness off, the lanes stopped (in-flight
// calls finish under the engine's ShutdownTimeout, which also covers their
// pending publishes; each lane commits its checkpoint, stores the outcome
// counts and releases its lease), the outcome counts stored a last time
// (within flushTimeout: what is not stored is rebuilt from the stream at
// the next start), then the state views. It is idempotent.
func (s *Service) Close() error {
	if s.stopping.Swap(true) {
		return nil
	}
	err := s.Lanes.Close()
	if s.directives != nil {
		s.directives.Close()
	}
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

// Observed returns h reporting every input's outcome to o, with kind(m) as
// its kind label.
func Observed(h engine.BatchHandler, o Observer, kind func(*engine.Message) string) engine.BatchHandler {
	return observed{h: h, o: o, kind: kind}
}

// observed reports every input's outcome to an Observer.
type observed struct {
	h    engine.BatchHandler
	o    Observer
	kind func(*engine.Message) string
}

// HandleBatch implements engine.BatchHandler.
func (w observed) HandleBatch(ctx context.Context, key string, msgs []*engine.Message) []error {
	start := time.Now()
	res := w.h.HandleBatch(ctx, key, msgs)
	each := time.Since(start) / time.Duration(max(len(msgs), 1))
	for i, m := range msgs {
		kind := w.kind(m)
		if m.Attempt > 1 {
			w.o.OnRedelivery(kind)
		}
		var err error
		if res != nil {
			err = res[i]
		}
		switch {
		case err == nil:
			w.o.OnOutcome(kind, OutcomeAck, each)
		case errors.Is(err, engine.ErrPermanent):
			w.o.OnOutcome(kind, OutcomeDeadLetter, each)
		case ctx.Err() != nil:
			w.o.OnOutcome(kind, OutcomeShutdown, each)
		default:
			w.o.OnOutcome(kind, OutcomeRetry, each)
		}
	}
	return res
}

// newLanes builds the lanes runner of a service.
func newLanes(js jetstream.JetStream, res *Resources, member string, specs []engine.LaneSpec) *Lanes {
	cfg := res.Config
	return engine.NewLanes(js, engine.LanesConfig{
		Members: res.Members, Leases: res.Leases, Member: member,
		LeaseTTL: cfg.LeaseTTL, Period: max(cfg.MemberTTL/4, 100*time.Millisecond),
		Announced: "partitions=" + strconv.Itoa(cfg.Partitions),
	}, specs)
}

// laneStart returns the start of a telemetry lane never committed under the
// current layout: where its catch-up starts (engine.LayoutStart).
func (s *Service) laneStart(lane engine.Lane, initial func(context.Context) (uint64, error)) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		v, err := engine.LayoutStart(ctx, s.Resources.Leases, s.Resources.Config.Layout().Name(), initial)
		if err != nil {
			return 0, err
		}
		if lane.Composition {
			return v.CompositionFrom, nil
		}
		return v.ToolsFrom, nil
	}
}
