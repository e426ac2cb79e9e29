package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

var memberRE = regexp.MustCompile(`^[A-Za-z0-9_=-][A-Za-z0-9_=.-]*$`)

// DefaultMember is the member name of this process when none is given: the
// host name and the process id ("worker-7-1234"), reduced to the characters
// a KV key allows.
func DefaultMember() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	host = strings.Map(func(r rune) rune {
		if r < 128 && memberRE.MatchString(string(r)) && r != '.' {
			return r
		}
		return '-'
	}, host)
	return host + "-" + strconv.Itoa(os.Getpid())
}

// Group is the partitioned worker: it announces the member in the members
// bucket, computes from the live members which partitions it owns (Assign),
// and runs one Engine per owned partition on that partition's pinned
// consumer, starting and stopping engines as members come and go. See the
// package doc for how order per key holds across workers.
//
// Run and Close are safe for concurrent use; Close is idempotent.
type Group struct {
	js     jetstream.JetStream
	res    *Resources
	h      Handler
	opts   Options
	member string
	period time.Duration

	mu      sync.Mutex
	running map[int]*partitionRun
	owned   []int
	checked map[string]bool // members whose partition count matches ours

	started   bool
	closeOnce sync.Once
	closeCh   chan struct{}
	done      chan struct{}
	runErr    error
}

type partitionRun struct {
	eng      *Engine
	stopping bool
	done     chan struct{}
	err      error // Run's result, once done is closed
}

// NewGroup returns a group that will run h on the partitions member owns
// among the resources' partition consumers (res.Config.Partitions > 1).
// opts is the template of every partition's engine.
func NewGroup(js jetstream.JetStream, res *Resources, h Handler, member string, opts Options) (*Group, error) {
	if !memberRE.MatchString(member) || len(member) > 128 {
		return nil, fmt.Errorf("%w: member %q: want 1 to 128 letters, digits, '-', '_', '=' or '.', not starting with '.'", ErrInvalidConfig, member)
	}
	if res.Members == nil || len(res.Partitions) < 2 {
		return nil, fmt.Errorf("%w: resources are not partitioned", ErrInvalidConfig)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Group{
		js: js, res: res, h: h, opts: opts.withDefaults(), member: member,
		period:  max(res.Config.MemberTTL/4, 100*time.Millisecond),
		running: map[int]*partitionRun{},
		checked: map[string]bool{},
		closeCh: make(chan struct{}),
		done:    make(chan struct{}),
	}, nil
}

// Member is the name under which this worker shares the partitions.
func (g *Group) Member() string { return g.member }

// Owned returns the partitions this worker owns as of its latest view of
// the members (sorted).
func (g *Group) Owned() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.owned)
}

// Run announces the member and runs the owned partitions' engines until ctx
// is cancelled, Close is called or an engine fails. It then closes every
// engine (each drains as Engine.Close describes and unpins its consumer),
// removes the member from the members bucket so that the others take over
// at once, and returns: nil on a requested stop, the engines' errors
// otherwise. Run can be called once.
func (g *Group) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return ErrAlreadyRunning
	}
	g.started = true
	g.mu.Unlock()
	defer close(g.done)
	g.runErr = g.run(ctx)
	return g.runErr
}

// Close stops the group as Run describes and waits for Run to return, with
// Run's result. It is idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() { close(g.closeCh) })
	g.mu.Lock()
	started := g.started
	g.mu.Unlock()
	if !started {
		return nil
	}
	<-g.done
	return g.runErr
}

func (g *Group) run(ctx context.Context) error {
	select {
	case <-g.closeCh:
		return ErrClosed
	default:
	}
	log := zerolog.Ctx(ctx).With().Str("component", "group").Str("member", g.member).Logger()
	ctx = log.WithContext(ctx)
	n := g.res.Config.Partitions
	log.Info().Int("partitions", n).Dur("member_ttl", g.res.Config.MemberTTL).Msg("joining the workers")

	var failed error
	t := time.NewTicker(g.period)
	defer t.Stop()
	for {
		g.announce(ctx)
		live, ok, err := g.liveMembers(ctx)
		switch {
		case err != nil:
			failed = err
		case ok:
			failed = g.reconcile(ctx, Assign(append(live, g.member), n, g.member))
		default:
			failed = g.reconcile(ctx, nil)
		}
		if failed != nil {
			log.Error().Err(failed).Msg("stopping")
			break
		}
		stop := false
		select {
		case <-ctx.Done():
			log.Info().Msg("context cancelled; stopping")
			stop = true
		case <-g.closeCh:
			log.Info().Msg("closing")
			stop = true
		case <-t.C:
		}
		if stop {
			break
		}
	}
	err := g.stopAll()
	g.leave(ctx)
	if failed != nil {
		return errors.Join(failed, err)
	}
	return err
}

