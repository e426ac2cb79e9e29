package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/sourcegraph/conc/pool"
)

// Source is what one engine reads: a stream and the filter subjects of its
// lane (layout.go's Filters builds them for the telemetry stream).
type Source struct {
	Stream         string
	FilterSubjects []string
}

// Options tune an Engine. Zero fields take defaults.
type Options struct {
	// Workers is how many handler calls run at once, across keys
	// (default 64).
	Workers int
	// BatchSize is the most messages read into one batch (default 512).
	BatchSize int
	// KeyBatch is the most messages of one key in one HandleBatch call
	// (default BatchSize).
	KeyBatch int
	// Linger is how long a batch waits to fill once its first message
	// arrived (default 1ms). A backlog fills batches without waiting.
	Linger time.Duration
	// ReadAhead is how many messages the client buffers ahead of the
	// engine (default 2 × BatchSize).
	ReadAhead int
	// MaxHeld bounds the messages read and not yet applied (queued behind
	// busy or retrying keys): above it the engine stops reading until they
	// drain (default 4 × BatchSize: what a lane holds is most of its
	// memory, and more did not read faster).
	MaxHeld int
	// Key returns the ordering key of a message (default LastToken).
	Key func(*Message) string
	// MaxAttempts is how often a message failing transiently is handed to
	// the handler before it is dead-lettered (ReasonMaxAttempts; default 5).
	MaxAttempts int
	// BackoffInitial is the delay before a key's first retry; it doubles
	// with every attempt of the same message up to BackoffMax (defaults 1s
	// and 1m).
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// HandlerTimeout bounds one HandleBatch call through its ctx (default
	// 30s).
	HandlerTimeout time.Duration
	// ShutdownTimeout bounds how long Close waits for in-flight calls
	// before it cancels them (default 10s).
	ShutdownTimeout time.Duration
	// CommitInterval is the longest time between two commits: without
	// progress the engine commits the same checkpoint again, which renews
	// a lease. Keep it at a third of the lease TTL (default 1s).
	CommitInterval time.Duration
	// CommitTimeout bounds one Commit (default 5s).
	CommitTimeout time.Duration
	// DeadLetter maps a failed message and its reason code to the
	// dead-letter subject. When nil, DeadLetterSubject is used, and when
	// that is empty too, DefaultDeadLetterPrefix.<reason>.
	DeadLetter        func(m *Message, reason string) string
	DeadLetterSubject string
	// DeadLetterTimeout bounds one dead-letter publish (default 5s).
	DeadLetterTimeout time.Duration
	// OnDeadLetter, when set, runs after a dead letter was stored (for
	// metrics; it must not block).
	OnDeadLetter func(m *Message, reason string)
	// Logger receives the engine's log (default none).
	Logger *zerolog.Logger
}

// DefaultWorkers is Options.Workers' default.
const DefaultWorkers = 64

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Workers, DefaultWorkers)
	def(&o.BatchSize, 512)
	def(&o.KeyBatch, o.BatchSize)
	def(&o.ReadAhead, 2*o.BatchSize)
	def(&o.MaxHeld, 4*o.BatchSize)
	def(&o.MaxAttempts, 5)
	defd(&o.Linger, time.Millisecond)
	defd(&o.BackoffInitial, time.Second)
	defd(&o.BackoffMax, time.Minute)
	defd(&o.HandlerTimeout, 30*time.Second)
	defd(&o.ShutdownTimeout, 10*time.Second)
	defd(&o.CommitInterval, time.Second)
	defd(&o.CommitTimeout, 5*time.Second)
	defd(&o.DeadLetterTimeout, 5*time.Second)
	if o.Key == nil {
		o.Key = LastToken
	}
	return o
}

