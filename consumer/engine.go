package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/sourcegraph/conc/panics"
	"github.com/sourcegraph/conc/pool"
)

// Headers the engine adds to a dead letter, next to the original headers.
const (
	HeaderDeadLetterReason = "Toolsentry-Dlq-Reason"
	HeaderDeadLetterError  = "Toolsentry-Dlq-Error"
	HeaderOriginalSubject  = "Toolsentry-Original-Subject"
	HeaderOriginalStream   = "Toolsentry-Original-Stream"
	HeaderOriginalSequence = "Toolsentry-Original-Sequence"
	HeaderOriginalTime     = "Toolsentry-Original-Time"
	HeaderOriginalMsgID    = "Toolsentry-Original-Msg-Id"
	HeaderNumDelivered     = "Toolsentry-Num-Delivered"
)

// maxErrorHeader bounds the error text copied into a dead letter.
const maxErrorHeader = 1024

// keyTurn is how many messages of one key a worker handles before it puts
// the key back at the end of the ready queue, so that a busy key cannot
// starve the others.
const keyTurn = 32

// Options tune an Engine. Zero fields take defaults.
type Options struct {
	// Workers is the number of handlers running at once, across keys
	// (default DefaultWorkers).
	Workers int
	// PullMaxMessages is how many messages the client buffers ahead of the
	// workers (default Workers). Keep it near Workers: AckWait starts when
	// a message lands in the buffer, not when a worker takes it
	// (nats.go #1929).
	PullMaxMessages int
	// Key returns the ordering key of a message (default LastToken).
	// Messages of one key are handled one at a time in stream order. Key
	// and Skip must depend on the subject and headers alone: a recovery
	// reads the messages it waits for without their data.
	Key func(*Message) string
	// Kind returns the metrics label of a message (default KindToken).
	Kind func(*Message) string
	// MaxDeliver is the number of deliveries after which a transient failure
	// is dead-lettered. Default: the consumer's MaxDeliverMetadata, else
	// its server MaxDeliver if set, else DefaultMaxDeliver. The consumer's
	// server MaxDeliver must be unlimited (as Provision creates it) or at
	// least this; with an unlimited one a message whose last delivery could
	// not be dead-lettered is delivered again instead of being dropped.
	MaxDeliver int
	// BackoffInitial is the redelivery delay after the first transient
	// failure; it doubles with every delivery (default 1s).
	BackoffInitial time.Duration
	// BackoffMax caps the redelivery delay (default 1m).
	BackoffMax time.Duration
	// HandlerTimeout bounds one Handle call through its context (default
	// 30s).
	HandlerTimeout time.Duration
	// ShutdownTimeout bounds how long Close waits for in-flight handlers
	// before it cancels them (default 10s).
	ShutdownTimeout time.Duration
	// DeadLetterSubject maps an input subject and the reason code of its
	// failure to the dead-letter subject (default: DefaultConfig's
	// DeadLetterSubject, toolsentry.dlq.<reason>).
	DeadLetterSubject func(subject, reason string) string
	// DeadLetterTimeout bounds the dead-letter publish (default 5s).
	DeadLetterTimeout time.Duration
	// Observer receives metrics events (default: none).
	Observer Observer
	// Skip, when set, tells the messages this engine does not handle:
	// they are acknowledged at once (a partition consumer reads the whole
	// stream and handles only its partition's keys).
	Skip func(*Message) bool
	// PriorityGroup is the priority group to pull in, for a consumer with
	// the pinned-client policy (default none). The engine then keeps per-key
	// order across workers: when the server pins the consumer to it, it
	// holds every key until the earlier pinned worker's unacknowledged
	// messages are redelivered (see startRecovery), and at Close it unpins
	// the consumer so that another worker takes over at once.
	PriorityGroup string
	// PullExpiry is how long one pull request waits (default: nats.go's
	// 30s). A pinned worker must pull within the consumer's PinnedTTL to
	// keep the pin, so with PriorityGroup set keep it at PinnedTTL/3.
	PullExpiry time.Duration
	// OnPinned, with PriorityGroup, runs when the server pinned the
	// consumer to this engine, while every key is held and before the
	// recovery starts: the service catches its state views up with the
	// buckets there (Store.CatchUp), so that no key is decided on state
	// older than its previous owner's last write. Retried every second
	// until it succeeds or the engine stops.
	OnPinned func(ctx context.Context) error
}

// DefaultWorkers is the default of Options.Workers: 32 × GOMAXPROCS, at
// least 64. Handlers mostly wait for PubAcks and KV writes, so more of them
// than cores keeps the server's writes flowing: on 2 cores, 64 workers
// handle about 10% more events per second than 16 and halve the p99
// latency of a cold start (`toolsentry bench --workers`); 128 add little.
func DefaultWorkers() int { return max(64, 32*runtime.GOMAXPROCS(0)) }

func (o Options) withDefaults() Options {
	if o.Workers == 0 {
		o.Workers = DefaultWorkers()
	}
	if o.PullMaxMessages == 0 {
		o.PullMaxMessages = o.Workers
	}
	if o.Key == nil {
		o.Key = LastToken
	}
	if o.Kind == nil {
		o.Kind = KindToken
	}
	if o.BackoffInitial == 0 {
		o.BackoffInitial = time.Second
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = time.Minute
	}
	if o.HandlerTimeout == 0 {
		o.HandlerTimeout = 30 * time.Second
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.DeadLetterSubject == nil {
		o.DeadLetterSubject = func(_, reason string) string { return DefaultConfig().DeadLetterSubject(reason) }
	}
	if o.DeadLetterTimeout == 0 {
		o.DeadLetterTimeout = 5 * time.Second
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}

// Validate reports the first setting that cannot work, wrapping
// ErrInvalidConfig. Zero fields are valid: they take their defaults.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Workers < 1:
		return fmt.Errorf("%w: workers %d: want at least 1", ErrInvalidConfig, o.Workers)
	case o.PullMaxMessages < 1:
		return fmt.Errorf("%w: pull max messages %d: want at least 1", ErrInvalidConfig, o.PullMaxMessages)
	case o.MaxDeliver < 0:
		return fmt.Errorf("%w: max deliver %d: want positive", ErrInvalidConfig, o.MaxDeliver)
	case o.BackoffInitial < 0 || o.BackoffMax < o.BackoffInitial:
		return fmt.Errorf("%w: backoff %s to %s: want 0 < initial <= max", ErrInvalidConfig, o.BackoffInitial, o.BackoffMax)
	case o.HandlerTimeout < 0:
		return fmt.Errorf("%w: handler timeout %s: want positive", ErrInvalidConfig, o.HandlerTimeout)
	case o.ShutdownTimeout < 0:
		return fmt.Errorf("%w: shutdown timeout %s: want positive", ErrInvalidConfig, o.ShutdownTimeout)
	case o.DeadLetterTimeout < 0:
		return fmt.Errorf("%w: dead letter timeout %s: want positive", ErrInvalidConfig, o.DeadLetterTimeout)
	case o.PullExpiry != 0 && o.PullExpiry < time.Second:
		return fmt.Errorf("%w: pull expiry %s: want at least 1s", ErrInvalidConfig, o.PullExpiry)
	}
	return nil
}

