package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrMembersDisagree is returned by Lanes.Run when another live member
// announces another value than this one (LanesConfig.Announced, the
// layout): the two would read different lanes of one key.
var ErrMembersDisagree = errors.New("workers disagree on the partition count")

// ErrConnectionClosed is returned by Lanes.Run when its NATS connection was
// closed for good: nothing can be read or committed any more.
var ErrConnectionClosed = errors.New("the NATS connection is closed")

// LanesConfig is where and as whom a Lanes runs.
type LanesConfig struct {
	// Members is the bucket in which the workers announce themselves; its
	// entries expire after the member TTL (the bucket's TTL).
	Members jetstream.KeyValue
	// Leases is the bucket of the lanes' leases and checkpoints.
	Leases jetstream.KeyValue
	// Member is this worker's name among the members.
	Member string
	// LeaseTTL is the lanes' lease TTL.
	LeaseTTL time.Duration
	// Period is how often the member announces itself and the lanes are
	// assigned again: a fraction of the member TTL.
	Period time.Duration
	// Announced is the value of the member's entry (the layout, e.g.
	// "partitions=4"); a live member that announces another is
	// ErrMembersDisagree.
	Announced string
}

// NewLanes returns the runner of specs as cfg says; call Run.
func NewLanes(js jetstream.JetStream, cfg LanesConfig, specs []LaneSpec) *Lanes {
	return &Lanes{
		js: js, members: cfg.Members, leases: cfg.Leases, member: cfg.Member,
		leaseTTL: cfg.LeaseTTL, period: cfg.Period, announced: cfg.Announced,
		specs: specs, running: map[string]*laneRun{}, checked: map[string]bool{},
		closeCh: make(chan struct{}), done: make(chan struct{}),
	}
}

// LaneSpec is one lane a worker can run: its lease key, what it reads, who
// applies it, and what to do when it is acquired.
type LaneSpec struct {
	// Key is the lane's lease key (tools.<i>, composition, directives).
	Key string
	// Source is what the lane reads.
	Source Source
	// Handler applies the lane's messages.
	Handler BatchHandler
	// Options are the lane's engine options (Logger is the lane's).
	Options Options
	// OnAcquire runs after the lease is taken and before the lane reads:
	// it brings the state views up to what the previous holder wrote.
	OnAcquire func(context.Context) error
	// Initial is the checkpoint of a lease that was never committed under
	// Layout (an upgrade from the per-message-ack consumers starts after
	// their ack floor); nil: the start of the stream.
	Initial func(context.Context) (uint64, error)
	// Layout names the partitioning the lane's checkpoint belongs to
	// (Layout.Name); a lease committed under another starts at Initial.
	Layout string
	// BeforeRelease runs after the engine stopped and before the lease is
	// released when the lane moves to another worker (the outcome counts
	// held in memory are stored).
	BeforeRelease func(context.Context)
	// CatchUp, when set, reads what was stored under an earlier layout
	// before the lane's own filters (catchup.go).
	CatchUp *CatchUp
}

// LaneStatus is one lane as this worker runs it.
type LaneStatus struct {
	Lane  string // the lease key: tools.<i>, composition, directives
	Owner string // this worker
	Stats
	// Pending is how many stored messages of the lane the engine has not
	// read yet (the server's count for its consumer).
	Pending uint64
}

// Lag is the number of the lane's messages not yet applied.
func (s LaneStatus) Lag() uint64 { return s.Pending + uint64(max(s.Held, 0)) }

// Lanes runs the lanes this worker owns: it announces the member in the
// members bucket, assigns the lanes over the live members (Assign), takes
// each owned lane's lease and runs an engine on it, and gives lanes back as
// members come and go. See the package doc.
type Lanes struct {
	js        jetstream.JetStream
	members   jetstream.KeyValue
	leases    jetstream.KeyValue
	member    string
	leaseTTL  time.Duration
	period    time.Duration
	announced string // the value of the member's entry, shared by all
	specs     []LaneSpec

	mu      sync.Mutex
	running map[string]*laneRun
	owned   []string
	checked map[string]bool

	started   bool
	closeOnce sync.Once
	closeCh   chan struct{}
	done      chan struct{}
	runErr    error
}