// Validate reports the first setting that cannot work, wrapping
// ErrInvalidOptions. Zero fields are valid: they take their defaults.
func (o Options) Validate() error {
	o = o.withDefaults()
	for _, c := range []struct {
		name string
		v    int
	}{{"workers", o.Workers}, {"batch size", o.BatchSize}, {"key batch", o.KeyBatch}, {"read ahead", o.ReadAhead}, {"max held", o.MaxHeld}, {"max attempts", o.MaxAttempts}} {
		if c.v < 1 {
			return fmt.Errorf("%w: %s %d: want at least 1", ErrInvalidOptions, c.name, c.v)
		}
	}
	if o.MaxHeld < o.BatchSize {
		return fmt.Errorf("%w: max held %d below batch size %d", ErrInvalidOptions, o.MaxHeld, o.BatchSize)
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{{"linger", o.Linger}, {"backoff initial", o.BackoffInitial}, {"handler timeout", o.HandlerTimeout}, {"shutdown timeout", o.ShutdownTimeout}, {"commit interval", o.CommitInterval}, {"commit timeout", o.CommitTimeout}, {"dead letter timeout", o.DeadLetterTimeout}} {
		if c.v < 0 {
			return fmt.Errorf("%w: %s %s: want positive", ErrInvalidOptions, c.name, c.v)
		}
	}
	if o.BackoffMax < o.BackoffInitial {
		return fmt.Errorf("%w: backoff %s to %s: want initial <= max", ErrInvalidOptions, o.BackoffInitial, o.BackoffMax)
	}
	return nil
}

// Stats is a snapshot of an engine's progress. Lag is the lane's last
// stream sequence (from the stream's info) minus LastSeen, plus Held.
type Stats struct {
	Held        int    // messages read and not yet applied
	Keys        int    // keys with held messages
	Waiting     int    // keys waiting out a retry backoff
	Running     int    // handler calls in flight
	LastSeen    uint64 // the last stream sequence read
	Checkpoint  uint64 // the lowest stream sequence not yet applied (what would be committed)
	Committed   uint64 // the last checkpoint committed
	Applied     uint64 // messages applied or dead-lettered since start
	DeadLetters uint64 // messages dead-lettered since start
	Retries     uint64 // transient failures since start
}

// Engine reads one lane with an ordered consumer from its checkpoint and
// applies it through a BatchHandler: batches grouped by key, keys in
// parallel, each key in stream order. See the package doc.
type Engine struct {
	js   jetstream.JetStream
	src  Source
	cp   Checkpointer
	h    BatchHandler
	opts Options
	log  zerolog.Logger

	started   atomic.Bool
	closeOnce sync.Once
	closing   chan struct{} // closed by Close
	done      chan struct{} // closed when Run returned
	runErr    error

	// counters, written by the dispatcher, read by Stats
	held, keys, waiting, running             atomic.Int64
	lastSeen, checkpoint, committed, applied atomic.Uint64
	readCons                                 atomic.Uint64 // consumer sequence of the last message the dispatcher took
	deadLetters, retries                     atomic.Uint64
	cons                                     atomic.Pointer[jetstream.Consumer] // set once Run created it
}

// New returns an engine for src that commits its progress through cp.
func New(js jetstream.JetStream, src Source, cp Checkpointer, h BatchHandler, opts Options) (*Engine, error) {
	switch {
	case js == nil || cp == nil || h == nil:
		return nil, fmt.Errorf("%w: jetstream, checkpointer and handler are required", ErrInvalidOptions)
	case src.Stream == "":
		return nil, fmt.Errorf("%w: source stream is empty", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{js: js, src: src, cp: cp, h: h, opts: opts.withDefaults(),
		closing: make(chan struct{}), done: make(chan struct{})}
	e.log = zerolog.Nop()
	if e.opts.Logger != nil {
		e.log = *e.opts.Logger
	}
	e.log = e.log.With().Str("stream", src.Stream).Strs("filters", src.FilterSubjects).Logger()
	e.checkpoint.Store(cp.Checkpoint())
	e.committed.Store(cp.Checkpoint())
	return e, nil
}

// Stats returns a snapshot of the engine's progress.
func (e *Engine) Stats() Stats {
	return Stats{
		Held: int(e.held.Load()), Keys: int(e.keys.Load()), Waiting: int(e.waiting.Load()),
		Running: int(e.running.Load()), LastSeen: e.lastSeen.Load(), Checkpoint: e.checkpoint.Load(),
		Committed: e.committed.Load(), Applied: e.applied.Load(), DeadLetters: e.deadLetters.Load(),
		Retries: e.retries.Load(),
	}
}

// Pending returns how many of the lane's stored messages the engine has
// not read yet (one request): those the server has not delivered to its
// ordered consumer, and those delivered and still in the client's buffer
// (the consumer's delivered sequence after the last message the engine
// took). Lag is Pending plus Stats().Held. Before Run created the consumer
// it returns 0 and ErrNotRunning.
func (e *Engine) Pending(ctx context.Context) (uint64, error) {
	c := e.cons.Load()
	if c == nil {
		return 0, ErrNotRunning
	}
	info, err := (*c).Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the ordered consumer on %s: %w", e.src.Stream, err)
	}
	var buffered uint64
	if read := e.readCons.Load(); info.Delivered.Consumer > read {
		buffered = info.Delivered.Consumer - read
	}
	// After a reset the ordered consumer counts from 1 again, below what
	// was read; a stream sequence delivered and not read still counts.
	if buffered == 0 && info.Delivered.Stream > e.lastSeen.Load() {
		buffered = 1
	}
	return info.NumPending + buffered, nil
}

// Close stops reading, lets in-flight calls finish within
// Options.ShutdownTimeout, commits the checkpoint and returns Run's result.
// Close before Run makes Run return ErrClosed.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() { close(e.closing) })
	if !e.started.Load() {
		return nil
	}
	<-e.done
	if errors.Is(e.runErr, ErrLost) {
		return nil // reported by Run
	}
	return e.runErr
}

// keyState is one key's queue of unapplied messages, in stream order.
type keyState struct {
	key      string
	queue    []*Message
	inFlight bool // a call has queue[:n] now
	waiting  bool // a retry backoff is pending
	ready    bool // in the ready queue
}

// result is what a worker reports about one call.
type result struct {
	ks      *keyState
	applied int  // messages of the call's prefix now applied or dead-lettered
	retry   bool // msgs[applied] failed transiently and waits for a backoff
}

// Run reads and applies the lane until ctx ends, Close is called or the
// lane's ownership is lost (ErrLost). A clean stop returns nil after the
// final commit.
func (e *Engine) Run(ctx context.Context) (err error) {
	if !e.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer func() { e.runErr = err; close(e.done) }()
	select {
	case <-e.closing:
		return ErrClosed
	default:
	}
	start := e.cp.Checkpoint()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: e.src.FilterSubjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := e.js.OrderedConsumer(ctx, e.src.Stream, cfg)
	if err != nil {
		return fmt.Errorf("ordered consumer on %s: %w", e.src.Stream, err)
	}
	e.cons.Store(&cons)
	d := &dispatcher{e: e, keys: map[string]*keyState{}, start: max(start, 1),
		results: make(chan result, e.opts.Workers), wake: make(chan *keyState, 64),
		stopped: make(chan struct{}), commitReq: make(chan struct{}, 1), commitDone: make(chan struct{})}
	d.want.Store(start)
	d.hctx, d.hcancel = context.WithCancel(context.WithoutCancel(ctx))
	defer d.hcancel()
	d.pool = pool.New().WithMaxGoroutines(e.opts.Workers)

	in := make(chan *Message, e.opts.ReadAhead)
	readStop := make(chan struct{})
	cc, err := cons.Consume(func(jm jetstream.Msg) {
		md, err := jm.Metadata()
		if err != nil {
			e.log.Error().Err(err).Str("subject", jm.Subject()).Msg("message without metadata skipped")
			return
		}
		m := &Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data(), Stream: md.Stream,
			StreamSeq: md.Sequence.Stream, Timestamp: md.Timestamp, consSeq: md.Sequence.Consumer}
		select {
		case in <- m:
		case <-readStop:
		}
	}, jetstream.PullMaxMessages(e.opts.ReadAhead), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		e.log.Debug().Err(err).Msg("ordered consumer")
	}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", e.src.Stream, err)
	}
	batches := make(chan []*Message)
	var readers sync.WaitGroup
	readers.Go(func() { e.batch(in, batches, readStop) })
	stopReading := sync.OnceFunc(func() { cc.Stop(); close(readStop) })
	defer func() { stopReading(); readers.Wait() }()
	go d.commitLoop()
	return d.loop(ctx, batches, stopReading)
}