// Engine consumes a durable pull consumer and runs a Handler on every
// message: in stream order per key, in parallel across keys, with a bounded
// number of workers, settling each message exactly once with Ack,
// NakWithDelay or a dead letter plus TermWithReason (see the package doc).
//
// Run, Close and Stats are safe for concurrent use.
type Engine struct {
	js         jetstream.JetStream
	cons       jetstream.Consumer
	h          Handler
	opts       Options
	ackWait    time.Duration
	maxDeliver uint64
	log        zerolog.Logger

	mu       sync.Mutex
	keys     map[string]*keyState
	held     map[uint64]*item // by stream sequence: every message in the engine
	ready    []string         // keys with an eligible head, waiting for a worker
	readyCh  chan struct{}    // capacity 1: wakes the dispatcher
	stopping bool
	// recovering holds every key back after a start that found messages
	// delivered to an earlier worker and never acknowledged (it died):
	// their redeliveries come only after AckWait, and newer messages of
	// their keys must not overtake them. See startRecovery.
	recovering *recovery
	// settled are the stream sequences this engine acknowledged or
	// terminated above the consumer's ack floor as last read (another
	// partition's messages included): with held and the keys' awaits, what
	// tells a recovery which unacknowledged messages it has accounted for.
	settled map[uint64]struct{}
	// pruneSettledAt is the size of settled past which markSettledLocked
	// prunes it next.
	pruneSettledAt int
	// pin is the pin id of the latest delivery from a pinned consumer, and
	// lastDelivery the highest consumer (delivery) sequence received under it.
	pin          string
	lastDelivery uint64

	started   atomic.Bool
	closeOnce sync.Once
	closeCh   chan struct{}
	done      chan struct{}
	runErr    error
}

// item is one message held by the engine, from its arrival until it is
// settled (or handed back at shutdown).
type item struct {
	msg       jetstream.Msg // latest delivery; guarded by Engine.mu
	delivered uint64        // NumDelivered of the latest delivery; guarded by Engine.mu
	m         *Message      // as of the first delivery; read-only once handed to a worker
	kind      string
	touched   time.Time // last arrival or progress ack; guarded by Engine.mu
	arrived   time.Time // last arrival (delivery or redelivery); guarded by Engine.mu
}

// keyState is the FIFO of one key. At most one worker owns a key at a time
// (scheduled); awaits are the sequences of this key that were nak'd and must
// come back before any later message of the key may run.
type keyState struct {
	queue     []*item // sorted by stream sequence
	awaits    []await // sorted by seq
	scheduled bool    // in Engine.ready or owned by a worker
}

type await struct {
	seq         uint64
	redeliverAt time.Time // when the server will redeliver it
	giveUpAt    time.Time // when the key stops waiting for it
}

// eligible reports whether the head of the queue may run now.
func (k *keyState) eligible() bool {
	if len(k.queue) == 0 {
		return false
	}
	return len(k.awaits) == 0 || k.queue[0].m.StreamSeq <= k.awaits[0].seq
}

func (k *keyState) insert(it *item) {
	seq := it.m.StreamSeq
	i, _ := slices.BinarySearchFunc(k.queue, seq, func(q *item, s uint64) int {
		switch {
		case q.m.StreamSeq < s:
			return -1
		case q.m.StreamSeq > s:
			return 1
		}
		return 0
	})
	k.queue = slices.Insert(k.queue, i, it)
}

// pop removes the eligible head and the await it satisfies, if any.
func (k *keyState) pop() *item {
	it := k.queue[0]
	k.queue[0] = nil
	k.queue = k.queue[1:]
	if len(k.awaits) > 0 && k.awaits[0].seq == it.m.StreamSeq {
		k.awaits = k.awaits[1:]
	}
	return it
}

func (k *keyState) addAwait(a await) {
	i, found := slices.BinarySearchFunc(k.awaits, a.seq, func(x await, s uint64) int {
		switch {
		case x.seq < s:
			return -1
		case x.seq > s:
			return 1
		}
		return 0
	})
	if found {
		k.awaits[i] = a
		return
	}
	k.awaits = slices.Insert(k.awaits, i, a)
}

// New returns an engine that will run h on the messages of cons, publishing
// dead letters through js. cons must use explicit acks and a bounded
// MaxAckPending, which bounds the messages the engine holds.
func New(js jetstream.JetStream, cons jetstream.Consumer, h Handler, opts Options) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	info := cons.CachedInfo()
	if info == nil {
		return nil, fmt.Errorf("%w: consumer without info", ErrInvalidConfig)
	}
	cc := info.Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("%w: consumer %s: ack policy %s: want explicit", ErrInvalidConfig, info.Name, cc.AckPolicy)
	}
	if cc.MaxAckPending < 1 {
		return nil, fmt.Errorf("%w: consumer %s: max ack pending %d: want bounded", ErrInvalidConfig, info.Name, cc.MaxAckPending)
	}
	maxDeliver := opts.MaxDeliver
	if maxDeliver == 0 {
		if v, ok := cc.Metadata[MaxDeliverMetadata]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%w: consumer %s: metadata %s=%q: want a positive integer", ErrInvalidConfig, info.Name, MaxDeliverMetadata, v)
			}
			maxDeliver = n
		} else if cc.MaxDeliver > 0 {
			maxDeliver = cc.MaxDeliver
		} else {
			maxDeliver = DefaultMaxDeliver
		}
	}
	if cc.MaxDeliver > 0 && cc.MaxDeliver < maxDeliver {
		return nil, fmt.Errorf("%w: consumer %s: server max deliver %d is below the engine's %d", ErrInvalidConfig, info.Name, cc.MaxDeliver, maxDeliver)
	}
	ackWait := cc.AckWait
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	return &Engine{
		js:             js,
		cons:           cons,
		h:              h,
		opts:           opts,
		ackWait:        ackWait,
		maxDeliver:     uint64(maxDeliver),
		keys:           make(map[string]*keyState),
		held:           make(map[uint64]*item),
		settled:        make(map[uint64]struct{}),
		pruneSettledAt: maxSettled,
		readyCh:        make(chan struct{}, 1),
		closeCh:        make(chan struct{}),
		done:           make(chan struct{}),
	}, nil
}