type laneRun struct {
	spec     LaneSpec
	cancel   context.CancelFunc
	done     chan struct{}
	stopping bool
	// handover is set when the lane stops because it moved to another
	// worker (not because this one stops): its beforeRelease runs.
	handover atomic.Bool

	mu  sync.Mutex
	eng *Engine // the engine running now; nil while acquiring
}

func (r *laneRun) engine() *Engine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng
}

func (r *laneRun) setEngine(e *Engine) {
	r.mu.Lock()
	r.eng = e
	r.mu.Unlock()
}

// Member is the name under which this worker shares the lanes.
func (l *Lanes) Member() string { return l.member }

// Owned returns the lanes assigned to this worker as of its latest view of
// the members, sorted.
func (l *Lanes) Owned() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.owned)
}

// Run announces the member and runs the owned lanes until ctx is cancelled
// or Close is called. Each lane stops as Engine.Run describes (in-flight
// calls finish, the checkpoint is committed) and its lease is released, so
// that another worker takes it at once; then the member leaves. Run can be
// called once.
func (l *Lanes) Run(ctx context.Context) error {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return ErrAlreadyRunning
	}
	l.started = true
	l.mu.Unlock()
	defer close(l.done)
	l.runErr = l.run(ctx)
	return l.runErr
}

// Close stops the lanes as Run describes and waits for Run to return. It
// is idempotent.
func (l *Lanes) Close() error {
	l.closeOnce.Do(func() { close(l.closeCh) })
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if !started {
		return nil
	}
	<-l.done
	return l.runErr
}

func (l *Lanes) run(ctx context.Context) error {
	select {
	case <-l.closeCh:
		return ErrClosed
	default:
	}
	log := zerolog.Ctx(ctx).With().Str("component", "lanes").Str("member", l.member).Logger()
	ctx = log.WithContext(ctx)
	keys := make([]string, len(l.specs))
	for i, s := range l.specs {
		keys[i] = s.Key
	}
	log.Info().Strs("lanes", keys).Dur("lease_ttl", l.leaseTTL).Msg("joining the workers")
	t := time.NewTicker(l.period)
	defer t.Stop()
	var failed error
	for {
		if l.js.Conn().IsClosed() {
			failed = ErrConnectionClosed
			log.Error().Err(failed).Msg("stopping")
			break
		}
		l.announce(ctx)
		live, ok, err := l.liveMembers(ctx)
		switch {
		case err != nil:
			failed = err
		case ok:
			var own []string
			for _, i := range Assign(append(live, l.member), len(l.specs), l.member) {
				own = append(own, l.specs[i].Key)
			}
			l.reconcile(ctx, own)
		}
		if failed != nil {
			log.Error().Err(failed).Msg("stopping")
			break
		}
		stop := false
		select {
		case <-ctx.Done():
			stop = true
		case <-l.closeCh:
			stop = true
		case <-t.C:
		}
		if stop {
			break
		}
	}
	l.stopAll()
	l.leave(ctx)
	return failed
}

// announce refreshes the member's entry; its age tells the others that
// this worker is alive.
func (l *Lanes) announce(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, l.period)
	defer cancel()
	if _, err := l.members.PutString(pctx, l.member, l.announced); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("announcing the member failed; the others may take over its lanes")
	}
}

// leave deletes the member's entry so that the others take over now
// rather than after the member TTL.
func (l *Lanes) leave(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.members.Delete(dctx, l.member); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("leaving the members failed; the others take over after the member TTL")
	}
}

// liveMembers lists the members whose entries have not expired. On a read
// error it reports false: the caller keeps what it runs. A member that
// announces another layout is an error (ErrMembersDisagree): the two
// would read different lanes of one key.
func (l *Lanes) liveMembers(ctx context.Context) ([]string, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, l.period)
	defer cancel()
	lister, err := l.members.ListKeys(lctx)
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("listing the members failed; keeping the current lanes")
		return nil, false, nil
	}
	var live []string
	for k := range lister.Keys() {
		live = append(live, k)
	}
	for _, m := range live {
		if m == l.member || l.checked[m] {
			continue
		}
		e, err := l.members.Get(lctx, m)
		if err != nil {
			continue // expired meanwhile, or not readable now: next round
		}
		if got := string(e.Value()); got != l.announced {
			return nil, false, fmt.Errorf("%w: member %s announces %q, this worker %q", ErrMembersDisagree, m, got, l.announced)
		}
		l.checked[m] = true
	}
	return live, true, nil
}