// batch groups the messages from in into batches of up to BatchSize: what
// is buffered at once, or what arrives within Linger of the first message.
func (e *Engine) batch(in <-chan *Message, out chan<- []*Message, stop <-chan struct{}) {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		var b []*Message
		select {
		case m := <-in:
			b = make([]*Message, 1, e.opts.BatchSize)
			b[0] = m
		case <-stop:
			return
		}
		linger.Reset(e.opts.Linger)
	fill:
		for len(b) < e.opts.BatchSize {
			select {
			case m := <-in:
				b = append(b, m)
				continue
			default:
			}
			select {
			case m := <-in:
				b = append(b, m)
			case <-linger.C:
				break fill
			case <-stop:
				return
			}
		}
		linger.Stop()
		select {
		case out <- b:
		case <-stop:
			return
		}
	}
}

// dispatcher is Run's state, owned by the loop goroutine.
type dispatcher struct {
	e     *Engine
	keys  map[string]*keyState
	ready []*keyState
	order []*Message // held messages in stream order; order[head:] not all applied
	head  int
	start uint64
	last  uint64 // last stream sequence read
	held  int
	nrun  int
	nwait int

	hctx    context.Context // handler calls; cancelled at the shutdown deadline and on Lost
	hcancel context.CancelFunc
	pool    *pool.Pool
	results chan result
	wake    chan *keyState
	stopped chan struct{} // closed when the loop returned

	stopping bool
	lost     bool

	want       atomic.Uint64 // the checkpoint the committer should store
	commitReq  chan struct{}
	commitDone chan struct{}
}