// Stats is a snapshot of what an engine holds.
type Stats struct {
	// Held is the number of messages received and not yet settled.
	Held int
	// Keys is the number of keys with held messages or awaited redeliveries.
	Keys int
	// Awaiting is the number of nak'd messages whose redelivery a key waits
	// for.
	Awaiting int
}

// Stats returns a snapshot of the engine's holdings.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Held: len(e.held), Keys: len(e.keys)}
	for _, k := range e.keys {
		s.Awaiting += len(k.awaits)
	}
	return s
}

// Run consumes until ctx is cancelled, Close is called or the consumer
// fails (deleted, connection closed). It then stops fetching, lets in-flight
// handlers finish within Options.ShutdownTimeout, hands every unfinished
// message back to the server in key order and returns: nil on a requested
// stop, ErrShutdownTimeout if handlers had to be cancelled, the consumer's
// error otherwise. Run can be called once; handlers get a context that keeps
// ctx's values but is cancelled only by the shutdown deadline.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer close(e.done)
	e.runErr = e.run(ctx)
	return e.runErr
}

// Close stops the engine as Run describes and waits for Run to return, with
// Run's result. It is idempotent; on an engine that never ran it only
// prevents a later Run.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() { close(e.closeCh) })
	if !e.started.Load() {
		return nil
	}
	<-e.done
	return e.runErr
}

func (e *Engine) run(ctx context.Context) error {
	select {
	case <-e.closeCh:
		return ErrClosed
	default:
	}
	e.log = zerolog.Ctx(ctx).With().Str("component", "consumer").Str("consumer", e.cons.CachedInfo().Name).Logger()
	if err := e.startRecovery(ctx, nil); err != nil {
		if ctx.Err() != nil {
			return nil // a stop requested while starting
		}
		return err
	}
	pull := []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(e.opts.PullMaxMessages)}
	if e.opts.PriorityGroup != "" {
		pull = append(pull, jetstream.PullPriorityGroup(e.opts.PriorityGroup))
	}
	if e.opts.PullExpiry > 0 {
		pull = append(pull, jetstream.PullExpiry(e.opts.PullExpiry))
	}
	iter, err := e.cons.Messages(pull...)
	if err != nil {
		return fmt.Errorf("consuming %s: %w", e.cons.CachedInfo().Name, err)
	}

	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	p := pool.New().WithContext(hctx).WithMaxGoroutines(e.opts.Workers)

	fetchErr := make(chan error, 1)
	go func() { fetchErr <- e.fetch(iter) }()
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		e.dispatch(p)
	}()
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hbDone)
		e.heartbeat(hbStop)
	}()
	go e.watchConnection(hctx)

	var result error
	fetching := true
	select {
	case <-ctx.Done():
		e.log.Info().Msg("context cancelled; stopping")
	case <-e.closeCh:
		e.log.Info().Msg("closing")
	case err := <-fetchErr:
		fetching = false
		if err != nil {
			e.log.Error().Err(err).Msg("consuming failed; stopping")
			result = err
		}
	}

	e.mu.Lock()
	e.stopping = true
	if r := e.recovering; r != nil {
		r.timer.Stop() // a stopping engine runs no key again
	}
	e.mu.Unlock()
	e.wake()
	iter.Drain()
	if fetching {
		if err := <-fetchErr; err != nil {
			result = err
		}
	}

	// The dispatcher may be blocked handing a key to a full pool, so the
	// shutdown deadline covers it too.
	waited := make(chan struct{})
	go func() {
		<-dispatched
		_ = p.Wait() // tasks return nil; failures became ack decisions
		close(waited)
	}()
	timer := time.NewTimer(e.opts.ShutdownTimeout)
	select {
	case <-waited:
		timer.Stop()
	case <-timer.C:
		e.log.Warn().Dur("timeout", e.opts.ShutdownTimeout).Msg("in-flight handlers did not finish; cancelling them")
		cancelHandlers()
		<-waited
		result = errors.Join(result, ErrShutdownTimeout)
	}
	close(hbStop) // no progress ack may follow a hand-back nak
	<-hbDone
	e.handBack()
	e.unpin()
	return result
}

// watchConnection holds every key from the moment the connection drops:
// deliveries in flight on the lost connection (or dropped from a full client
// buffer) come back only after AckWait, and newer messages of their keys
// must not overtake them. On reconnect the hold becomes a recovery as at a
// start after a crash (startRecovery).
func (e *Engine) watchConnection(ctx context.Context) {
	nc := e.js.Conn()
	ch := nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer nc.RemoveStatusListener(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case st, ok := <-ch:
			if !ok {
				return
			}
			switch st {
			case nats.RECONNECTING:
				e.mu.Lock()
				if r := e.recovering; r == nil || r.pending != ^uint64(0) {
					// A recovery in progress cannot finish while the server
					// cannot redeliver: its timer must not release the keys
					// during the outage. The reconnect starts a new one.
					if r != nil {
						r.timer.Stop()
					}
					e.holdLocked()
					e.log.Warn().Msg("connection lost; holding every key until the reconnect")
				}
				e.mu.Unlock()
			case nats.CONNECTED:
				// A server that restarted may number deliveries from
				// below what this worker saw: the gap check starts again
				// from the first delivery after the reconnect (the
				// recovery covers what was delivered before it).
				e.mu.Lock()
				e.lastDelivery = 0
				e.mu.Unlock()
				e.afterReconnect()
			}
		}
	}
}

// holdLocked holds every key until afterReconnect replaces the hold by a
// recovery from the consumer's state. e.mu must be held.
func (e *Engine) holdLocked() {
	r := &recovery{pending: ^uint64(0), seen: map[uint64]struct{}{}, began: time.Now()}
	r.timer = time.AfterFunc(time.Hour, func() {}) // replaced by afterReconnect
	e.recovering = r
}