// announce refreshes the member's entry; its age is what tells the others
// that this worker is alive.
func (g *Group) announce(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, g.period)
	defer cancel()
	if _, err := g.res.Members.PutString(pctx, g.member, g.announcement()); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("announcing the member failed; the others may take over its partitions")
	}
}

// leave deletes the member's entry so that the others take over now
// rather than after MemberTTL.
func (g *Group) leave(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := g.res.Members.Delete(dctx, g.member); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("leaving the members failed; the others take over after the member TTL")
	}
}

// announcement is the value of the member's entry: the partition count it
// works with, which every member must share.
func (g *Group) announcement() string {
	return "partitions=" + strconv.Itoa(g.res.Config.Partitions)
}

// liveMembers lists the members whose entries have not expired. On an error
// it reports false: the caller keeps what it runs. A member that works with
// another partition count is an error (ErrPartitionsMismatch): the two
// would both handle every key.
func (g *Group) liveMembers(ctx context.Context) ([]string, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, g.period)
	defer cancel()
	lister, err := g.res.Members.ListKeys(lctx)
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("listing the members failed; keeping the current partitions")
		return nil, false, nil
	}
	var live []string
	for k := range lister.Keys() {
		live = append(live, k)
	}
	for _, m := range live {
		if m == g.member || g.checked[m] {
			continue
		}
		e, err := g.res.Members.Get(lctx, m)
		if err != nil {
			continue // expired meanwhile, or not readable now: next round
		}
		if got := string(e.Value()); got != g.announcement() {
			return nil, false, fmt.Errorf("%w: member %s announces %q, this worker %q", ErrPartitionsMismatch, m, got, g.announcement())
		}
		g.checked[m] = true
	}
	return live, true, nil
}

// reconcile starts the engines of newly owned partitions and stops those of
// partitions owned no more; own nil keeps everything as it is. It returns
// the error of an engine that stopped by itself once the connection is
// closed for good; one that stopped on a transient error is started again.
func (g *Group) reconcile(ctx context.Context, own []int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var failed error
	for p, r := range g.running {
		select {
		case <-r.done:
			delete(g.running, p)
			if r.stopping {
				continue
			}
			if g.js.Conn().IsClosed() {
				failed = errors.Join(failed, fmt.Errorf("partition %d: %w", p, cmpErr(r.err)))
				continue
			}
			// A cluster in the middle of an election answers nothing for
			// a while: start the partition again on the next round.
			zerolog.Ctx(ctx).Warn().Err(r.err).Int("partition", p).Msg("a partition's consumer stopped; starting it again")
		default:
		}
	}
	if failed != nil || own == nil {
		return failed
	}
	if !slices.Equal(own, g.owned) {
		zerolog.Ctx(ctx).Info().Ints("partitions", own).Ints("before", g.owned).Msg("partitions assigned")
		g.owned = own
	}
	for p, r := range g.running {
		if !slices.Contains(own, p) && !r.stopping {
			r.stopping = true
			go func() { _ = r.eng.Close() }()
		}
	}
	for _, p := range own {
		if _, ok := g.running[p]; ok {
			continue // running, or still stopping: started again on a later round
		}
		r, err := g.start(ctx, p)
		if err != nil {
			return err
		}
		g.running[p] = r
	}
	return nil
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("consumer stopped")
	}
	return err
}

// start runs the engine of partition p. g.mu must be held.
func (g *Group) start(ctx context.Context, p int) (*partitionRun, error) {
	n := g.res.Config.Partitions
	opts := g.opts
	opts.Skip = func(m *Message) bool { return PartitionOf(m.Key, n) != p }
	pinnedEngine(&opts, g.res.Config)
	eng, err := New(g.js, g.res.Partitions[p], g.h, opts)
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", p, err)
	}
	r := &partitionRun{eng: eng, done: make(chan struct{})}
	ectx := zerolog.Ctx(ctx).With().Int("partition", p).Logger().WithContext(context.WithoutCancel(ctx))
	go func() {
		defer close(r.done)
		r.err = eng.Run(ectx)
	}()
	return r, nil
}

// stopAll closes every engine at once and waits for them.
func (g *Group) stopAll() error {
	g.mu.Lock()
	runs := make([]*partitionRun, 0, len(g.running))
	for _, r := range g.running {
		runs = append(runs, r)
	}
	g.running = map[int]*partitionRun{}
	g.owned = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.eng.Close(); err != nil && !errors.Is(err, ErrClosed) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stats returns a snapshot of what each running partition's engine holds.
func (g *Group) Stats() map[int]Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[int]Stats, len(g.running))
	for p, r := range g.running {
		out[p] = r.eng.Stats()
	}
	return out
}