func (d *dispatcher) loop(ctx context.Context, batches <-chan []*Message, stopReading func()) error {
	e := d.e
	defer close(d.stopped)
	lost, closing, done := e.cp.Lost(), e.closing, ctx.Done()
	var deadline <-chan time.Time
	var timedOut, abandoned bool
	for {
		var in <-chan []*Message
		if !d.stopping && d.held < e.opts.MaxHeld {
			in = batches
		}
		select {
		case b := <-in:
			d.add(b)
		case r := <-d.results:
			d.settle(r)
		case ks := <-d.wake:
			ks.waiting = false
			d.nwait--
			d.enqueue(ks)
		case <-lost:
			d.lost = true
			stopReading()
			d.hcancel()
			d.drainAfterLost()
			d.publish()
			e.log.Warn().Msg("lane ownership lost: stopped without committing")
			return ErrLost
		case <-closing:
			closing = nil
			d.beginStop(stopReading, &deadline)
		case <-done:
			done = nil
			d.beginStop(stopReading, &deadline)
		case <-deadline:
			if timedOut { // the grace after cancelling ran out: abandon the calls
				e.log.Error().Int("running", d.nrun).Msg("handlers ignore their cancelled context; abandoned")
				abandoned = true
				break
			}
			timedOut = true
			d.hcancel()
			deadline = time.After(time.Second)
		}
		if abandoned {
			break
		}
		if !d.stopping {
			d.launch()
		}
		d.publish()
		if d.stopping && d.nrun == 0 {
			break
		}
	}
	// Stopped cleanly (or at the deadline): commit what was applied.
	if !abandoned {
		d.pool.Wait()
	}
	close(d.commitReq)
	<-d.commitDone
	select {
	case <-lost:
		return ErrLost
	default:
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.CommitTimeout)
	defer cancel()
	cp := d.checkpoint()
	if err := e.cp.Commit(cctx, cp); err != nil {
		return fmt.Errorf("final commit of checkpoint %d: %w", cp, err)
	}
	e.committed.Store(cp)
	if timedOut {
		return ErrShutdownTimeout
	}
	return nil
}

func (d *dispatcher) beginStop(stopReading func(), deadline *<-chan time.Time) {
	if d.stopping {
		return
	}
	d.stopping = true
	stopReading()
	*deadline = time.After(d.e.opts.ShutdownTimeout)
}

// drainAfterLost waits (bounded) for the cancelled calls to return, so that
// no handler of this engine runs after Run returned ErrLost.
func (d *dispatcher) drainAfterLost() {
	t := time.NewTimer(d.e.opts.ShutdownTimeout)
	defer t.Stop()
	for d.nrun > 0 {
		select {
		case <-d.results:
			d.nrun--
		case <-t.C:
			d.e.log.Error().Int("running", d.nrun).Msg("handlers ignore their cancelled context")
			return
		}
	}
}