// afterReconnect replaces a hold of the disconnection or of a new pin (or
// none) by a recovery from the consumer's state. The hold stays in place
// until the recovery replaces it, so no key runs in between.
func (e *Engine) afterReconnect() {
	e.mu.Lock()
	hold := e.recovering
	if hold != nil && hold.pending != ^uint64(0) {
		e.mu.Unlock()
		return // already recovering
	}
	e.mu.Unlock()
	for {
		err := e.startRecovery(context.Background(), hold)
		if err == nil {
			break
		}
		if hold == nil {
			e.log.Warn().Err(err).Msg("after a reconnect: cannot read the consumer; keys go on")
			break
		}
		// Held keys are not let go blind: the server may still redeliver
		// earlier messages of them (or another worker may hold them).
		e.log.Warn().Err(err).Msg("after a reconnect or a new pin: cannot read the consumer; keys stay held, retrying")
		time.Sleep(time.Second)
		e.mu.Lock()
		gone := e.stopping || e.recovering != hold
		e.mu.Unlock()
		if gone {
			return
		}
	}
	e.mu.Lock()
	if hold != nil && e.recovering == hold {
		e.endRecoveryLocked("no earlier delivery is unacknowledged")
	}
	e.mu.Unlock()
}

// goneMessages returns the sequences among seqs that no redelivery will
// bring back: acknowledged (at or below the consumer's ack floor) or no
// longer in the stream. On an error it reports none as gone: waiting longer
// is safe, going on is not.
func (e *Engine) goneMessages(seqs []uint64) map[uint64]struct{} {
	gone := map[uint64]struct{}{}
	if len(seqs) == 0 {
		return gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.cons.Info(ctx)
	if err != nil {
		return gone
	}
	stream, err := e.js.Stream(ctx, info.Stream)
	if err != nil {
		return gone
	}
	for _, seq := range seqs {
		if seq <= info.AckFloor.Stream {
			gone[seq] = struct{}{}
			continue
		}
		if _, err := stream.GetMsg(ctx, seq); errors.Is(err, jetstream.ErrMsgNotFound) {
			gone[seq] = struct{}{}
		}
	}
	return gone
}

// recovery is the state of a start after a crash: the consumer had pending
// messages delivered up to stream sequence upTo that nobody acknowledged.
type recovery struct {
	upTo    uint64
	pending uint64
	seen    map[uint64]struct{}
	timer   *time.Timer
	// began is when the hold began: deliveries since are known to the
	// server as unacknowledged.
	began time.Time
}

// startRecovery looks at the consumer before consuming. Messages delivered
// to a worker that died (kill -9, a lost machine) stay unacknowledged on the
// server and come back only when their AckWait expires, while newer messages
// are delivered at once: handled in that order, a key's events would be
// applied out of stream order, and the state's "last applied sequence" would
// then skip the older ones. So when the consumer has unacknowledged
// messages at start, no key runs until they have all been redelivered;
// messages that arrive meanwhile wait in their keys' queues, sorted by
// sequence. After 2 × AckWait only the keys of the messages still missing
// wait for them (narrowRecovery).
//
// hold is the hold the recovery replaces (nil at start): if another hold or
// recovery replaced it meanwhile, this one is dropped, since it read the
// consumer before whatever caused the newer one.
func (e *Engine) startRecovery(ctx context.Context, hold *recovery) error {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.cons.Info(ictx)
	if err != nil {
		return fmt.Errorf("reading consumer %s: %w", e.cons.CachedInfo().Name, err)
	}
	if info.NumAckPending == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.recovering != hold || e.stopping {
		return nil // superseded, or the engine stops
	}
	if hold != nil {
		hold.timer.Stop() // replaced below
	}
	r := &recovery{upTo: info.Delivered.Stream, pending: uint64(info.NumAckPending), seen: map[uint64]struct{}{}, began: time.Now()}
	if hold != nil {
		r.began = hold.began
	}
	r.timer = time.AfterFunc(2*e.ackWait, func() { e.narrowRecovery(r) })
	e.recovering = r
	e.log.Warn().Int("unacknowledged", info.NumAckPending).Uint64("up_to_seq", r.upTo).Dur("ack_wait", e.ackWait).
		Msg("an earlier worker left messages unacknowledged; holding every key until they are redelivered, to keep per-key order")
	// The count at start may include messages whose acks were still on
	// their way; the precise condition is that every message the server
	// counts as unacknowledged is one this engine holds.
	go e.watchRecovery(context.WithoutCancel(ctx), r)
	return nil
}

func (e *Engine) watchRecovery(ctx context.Context, r *recovery) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		e.mu.Lock()
		active, stopping := e.recovering == r, e.stopping
		e.mu.Unlock()
		if !active || stopping {
			return
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := e.cons.Info(ictx)
		cancel()
		if err != nil {
			continue
		}
		e.mu.Lock()
		// Deliveries since the hold began may have been dropped too (a
		// burst after a reconnect): everything delivered so far must be
		// accounted for.
		r.upTo = max(r.upTo, info.Delivered.Stream)
		switch {
		case e.recovering != r:
		case e.accountedLocked(info.AckFloor.Stream, r.upTo):
			e.endRecoveryLocked("every message delivered before the hold is held, awaited or acknowledged by this worker")
		case info.NumAckPending <= e.heldSinceLocked(r.began):
			// Every message delivered to this worker since the hold began
			// is unacknowledged on the server (acks leave held first), so
			// none of the server's is elsewhere. Messages delivered before
			// do not count: a server that restarted may have forgotten
			// delivering them, and would then count a message lost on the
			// way in their place.
			e.endRecoveryLocked("every unacknowledged message is held by this worker")
		}
		e.mu.Unlock()
	}
}

// accountedLocked reports whether every stream sequence in (floor, upTo]
// is held, awaited or settled by this engine: then no unacknowledged
// message can come back and overtake a newer one of its key. (Counting the
// server's unacknowledged messages instead is not enough: after a server
// restart, or when a delivery was dropped, the count can match while the
// messages differ.) A sequence acknowledged by an earlier worker is never
// accounted for here; the recovery then narrows on its timer, 2 × AckWait
// after it began (narrowRecovery). It also prunes settled at the floor.
// e.mu must be held.
func (e *Engine) accountedLocked(floor, upTo uint64) bool {
	for seq := range e.settled {
		if seq <= floor {
			delete(e.settled, seq)
		}
	}
	if upTo <= floor {
		return true
	}
	if upTo-floor > uint64(len(e.held)+len(e.settled))+1024 {
		return false // more than this engine can account for: not worth the walk
	}
	return len(e.unaccountedLocked(floor, upTo, 1)) == 0
}