// reconcile starts the lanes newly owned and stops those owned no more.
func (l *Lanes) reconcile(ctx context.Context, own []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, r := range l.running {
		select {
		case <-r.done:
			delete(l.running, k)
		default:
		}
	}
	if !slices.Equal(own, l.owned) {
		zerolog.Ctx(ctx).Info().Strs("lanes", own).Strs("before", l.owned).Msg("lanes assigned")
		l.owned = own
	}
	for k, r := range l.running {
		if !slices.Contains(own, k) && !r.stopping {
			r.stopping = true
			r.handover.Store(true)
			r.cancel() // the engine stops gracefully, commits, and the lease is released
		}
	}
	for _, spec := range l.specs {
		if !slices.Contains(own, spec.Key) {
			continue
		}
		if _, ok := l.running[spec.Key]; ok {
			continue // running, or still stopping: started again on a later round
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &laneRun{spec: spec, cancel: cancel, done: make(chan struct{})}
		l.running[spec.Key] = r
		go func() {
			defer close(r.done)
			l.runLane(rctx, r)
		}()
	}
}

// stopAll stops every lane at once and waits for them.
func (l *Lanes) stopAll() {
	l.mu.Lock()
	runs := make([]*laneRun, 0, len(l.running))
	for _, r := range l.running {
		r.stopping = true
		r.cancel()
		runs = append(runs, r)
	}
	l.running = map[string]*laneRun{}
	l.owned = nil
	l.mu.Unlock()
	for _, r := range runs {
		<-r.done
	}
}

// laneRetry is how long a lane waits before it tries again after its
// engine stopped on an error (the server unreachable, a stream leader
// election).
const laneRetry = time.Second

// runLane holds the lane until ctx ends: it takes the lease (waiting for a
// dead holder's to expire), catches the views up, and runs the engine; a
// lost lease is taken again (this worker still owns the lane, so the
// other holder was a paused or partitioned one that will give it up).
func (l *Lanes) runLane(ctx context.Context, r *laneRun) {
	spec := r.spec
	log := zerolog.Ctx(ctx).With().Str("lane", spec.Key).Logger()
	ctx = log.WithContext(ctx)
	for ctx.Err() == nil && !l.js.Conn().IsClosed() {
		lease, err := AcquireLease(ctx, l.leases, spec.Key, l.member, l.leaseTTL)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("taking the lane's lease failed; trying again")
				sleepCtx(ctx, laneRetry)
			}
			continue
		}
		if err := l.prepare(ctx, lease, spec); err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, ErrViewClosed):
				log.Error().Err(err).Msg("the state views no longer follow their buckets (closed, or their watch ended): the lane cannot be taken until the worker restarts")
			default:
				log.Warn().Err(err).Msg("preparing the lane failed; trying again")
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = lease.Release(rctx, lease.Checkpoint())
			cancel()
			sleepCtx(ctx, laneRetry)
			continue
		}
		log.Info().Uint64("checkpoint", lease.Checkpoint()).Uint64("epoch", lease.Epoch()).Msg("lane taken")
		l.runEngine(ctx, lease, r)
	}
}

// prepare sets the checkpoint of a lease never committed under the spec's
// layout (spec.Initial) and runs the spec's onAcquire.
func (l *Lanes) prepare(ctx context.Context, lease *Lease, spec LaneSpec) error {
	if lease.Checkpoint() == 0 || lease.Layout() != spec.Layout {
		start := uint64(1)
		if spec.Initial != nil {
			s, err := spec.Initial(ctx)
			if err != nil {
				return err
			}
			start = max(s, 1)
		}
		if err := lease.CommitLayout(ctx, start, spec.Layout); err != nil {
			return err
		}
	}
	if spec.OnAcquire != nil {
		return spec.OnAcquire(ctx)
	}
	return nil
}