// add queues a batch read from the stream.
func (d *dispatcher) add(b []*Message) {
	if len(b) > 0 {
		d.e.readCons.Store(b[len(b)-1].consSeq)
	}
	for _, m := range b {
		if m.StreamSeq <= d.last || m.StreamSeq < d.start {
			continue // an ordered consumer never repeats; be safe anyway
		}
		d.last = m.StreamSeq
		m.Key = d.e.opts.Key(m)
		m.Attempt = 1
		ks := d.keys[m.Key]
		if ks == nil {
			ks = &keyState{key: m.Key}
			d.keys[m.Key] = ks
		}
		ks.queue = append(ks.queue, m)
		d.order = append(d.order, m)
		d.held++
		d.enqueue(ks)
	}
}

// enqueue puts an idle key with messages in the ready queue.
func (d *dispatcher) enqueue(ks *keyState) {
	if !ks.inFlight && !ks.waiting && !ks.ready && len(ks.queue) > 0 {
		ks.ready = true
		d.ready = append(d.ready, ks)
	}
}

// launch starts calls for ready keys while workers are free.
func (d *dispatcher) launch() {
	e := d.e
	for d.nrun < e.opts.Workers && len(d.ready) > 0 {
		ks := d.ready[0]
		d.ready[0] = nil
		d.ready = d.ready[1:]
		ks.ready = false
		n := min(len(ks.queue), e.opts.KeyBatch)
		msgs := slices.Clone(ks.queue[:n])
		ks.inFlight = true
		d.nrun++
		d.pool.Go(func() { d.results <- result{ks: ks, applied: 0}.with(e.handle(d.hctx, ks.key, msgs)) })
	}
	if len(d.ready) == 0 {
		d.ready = d.ready[:0:0] // let the backing array go
	}
}

func (r result) with(applied int, retry bool) result {
	r.applied, r.retry = applied, retry
	return r
}

// settle records a finished call.
func (d *dispatcher) settle(r result) {
	e := d.e
	d.nrun--
	ks := r.ks
	ks.inFlight = false
	for _, m := range ks.queue[:r.applied] {
		m.applied = true
	}
	clear(ks.queue[:r.applied])
	ks.queue = ks.queue[r.applied:]
	d.held -= r.applied
	e.applied.Add(uint64(r.applied))
	if r.retry && !d.stopping {
		e.retries.Add(1)
		head := ks.queue[0]
		delay := backoff(e.opts.BackoffInitial, e.opts.BackoffMax, head.Attempt)
		head.Attempt++
		ks.waiting = true
		d.nwait++
		e.log.Info().Str("key", ks.key).Uint64("seq", head.StreamSeq).Int("attempt", head.Attempt).
			Dur("retry_in", delay).Msg("transient failure; the key waits")
		time.AfterFunc(delay, func() {
			select {
			case d.wake <- ks:
			case <-d.stopped:
			}
		})
	}
	if len(ks.queue) == 0 {
		delete(d.keys, ks.key)
		ks.queue = nil
	} else {
		d.enqueue(ks)
	}
	d.advance()
}