// heldSinceLocked counts the held messages that arrived at or after t.
// e.mu must be held.
func (e *Engine) heldSinceLocked(t time.Time) int {
	n := 0
	for _, it := range e.held {
		if !it.arrived.Before(t) {
			n++
		}
	}
	return n
}

// maxSettled is the size of Engine.settled from which it is pruned.
const maxSettled = 8192

// markSettledLocked records that this engine acknowledged or terminated
// the message at seq. Past pruneSettledAt it prunes settled, and sets the
// next threshold at twice what is left: a message held for long (a busy
// key's, or one waiting for a retry) keeps every sequence above it, and
// without the doubling every settle would walk the whole set again, which
// made an engine with 64 workers four times slower than one with 16. So
// pruning costs O(1) per message, amortized. e.mu must be held.
func (e *Engine) markSettledLocked(seq uint64) {
	e.settled[seq] = struct{}{}
	if len(e.settled) > e.pruneSettledAt {
		e.pruneSettledLocked()
		e.pruneSettledAt = max(maxSettled, 2*len(e.settled))
	}
}

// pruneSettledLocked forgets the settled sequences below every message the
// engine holds or awaits. Some may still lie above the server's ack floor
// (a message this engine never saw is unacknowledged below them); a
// recovery then cannot account for them and ends on its timer instead:
// slower, never wrong. e.mu must be held.
func (e *Engine) pruneSettledLocked() {
	low := ^uint64(0)
	for seq := range e.held {
		low = min(low, seq)
	}
	for _, ks := range e.keys {
		if len(ks.awaits) > 0 {
			low = min(low, ks.awaits[0].seq)
		}
	}
	for seq := range e.settled {
		if seq < low {
			delete(e.settled, seq)
		}
	}
}

// endRecoveryLocked lets every key run again. e.mu must be held.
func (e *Engine) endRecoveryLocked(why string) {
	r := e.recovering
	if r == nil || e.stopping {
		return
	}
	r.timer.Stop()
	e.recovering = nil
	e.log.Info().Int("redelivered", len(r.seen)).Str("why", why).Msg("recovery done; keys run again")
	for key, ks := range e.keys {
		e.scheduleLocked(key, ks)
	}
}

// narrowRecovery ends a recovery that has not accounted for every
// message delivered before its hold within 2 × AckWait: the server has not
// redelivered them all (it redelivers late after a restart, or another
// worker holds them), or some were acknowledged by another worker. Instead
// of letting every key go on blind, it reads the keys of the messages still
// unaccounted for from the stream and makes each of those keys await its
// message, as after a nak (see heartbeat: an awaited message is waited for
// until it is redelivered, acknowledged below the ack floor or deleted);
// every other key runs again. If the stream cannot be read it tries again
// a second later, keys still held.
func (e *Engine) narrowRecovery(r *recovery) {
	e.mu.Lock()
	active := e.recovering == r && !e.stopping
	e.mu.Unlock()
	if !active {
		return
	}
	missing, err := e.unaccounted(r)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.recovering != r || e.stopping {
		return
	}
	if err != nil {
		e.log.Warn().Err(err).Msg("recovery: cannot read the messages still unaccounted for; keys stay held, retrying")
		r.timer = time.AfterFunc(time.Second, func() { e.narrowRecovery(r) })
		return
	}
	now := time.Now()
	keys := map[string]struct{}{}
	for _, u := range missing {
		if _, ok := e.held[u.seq]; ok {
			continue // arrived meanwhile
		}
		if _, ok := e.settled[u.seq]; ok {
			continue
		}
		ks := e.keys[u.key]
		if ks == nil {
			ks = &keyState{}
			e.keys[u.key] = ks
		}
		ks.addAwait(await{seq: u.seq, redeliverAt: now, giveUpAt: now.Add(e.ackWait)})
		keys[u.key] = struct{}{}
	}
	if len(keys) > 0 {
		e.log.Warn().Int("messages", len(missing)).Int("keys", len(keys)).
			Msg("recovery: messages delivered before the hold are still unacknowledged; their keys wait for them, the others run again")
	}
	e.endRecoveryLocked("every message delivered before the hold is held, awaited or acknowledged, or its key waits for it")
}

// unaccountedMsg is a message a recovery waits for, and its key.
type unaccountedMsg struct {
	seq uint64
	key string
}