// runEngine runs engines on the lease until ctx ends (then releases it) or
// the lease is lost.
func (l *Lanes) runEngine(ctx context.Context, lease *Lease, r *laneRun) {
	log := zerolog.Ctx(ctx)
	for {
		opts := r.spec.Options
		opts.Logger = log
		if c := r.spec.CatchUp; c != nil && lease.Checkpoint() < c.Since {
			if err := l.catchUp(ctx, lease, r, opts); err != nil {
				if errors.Is(err, ErrLost) || lease.Valid() != nil {
					log.Warn().Msg("the lane's lease was taken over; taking it again")
					return
				}
				if ctx.Err() != nil {
					l.release(ctx, lease, r)
					return
				}
				log.Warn().Err(err).Msg("reading what the earlier layout stored failed; trying again")
				sleepCtx(ctx, laneRetry)
				continue
			}
		}
		eng, err := New(l.js, r.spec.Source, lease, r.spec.Handler, opts)
		if err != nil {
			log.Error().Err(err).Msg("the lane's engine cannot start")
			sleepCtx(ctx, laneRetry)
			if ctx.Err() != nil {
				l.release(ctx, lease, r)
				return
			}
			continue
		}
		r.setEngine(eng)
		err = eng.Run(ctx)
		r.setEngine(nil)
		switch {
		case errors.Is(err, ErrLost):
			log.Warn().Msg("the lane's lease was taken over; taking it again")
			return
		case ctx.Err() != nil:
			if err != nil && !errors.Is(err, ErrClosed) {
				log.Warn().Err(err).Msg("the lane stopped with an error")
			}
			l.release(ctx, lease, r)
			return
		case lease.Valid() != nil || l.js.Conn().IsClosed():
			return
		default:
			log.Warn().Err(err).Msg("the lane's engine stopped; starting it again")
			sleepCtx(ctx, laneRetry)
		}
	}
}

// release gives the lease back, after the spec's beforeRelease when the
// lane moves to another worker (a worker that stops stores what it holds
// itself: Service.Close).
func (l *Lanes) release(ctx context.Context, lease *Lease, r *laneRun) {
	if r.handover.Load() && r.spec.BeforeRelease != nil {
		r.spec.BeforeRelease(ctx)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := lease.Release(rctx, lease.Checkpoint()); err != nil && !errors.Is(err, ErrLeaseLost) {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("releasing the lane's lease failed; the next holder waits out its TTL")
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Status returns the lanes this worker runs, with their engines' progress
// and pending counts, sorted by lane.
func (l *Lanes) Status(ctx context.Context) []LaneStatus {
	l.mu.Lock()
	runs := make([]*laneRun, 0, len(l.running))
	for _, r := range l.running {
		if !r.stopping {
			runs = append(runs, r)
		}
	}
	l.mu.Unlock()
	out := make([]LaneStatus, 0, len(runs))
	for _, r := range runs {
		st := LaneStatus{Lane: r.spec.Key, Owner: l.member}
		if e := r.engine(); e != nil {
			st.Stats = e.Stats()
			st.Pending, _ = e.Pending(ctx)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b LaneStatus) int { return compareLanes(a.Lane, b.Lane) })
	return out
}

// compareLanes orders tools.<i> by i, then the other lanes by name.
func compareLanes(a, b string) int {
	ai, aok := toolLaneIndex(a)
	bi, bok := toolLaneIndex(b)
	switch {
	case aok && bok:
		return ai - bi
	case aok:
		return -1
	case bok:
		return 1
	}
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

func toolLaneIndex(key string) (int, bool) {
	const p = "tools."
	if len(key) <= len(p) || key[:len(p)] != p {
		return 0, false
	}
	i, err := strconv.Atoi(key[len(p):])
	return i, err == nil
}

// Assign returns the lanes, out of n, that member owns when members (the
// live ones, in any order, member included or not) share them: lane i goes
// to the i-th member, round robin over the sorted names, so a change of
// membership moves only the lanes it must when n is a multiple of the
// member count. A member that is not in members owns none.
func Assign(members []string, n int, member string) []int {
	sorted := uniqueSorted(members)
	idx := -1
	for i, m := range sorted {
		if m == member {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	var own []int
	for p := range n {
		if p%len(sorted) == idx {
			own = append(own, p)
		}
	}
	return own
}

func uniqueSorted(l []string) []string {
	s := slices.Clone(l)
	slices.Sort(s)
	return slices.Compact(s)
}