// backoff is the delay after the attempt-th failure of one message.
func backoff(initial, maxDelay time.Duration, attempt int) time.Duration {
	d := initial
	for i := 1; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// advance drops the applied prefix of d.order and asks for a commit when
// the checkpoint moved.
func (d *dispatcher) advance() {
	for d.head < len(d.order) && d.order[d.head].applied {
		d.order[d.head] = nil
		d.head++
	}
	if d.head > 1024 && d.head*2 > len(d.order) {
		d.order = slices.Clone(d.order[d.head:])
		d.head = 0
	}
	if cp := d.checkpoint(); cp > d.want.Load() {
		d.want.Store(cp)
		select {
		case d.commitReq <- struct{}{}:
		default:
		}
	}
}

// checkpoint is the lowest stream sequence not yet applied: the first held
// message, or the one after the last read.
func (d *dispatcher) checkpoint() uint64 {
	if d.head < len(d.order) {
		return d.order[d.head].StreamSeq
	}
	if d.last > 0 {
		return d.last + 1
	}
	return d.e.cp.Checkpoint()
}

// publish updates the counters Stats reads.
func (d *dispatcher) publish() {
	e := d.e
	e.held.Store(int64(d.held))
	e.keys.Store(int64(len(d.keys)))
	e.waiting.Store(int64(d.nwait))
	e.running.Store(int64(d.nrun))
	e.lastSeen.Store(d.last)
	e.checkpoint.Store(d.checkpoint())
}

// commitLoop commits the wanted checkpoint as fast as commits return, and
// the same one again every CommitInterval (a lease renewal). It ends when
// commitReq is closed, or when the ownership is lost.
func (d *dispatcher) commitLoop() {
	e := d.e
	defer close(d.commitDone)
	tick := time.NewTicker(e.opts.CommitInterval)
	defer tick.Stop()
	lost := e.cp.Lost()
	last := time.Now()
	for {
		renew := false
		select {
		case _, ok := <-d.commitReq:
			if !ok {
				return
			}
		case <-tick.C:
			renew = time.Since(last) >= e.opts.CommitInterval*9/10
		case <-lost:
			return
		}
		cp := d.want.Load()
		if cp == e.committed.Load() && !renew {
			continue
		}
		if renew {
			e.recordLag()
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.CommitTimeout)
		err := e.cp.Commit(ctx, cp)
		cancel()
		if err != nil {
			select {
			case <-lost:
				return
			default:
			}
			e.log.Warn().Err(err).Uint64("checkpoint", cp).Msg("commit failed; retrying")
			continue
		}
		last = time.Now()
		e.committed.Store(cp)
	}
}

// recordLag measures the lag and hands it to a LagRecorder checkpointer.
func (e *Engine) recordLag() {
	lr, ok := e.cp.(LagRecorder)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.CommitTimeout)
	defer cancel()
	pending, err := e.Pending(ctx)
	if err != nil {
		return
	}
	lr.RecordLag(pending + uint64(max(e.held.Load(), 0)))
}

// handle runs one call for key and decides every message's fate. It
// returns how many of msgs are applied (a prefix) and whether
// msgs[applied] waits for a retry.
func (e *Engine) handle(ctx context.Context, key string, msgs []*Message) (int, bool) {
	res, perr := e.call(ctx, key, msgs)
	if perr == nil {
		return e.decide(ctx, msgs, res)
	}
	if len(msgs) == 1 {
		if ctx.Err() != nil {
			return 0, false
		}
		if !e.deadLetter(ctx, msgs[0], ReasonPanic, perr) {
			return 0, false
		}
		return 1, false
	}
	// Find the message that panics: hand them again one at a time.
	e.log.Warn().Err(perr).Str("key", key).Int("messages", len(msgs)).Msg("handler panicked; handing the batch again one at a time")
	for i := range msgs {
		n, retry := e.handle(ctx, key, msgs[i:i+1])
		if n == 0 {
			return i, retry
		}
	}
	return len(msgs), false
}

// call runs the handler with the call's timeout and contains a panic.
func (e *Engine) call(ctx context.Context, key string, msgs []*Message) (res []error, perr error) {
	if ctx.Err() != nil {
		return nil, nil // decide sees the cancelled ctx and applies nothing
	}
	cctx, cancel := context.WithTimeout(ctx, e.opts.HandlerTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			e.log.Error().Str("key", key).Interface("panic", r).Bytes("stack", debug.Stack()).Msg("handler panicked")
			perr = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
		}
	}()
	res = e.h.HandleBatch(cctx, key, msgs)
	if res != nil && len(res) != len(msgs) {
		return nil, fmt.Errorf("%w: %d for %d messages", ErrResultCount, len(res), len(msgs))
	}
	return res, nil
}

// decide walks the results in order: applied and dead-lettered messages
// count, the first transient failure stops the walk.
func (e *Engine) decide(ctx context.Context, msgs []*Message, res []error) (int, bool) {
	if ctx.Err() != nil {
		return 0, false // cancelled (shutdown deadline or lost): read again later
	}
	for i, m := range msgs {
		var err error
		if res != nil {
			err = res[i]
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrPermanent):
			if !e.deadLetter(ctx, m, reasonOf(err), err) {
				return i, false
			}
		case ctx.Err() != nil:
			return i, false
		case m.Attempt >= e.opts.MaxAttempts:
			if !e.deadLetter(ctx, m, ReasonMaxAttempts, err) {
				return i, false
			}
		default:
			return i, true
		}
	}
	return len(msgs), false
}