// unaccounted returns the messages in (ack floor, delivered] that the
// engine neither holds, awaits nor settled, with their keys, read from the
// stream (headers only: Options.Key and Skip see the subject and headers).
// Messages deleted from the stream and other partitions' messages are left
// out: nothing of theirs can overtake a key's newer messages here.
func (e *Engine) unaccounted(r *recovery) ([]unaccountedMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The consumer's info alone within 5s: a reply lost with a connection
	// then costs a retry a second later (narrowRecovery), not 30s of held
	// keys.
	ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := e.cons.Info(ictx)
	icancel()
	if err != nil {
		return nil, fmt.Errorf("reading consumer %s: %w", e.cons.CachedInfo().Name, err)
	}
	e.mu.Lock()
	r.upTo = max(r.upTo, info.Delivered.Stream)
	need := e.unaccountedLocked(info.AckFloor.Stream, r.upTo, 0)
	e.mu.Unlock()
	if len(need) == 0 {
		return nil, nil
	}
	first, last := need[0], need[len(need)-1]
	want := make(map[uint64]struct{}, len(need))
	for _, seq := range need {
		want[seq] = struct{}{}
	}
	oc, err := e.js.OrderedConsumer(ctx, info.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   first,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s from sequence %d: %w", info.Stream, first, err)
	}
	var out []unaccountedMsg
	for next := first; next <= last; {
		batch, err := oc.Fetch(int(min(last-next+1, 1024)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s from sequence %d: %w", info.Stream, next, err)
		}
		n := 0
		for jm := range batch.Messages() {
			n++
			md, err := jm.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			next = max(next, seq+1)
			if _, ok := want[seq]; !ok {
				continue
			}
			m := &Message{Subject: jm.Subject(), Header: jm.Headers(), Stream: info.Stream, StreamSeq: seq, Timestamp: md.Timestamp}
			m.Key = e.opts.Key(m)
			if e.opts.Skip != nil && e.opts.Skip(m) {
				continue
			}
			out = append(out, unaccountedMsg{seq: seq, key: m.Key})
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading %s from sequence %d: %w", info.Stream, next, err)
		}
		if n == 0 {
			break // the rest was deleted
		}
	}
	return out, nil
}

// unaccountedLocked lists, in order, the sequences in (floor, upTo] that
// are neither held, awaited nor settled, at most limit of them (0: all).
// e.mu must be held.
func (e *Engine) unaccountedLocked(floor, upTo uint64, limit int) []uint64 {
	awaited := map[uint64]struct{}{}
	for _, ks := range e.keys {
		for _, a := range ks.awaits {
			awaited[a.seq] = struct{}{}
		}
	}
	var out []uint64
	for seq := floor + 1; seq <= upTo; seq++ {
		if _, ok := e.held[seq]; ok {
			continue
		}
		if _, ok := e.settled[seq]; ok {
			continue
		}
		if _, ok := awaited[seq]; ok {
			continue
		}
		out = append(out, seq)
		if len(out) == limit {
			break
		}
	}
	return out
}

// fetchPoll bounds each wait for a message. The iterator decides whether
// to send the next pull request only when Next is called, and skips the
// decision while its previous request is still being sent; if the last
// message of a batch lands in that window, no request is outstanding and
// Next would wait for the missed-heartbeat timeout (2 × 15s) before pulling
// again. Returning to Next regularly makes it re-check.
const fetchPoll = 250 * time.Millisecond

// fetch reads the iterator until it is closed, handing messages to accept.
func (e *Engine) fetch(iter jetstream.MessagesContext) error {
	for {
		jm, err := iter.Next(jetstream.NextMaxWait(e.fetchWait()))
		if err != nil {
			switch {
			case errors.Is(err, nats.ErrTimeout):
				continue
			case errors.Is(err, jetstream.ErrNoHeartbeat):
				e.log.Warn().Err(err).Msg("missed consumer heartbeats; still waiting")
				continue
			case errors.Is(err, jetstream.ErrMsgIteratorClosed) && !errors.Is(err, jetstream.ErrConnectionClosed):
				return nil
			}
			if e.isStopping() {
				return nil
			}
			return fmt.Errorf("consuming %s: %w", e.cons.CachedInfo().Name, err)
		}
		e.accept(jm)
	}
}

// fetchWait is how long one Next waits: fetchPoll, or with PullExpiry
// longer than the iterator's missed-heartbeat check (2 × PullExpiry/2), so
// that a pull request lost with a cluster node (no 408 ever comes back) is
// noticed and replaced. Without it the iterator counts the lost request as
// outstanding and never pulls again.
func (e *Engine) fetchWait() time.Duration {
	if e.opts.PullExpiry > 0 {
		return e.opts.PullExpiry + time.Second
	}
	return fetchPoll
}

func (e *Engine) isStopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}

// accept puts a delivery into its key's FIFO, or refreshes the handle of a
// message the engine already holds (a redelivery after AckWait expired).
func (e *Engine) accept(jm jetstream.Msg) {
	md, err := jm.Metadata()
	if err != nil {
		e.log.Error().Err(err).Str("subject", jm.Subject()).Msg("message without JetStream metadata; ignored")
		return
	}
	m := &Message{
		Subject:      jm.Subject(),
		Header:       jm.Headers(),
		Data:         jm.Data(),
		Stream:       md.Stream,
		StreamSeq:    md.Sequence.Stream,
		NumDelivered: md.NumDelivered,
		Timestamp:    md.Timestamp,
	}
	m.Key = e.opts.Key(m)
	kind := e.opts.Kind(m)
	skip := e.opts.Skip != nil && e.opts.Skip(m)
	if m.NumDelivered > 1 && !skip {
		e.opts.Observer.OnRedelivery(kind)
	}
	now := time.Now()

	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopping {
		e.checkDeliveryLocked(jm.Headers().Get(pinIDHeader), md.Sequence.Consumer)
	}
	if r := e.recovering; r != nil && m.NumDelivered > 1 && m.StreamSeq <= r.upTo {
		r.seen[m.StreamSeq] = struct{}{}
	}
	if skip {
		e.markSettledLocked(m.StreamSeq) // acknowledged here: another partition's
		e.mu.Unlock()
		if err := jm.Ack(); err != nil {
			e.log.Warn().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Msg("ack of another partition's message failed; it will be redelivered")
		}
		e.mu.Lock() // for the deferred unlock
		return
	}
	if it, ok := e.held[m.StreamSeq]; ok {
		it.msg = jm
		it.delivered = max(it.delivered, m.NumDelivered)
		it.touched, it.arrived = now, now
		return
	}
	it := &item{msg: jm, delivered: m.NumDelivered, m: m, kind: kind, touched: now, arrived: now}
	e.held[m.StreamSeq] = it
	ks := e.keys[m.Key]
	if ks == nil {
		ks = &keyState{}
		e.keys[m.Key] = ks
	}
	ks.insert(it)
	e.scheduleLocked(m.Key, ks)
}

// scheduleLocked queues the key for a worker if its head may run and no
// worker owns it. e.mu must be held.
func (e *Engine) scheduleLocked(key string, ks *keyState) {
	if ks.scheduled || e.stopping || e.recovering != nil || !ks.eligible() {
		return
	}
	ks.scheduled = true
	e.ready = append(e.ready, key)
	e.wake()
}

func (e *Engine) wake() {
	select {
	case e.readyCh <- struct{}{}:
	default:
	}
}

// dispatch hands ready keys to the pool; Go blocking on a full pool is the
// back-pressure.
func (e *Engine) dispatch(p *pool.ContextPool) {
	for {
		e.mu.Lock()
		for len(e.ready) == 0 && !e.stopping {
			e.mu.Unlock()
			<-e.readyCh
			e.mu.Lock()
		}
		if e.stopping {
			e.mu.Unlock()
			return
		}
		key := e.ready[0]
		e.ready = e.ready[1:]
		if len(e.ready) == 0 {
			e.ready = nil
		}
		e.mu.Unlock()
		p.Go(func(ctx context.Context) error {
			e.runKey(ctx, key)
			return nil
		})
	}
}

// runKey handles the eligible heads of one key, one after the other, for at
// most keyTurn messages.
func (e *Engine) runKey(ctx context.Context, key string) {
	for n := 0; ; n++ {
		e.mu.Lock()
		ks := e.keys[key]
		// A hold or recovery that began while this worker ran the key
		// stops it too: a newer message may have arrived before an older
		// one that the hold waits for. endRecoveryLocked schedules it again.
		if e.stopping || e.recovering != nil || !ks.eligible() {
			ks.scheduled = false
			e.forgetLocked(key, ks)
			e.mu.Unlock()
			return
		}
		if n == keyTurn {
			e.ready = append(e.ready, key)
			e.wake()
			e.mu.Unlock()
			return
		}
		it := ks.pop()
		e.mu.Unlock()
		e.process(ctx, it)
	}
}

// forgetLocked drops the state of a key that holds nothing. e.mu must be
// held.
func (e *Engine) forgetLocked(key string, ks *keyState) {
	if !ks.scheduled && len(ks.queue) == 0 && len(ks.awaits) == 0 {
		delete(e.keys, key)
	}
}

// process runs the handler on one message, containing panics, and settles it.
func (e *Engine) process(ctx context.Context, it *item) {
	start := time.Now()
	var herr error
	if _, delivered := e.msgOf(it); e.maxDeliver > 0 && delivered > e.maxDeliver {
		herr = &PermanentError{Reason: ReasonMaxDeliver, Err: ErrMaxDeliver}
	} else {
		hctx, cancel := context.WithTimeout(ctx, e.opts.HandlerTimeout)
		if rec := panics.Try(func() { herr = e.h.Handle(hctx, it.m) }); rec != nil {
			e.log.Error().Str("subject", it.m.Subject).Uint64("seq", it.m.StreamSeq).
				Str("panic", fmt.Sprint(rec.Value)).Bytes("stack", rec.Stack).Msg("handler panicked")
			herr = &PermanentError{Reason: ReasonPanic, Err: fmt.Errorf("%w: %v", ErrHandlerPanic, rec.Value)}
		}
		cancel()
	}
	e.settle(ctx, it, herr, time.Since(start))
}

// settle is the one place that maps a handler's result to the ack verbs.
//
//	nil                                  → Ack
//	handlers cancelled at shutdown       → Nak (immediate redelivery elsewhere)
//	permanent (ErrPermanent, panic)      → dead letter, then TermWithReason
//	transient, NumDelivered >= MaxDeliver → dead letter, then TermWithReason
//	transient                            → NakWithDelay(backoff); the key waits
//	dead-letter publish failed           → NakWithDelay(backoff); the key waits
func (e *Engine) settle(ctx context.Context, it *item, herr error, took time.Duration) {
	m := it.m
	_, delivered := e.msgOf(it)
	var outcome Outcome
	switch {
	case herr == nil:
		// Out of held before the ack leaves: a recovery that compares the
		// server's count of unacknowledged messages with what this engine
		// holds must never count a message the server may already have
		// seen acknowledged (see watchRecovery).
		msg := e.latest(it)
		e.mu.Lock()
		if e.held[m.StreamSeq] == it {
			delete(e.held, m.StreamSeq)
		}
		e.markSettledLocked(m.StreamSeq)
		e.mu.Unlock()
		if err := msg.Ack(); err != nil {
			e.log.Warn().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Msg("ack failed; the message will be redelivered")
		}
		outcome = OutcomeAck
	case ctx.Err() != nil && !errors.Is(herr, ErrPermanent):
		if err := e.latest(it).Nak(); err != nil {
			e.log.Warn().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Msg("nak failed; the message will be redelivered after AckWait")
		}
		outcome = OutcomeShutdown
	case errors.Is(herr, ErrPermanent):
		outcome = e.deadLetter(ctx, it, delivered, reasonOf(herr), herr)
	case e.maxDeliver > 0 && delivered >= e.maxDeliver:
		outcome = e.deadLetter(ctx, it, delivered, ReasonMaxDeliver, herr)
	default:
		e.log.Warn().Err(herr).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).
			Uint64("delivered", delivered).Msg("handler failed; retrying later")
		e.retry(it, delivered)
		outcome = OutcomeRetry
	}
	e.opts.Observer.OnOutcome(it.kind, outcome, took)

	e.mu.Lock()
	if e.held[m.StreamSeq] == it {
		delete(e.held, m.StreamSeq)
	}
	if outcome != OutcomeRetry && outcome != OutcomeShutdown {
		e.markSettledLocked(m.StreamSeq)
	}
	if ks := e.keys[m.Key]; ks != nil {
		e.forgetLocked(m.Key, ks)
	}
	e.mu.Unlock()
}

// msgOf returns the latest delivery of a held message and its delivery
// count: the server may have redelivered it while it waited (see accept).
func (e *Engine) msgOf(it *item) (jetstream.Msg, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return it.msg, it.delivered
}

func (e *Engine) latest(it *item) jetstream.Msg {
	msg, _ := e.msgOf(it)
	return msg
}

// backoff is the redelivery delay after the given delivery failed.
func (e *Engine) backoff(delivered uint64) time.Duration {
	d := e.opts.BackoffInitial
	for i := uint64(1); i < delivered && d < e.opts.BackoffMax; i++ {
		d *= 2
	}
	return min(d, e.opts.BackoffMax)
}

// retry naks a message with a delay and makes its key wait for the
// redelivery, so that no later message of the key overtakes it.
func (e *Engine) retry(it *item, delivered uint64) {
	delay := e.backoff(delivered)
	redeliverAt := time.Now().Add(delay)
	nakd := e.latest(it)
	if err := nakd.NakWithDelay(delay); err != nil {
		e.log.Warn().Err(err).Str("subject", it.m.Subject).Uint64("seq", it.m.StreamSeq).Msg("nak failed; the message will be redelivered after AckWait")
		redeliverAt = time.Now().Add(e.ackWait)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ks := e.keys[it.m.Key]
	if ks == nil { // only if handBack already dropped the keys
		ks = &keyState{}
		e.keys[it.m.Key] = ks
	}
	if it.msg != nakd {
		// The redelivery arrived while this worker still held the message
		// (accept swapped the handle in): queue it again as a new item, the
		// head of its key, instead of waiting for a delivery that came.
		m := *it.m
		m.NumDelivered = it.delivered
		again := &item{msg: it.msg, delivered: it.delivered, m: &m, kind: it.kind, touched: time.Now(), arrived: it.arrived}
		e.held[m.StreamSeq] = again
		ks.insert(again)
		return
	}
	ks.addAwait(await{
		seq:         it.m.StreamSeq,
		redeliverAt: redeliverAt,
		giveUpAt:    redeliverAt.Add(2 * e.ackWait),
	})
}

// deadLetter stores the message with its reason in the dead-letter stream,
// then terminates it. If the publish fails the message is retried instead:
// never lost.
func (e *Engine) deadLetter(ctx context.Context, it *item, delivered uint64, reason string, cause error) Outcome {
	m := it.m
	dm := &nats.Msg{
		Subject: e.opts.DeadLetterSubject(m.Subject, reason),
		Data:    m.Data,
		Header:  make(nats.Header, len(m.Header)+8),
	}
	for k, v := range m.Header {
		if strings.HasPrefix(k, "Nats-") {
			continue // control headers (msg id, expectations, TTL) would act on the DLQ stream
		}
		dm.Header[k] = slices.Clone(v)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		dm.Header.Set(HeaderOriginalMsgID, id)
	}
	dm.Header.Set(HeaderDeadLetterReason, headerSafe(reason))
	dm.Header.Set(HeaderDeadLetterError, headerSafe(cause.Error()))
	dm.Header.Set(HeaderOriginalSubject, m.Subject)
	dm.Header.Set(HeaderOriginalStream, m.Stream)
	dm.Header.Set(HeaderOriginalSequence, strconv.FormatUint(m.StreamSeq, 10))
	dm.Header.Set(HeaderOriginalTime, m.Timestamp.UTC().Format(time.RFC3339Nano))
	dm.Header.Set(HeaderNumDelivered, strconv.FormatUint(delivered, 10))

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.DeadLetterTimeout)
	defer cancel()
	msgID := "dlq-" + m.Stream + "-" + strconv.FormatUint(m.StreamSeq, 10)
	if _, err := e.js.PublishMsg(pctx, dm, jetstream.WithMsgID(msgID)); err != nil {
		e.log.Error().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Str("reason", reason).
			Msg("dead-letter publish failed; retrying the message later")
		e.retry(it, delivered)
		return OutcomeDeadLetterFailed
	}
	if err := e.latest(it).TermWithReason(reason); err != nil {
		e.log.Warn().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Msg("term failed; the redelivery will be dead-lettered again and deduplicated")
	}
	e.log.Warn().Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Str("reason", reason).
		Uint64("delivered", delivered).Err(cause).Msg("dead-lettered")
	e.opts.Observer.OnDeadLetter(it.kind, reason)
	return OutcomeDeadLetter
}

// headerSafe makes s a single-line header value of bounded length.
func headerSafe(s string) string {
	if len(s) > maxErrorHeader {
		s = s[:maxErrorHeader]
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// heartbeat keeps every held message alive on the server with progress
// acks (queued behind its key, waiting for a redelivery, or in a slow
// handler), and gives up on awaited redeliveries that did not come.
func (e *Engine) heartbeat(stop <-chan struct{}) {
	period := max(e.ackWait/3, 10*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	var touch []jetstream.Msg
	reconnects := e.js.Conn().Stats().Reconnects
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// A reconnect the status watch missed is handled here too.
		if rc := e.js.Conn().Stats().Reconnects; rc != reconnects {
			reconnects = rc
			e.afterReconnect()
		}
		now := time.Now()
		touch = touch[:0]
		e.mu.Lock()
		for _, it := range e.held {
			if now.Sub(it.touched) >= period {
				it.touched = now
				touch = append(touch, it.msg)
			}
		}
		var overdue []uint64
		for _, ks := range e.keys {
			for _, a := range ks.awaits {
				if !now.Before(a.giveUpAt) {
					overdue = append(overdue, a.seq)
				}
			}
		}
		e.mu.Unlock()
		// An awaited message may only be given up when it is gone: acked
		// (below the consumer's ack floor) or deleted from the stream. One
		// that is merely late (its redelivery went to a stale pull request
		// across a reconnect, say) is waited for again: letting a later
		// message of its key run first would apply the key out of order.
		gone := e.goneMessages(overdue)
		e.mu.Lock()
		for key, ks := range e.keys {
			kept := ks.awaits[:0]
			for _, a := range ks.awaits {
				if now.Before(a.giveUpAt) {
					kept = append(kept, a)
					continue
				}
				if _, ok := gone[a.seq]; !ok {
					a.giveUpAt = now.Add(e.ackWait)
					kept = append(kept, a)
					e.log.Warn().Str("key", key).Uint64("seq", a.seq).Msg("awaited redelivery is late; the key keeps waiting for it")
					continue
				}
				e.log.Warn().Str("key", key).Uint64("seq", a.seq).
					Msg("awaited message was acknowledged elsewhere or deleted from the stream; the key goes on without it")
			}
			ks.awaits = kept
			e.scheduleLocked(key, ks)
			e.forgetLocked(key, ks)
		}
		e.mu.Unlock()
		for _, jm := range touch {
			if err := jm.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
				e.log.Debug().Err(err).Msg("progress ack failed")
			}
		}
	}
}

// handBackLag delays the hand-back of a key's later messages behind its
// first one. The server redelivers nak'd messages in nak order, except that
// a redelivery it pops while only departed clients' pull requests are
// waiting goes to the back of its queue; the first nak of a hand-back clears
// those stale requests, and the later messages, arriving in the queue after
// the lag (sorted by sequence by the server), stay behind every key's head.
const handBackLag = 100 * time.Millisecond

// handBack naks every message still held after the workers stopped, so that
// the next consumer gets them at once and in order per key: a key's first
// message immediately, the others after handBackLag; a key that waits for a
// nak'd message hands everything back to come after it.
func (e *Engine) handBack() {
	type nak struct {
		msg   jetstream.Msg
		delay time.Duration
	}
	var heads, tails []nak
	now := time.Now()
	e.mu.Lock()
	for _, ks := range e.keys {
		var after time.Duration
		for _, a := range ks.awaits {
			after = max(after, a.redeliverAt.Sub(now)+handBackLag)
		}
		for i, it := range ks.queue {
			if i == 0 && after == 0 {
				heads = append(heads, nak{it.msg, 0})
				continue
			}
			tails = append(tails, nak{it.msg, max(after, handBackLag)})
		}
	}
	e.keys = make(map[string]*keyState)
	e.held = make(map[uint64]*item)
	e.ready = nil
	e.mu.Unlock()
	for _, n := range append(heads, tails...) {
		var err error
		if n.delay > 0 {
			err = n.msg.NakWithDelay(n.delay)
		} else {
			err = n.msg.Nak()
		}
		if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			e.log.Warn().Err(err).Msg("nak at shutdown failed; the message will be redelivered after AckWait")
		}
	}
	if n := len(heads) + len(tails); n > 0 {
		e.log.Info().Int("messages", n).Msg("handed unfinished messages back to the server")
	}
}
