package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrConflict is returned (wrapped together with the jetstream error, so
// errors.Is also matches jetstream.ErrKeyExists or
// jetstream.ErrKeyRevisionMismatch) by View.CompareAndSet when the key
// changed since the revision the caller read.
var ErrConflict = errors.New("revision conflict")

// ErrTooManyConflicts is returned by View.Update when every one of
// ViewOptions.MaxAttempts compare-and-set attempts lost against a concurrent
// writer.
var ErrTooManyConflicts = errors.New("too many revision conflicts")

// ErrNoChange may be returned by a MergeFunc to say that the current value is
// already right: View.Update then writes nothing and returns the current
// entry without an error.
var ErrNoChange = errors.New("no change")

// ErrViewClosed is returned by View.WaitReady when the view was closed, or its
// watch ended, before the initial values were loaded, and by View.CatchUp
// when the view no longer follows its bucket.
var ErrViewClosed = errors.New("view closed")

// Defaults of ViewOptions.
const (
	DefaultProbeInterval = 5 * time.Second
	DefaultMaxAttempts   = 16
	DefaultWriteTimeout  = 5 * time.Second
)

// ViewOptions tune a View. Zero fields take defaults.
type ViewOptions struct {
	// ProbeInterval is how often the view asks the bucket for its last
	// revision to learn whether the watch is caught up (default 5s;
	// negative disables probing, and then only watch updates refresh the
	// view's freshness).
	ProbeInterval time.Duration
	// MaxAttempts bounds the compare-and-set attempts of one Update
	// (default 16).
	MaxAttempts int
	// WriteTimeout bounds one write or read of the bucket (default 5s), and
	// in a Store each read of the telemetry stream that rebuilds a tool's
	// outcome counts, so that a request whose reply was lost with a
	// connection fails fast and is retried after the reconnect, instead of
	// holding its handler for the handler's whole timeout.
	WriteTimeout time.Duration
	// OnChange, when set, is called after a key gains a value (present) or
	// loses it, from the watch or from the view's own writes, outside the
	// view's lock; it must not block. Callers keep indexes with it.
	OnChange func(key string, present bool)
}

// Entry is a key's value and the revision it was written at.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// MergeFunc computes the value to write from the current one (found is
// false if the key has no value). It may be called several times, once per
// conflict, and must not have side effects. current is the caller's own
// copy. Returning ErrNoChange writes nothing; any other error aborts.
type MergeFunc func(current []byte, found bool) ([]byte, error)

// EntryMergeFunc is a MergeFunc that also sees the current value's
// revision (0 when found is false), for callers that cache what they
// decoded of a revision.
type EntryMergeFunc func(current Entry, found bool) ([]byte, error)

type viewEntry struct {
	value   []byte
	rev     uint64
	deleted bool
}

// View is a local copy of a KV bucket kept current by a watch: the hot path
// reads it from memory, never with a round trip. Its own writes
// (CompareAndSet, Update) are visible immediately; a watch update older than
// the revision the view already holds for a key is ignored. All methods are
// safe for concurrent use.
type View struct {
	kv   jetstream.KeyValue
	opts ViewOptions

	mu       sync.RWMutex
	entries  map[string]viewEntry // including tombstones, for their revision
	watchRev uint64               // highest revision the watch delivered
	fresh    time.Time            // last time the view was known caught up

	ready     chan struct{}
	readyOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// writeTimeout is WriteTimeout, or its default when not positive.
func (o ViewOptions) writeTimeout() time.Duration { return o.EffectiveWriteTimeout() }

// EffectiveWriteTimeout is WriteTimeout, or its default when not positive.
func (o ViewOptions) EffectiveWriteTimeout() time.Duration {
	if o.WriteTimeout <= 0 {
		return DefaultWriteTimeout
	}
	return o.WriteTimeout
}

// NewView starts watching every key of kv and returns at once; Ready is
// closed when the initial values are loaded. The view follows the bucket
// until Close is called or ctx is cancelled.
func NewView(ctx context.Context, kv jetstream.KeyValue, opts ViewOptions) (*View, error) {
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	opts.WriteTimeout = opts.writeTimeout()
	if opts.MaxAttempts < 1 {
		return nil, fmt.Errorf("%w: view max attempts %d: want at least 1", ErrInvalidOptions, opts.MaxAttempts)
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching bucket %s: %w", kv.Bucket(), err)
	}
	v := &View{
		kv:      kv,
		opts:    opts,
		entries: make(map[string]viewEntry),
		ready:   make(chan struct{}),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go v.follow(wctx, w)
	return v, nil
}

// NewFedView returns a view of kv that is ready at once and follows no
// watch: its caller delivers what a watch would (Observe). Its writes go to
// kv as a watched view's do. It serves tests and benchmarks that give the
// view an in-memory KeyValue.
func NewFedView(kv jetstream.KeyValue, opts ViewOptions) *View {
	if opts.MaxAttempts < 1 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	opts.WriteTimeout = opts.writeTimeout()
	v := &View{kv: kv, opts: opts, entries: make(map[string]viewEntry), ready: make(chan struct{}), done: make(chan struct{}), fresh: time.Now()}
	close(v.ready)
	v.cancel = sync.OnceFunc(func() { close(v.done) })
	return v
}

// Observe applies an update as the watch delivers it: a value (or, when
// deleted, a tombstone) at revision rev, ignored when the view already
// holds the key at the same or a newer revision.
func (v *View) Observe(key string, value []byte, rev uint64, deleted bool) {
	v.apply(key, value, rev, deleted, true)
}

func (v *View) follow(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(v.done)
	defer func() { _ = w.Stop() }()
	log := zerolog.Ctx(ctx).With().Str("bucket", v.kv.Bucket()).Logger()
	var probe <-chan time.Time
	if v.opts.ProbeInterval > 0 {
		t := time.NewTicker(v.opts.ProbeInterval)
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				log.Warn().Msg("bucket watch ended; the view no longer follows the bucket")
				return
			}
			if e == nil {
				v.mu.Lock()
				v.fresh = time.Now()
				v.mu.Unlock()
				v.readyOnce.Do(func() { close(v.ready) })
				continue
			}
			v.apply(e.Key(), e.Value(), e.Revision(), e.Operation() != jetstream.KeyValuePut, true)
		case <-probe:
			v.probe(ctx, &log)
		}
	}
}

// apply records a value (or a tombstone) unless the view already holds the
// key at the same or a newer revision.
func (v *View) apply(key string, value []byte, rev uint64, deleted, fromWatch bool) {
	v.mu.Lock()
	if fromWatch {
		v.watchRev = max(v.watchRev, rev)
		v.fresh = time.Now()
	}
	if cur, ok := v.entries[key]; ok && cur.rev >= rev {
		v.mu.Unlock()
		return
	}
	if deleted {
		value = nil
	}
	v.entries[key] = viewEntry{value: value, rev: rev, deleted: deleted}
	v.mu.Unlock()
	if v.opts.OnChange != nil {
		v.opts.OnChange(key, !deleted)
	}
}

// Refresh reads the key from the bucket into the view: after a conflict,
// the view learns the other writer's value without waiting for the watch.
func (v *View) Refresh(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, v.opts.WriteTimeout)
	defer cancel()
	e, err := v.kv.Get(ctx, key)
	switch {
	case err == nil:
		v.apply(key, bytes.Clone(e.Value()), e.Revision(), false, false)
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil // deleted: the watch delivers the tombstone
	default:
		return fmt.Errorf("reading %s/%s: %w", v.kv.Bucket(), key, err)
	}
}

// probe marks the view fresh if the watch has delivered the bucket's last
// revision.
func (v *View) probe(ctx context.Context, log *zerolog.Logger) {
	pctx, cancel := context.WithTimeout(ctx, max(v.opts.ProbeInterval, time.Second))
	defer cancel()
	st, err := v.kv.Status(pctx)
	if err != nil {
		log.Debug().Err(err).Msg("bucket status probe failed")
		return
	}
	si, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok || si.StreamInfo() == nil {
		return
	}
	last := si.StreamInfo().State.LastSeq
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.watchRev >= last {
		v.fresh = time.Now()
	}
}

// Ready is closed once the initial values of the bucket are loaded.
func (v *View) Ready() <-chan struct{} { return v.ready }

// WaitReady waits until the initial values are loaded, ctx ends (its error)
// or the view stops following the bucket (ErrViewClosed).
func (v *View) WaitReady(ctx context.Context) error {
	select {
	case <-v.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-v.done:
		select {
		case <-v.ready:
			return nil
		default:
			return fmt.Errorf("bucket %s: %w", v.kv.Bucket(), ErrViewClosed)
		}
	}
}

// Staleness is the time since the view was last known to be caught up with
// the bucket: since the last watch update, or the last probe that found
// nothing newer in the bucket than the watch had delivered. Before the
// initial values are loaded it is the time since the zero time (large).
func (v *View) Staleness() time.Duration {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return time.Since(v.fresh)
}

// Get returns a copy of the key's current value from memory.
func (v *View) Get(key string) (Entry, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.entries[key]
	if !ok || e.deleted {
		return Entry{}, false
	}
	return Entry{Key: key, Value: bytes.Clone(e.value), Revision: e.rev}, true
}

// Revision returns the revision of the key's current value, without
// copying the value: callers that cache what they decoded use it to know
// whether their copy is current.
func (v *View) Revision(key string) (uint64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.entries[key]
	if !ok || e.deleted {
		return 0, false
	}
	return e.rev, true
}

// Len is the number of keys with a value.
func (v *View) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, e := range v.entries {
		if !e.deleted {
			n++
		}
	}
	return n
}

// CompareAndSet writes value to key if the key is still at lastRevision (0:
// if the key has no value, also after a delete), and returns the new
// revision, which the view holds at once. If another writer came first it
// returns an error matching ErrConflict and the jetstream error
// (jetstream.ErrKeyExists or jetstream.ErrKeyRevisionMismatch).
func (v *View) CompareAndSet(ctx context.Context, key string, value []byte, lastRevision uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.WriteTimeout)
	defer cancel()
	var rev uint64
	var err error
	if lastRevision == 0 {
		rev, err = v.kv.Create(ctx, key, value)
	} else {
		rev, err = v.kv.Update(ctx, key, value, lastRevision)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, fmt.Errorf("writing %s/%s at revision %d: %w: %w", v.kv.Bucket(), key, lastRevision, ErrConflict, err)
		}
		return 0, fmt.Errorf("writing %s/%s: %w", v.kv.Bucket(), key, err)
	}
	v.apply(key, bytes.Clone(value), rev, false, false)
	return rev, nil
}

// DeleteAt deletes key if it is still at lastRevision, and holds the key as
// deleted at once (the watch delivers the tombstone's own revision later).
// If another writer came first it returns an error matching ErrConflict.
func (v *View) DeleteAt(ctx context.Context, key string, lastRevision uint64) error {
	ctx, cancel := context.WithTimeout(ctx, v.opts.WriteTimeout)
	defer cancel()
	if err := v.kv.Delete(ctx, key, jetstream.LastRevision(lastRevision)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("deleting %s/%s at revision %d: %w: %w", v.kv.Bucket(), key, lastRevision, ErrConflict, err)
		}
		return fmt.Errorf("deleting %s/%s: %w", v.kv.Bucket(), key, err)
	}
	v.mu.Lock()
	if cur, ok := v.entries[key]; ok && cur.rev > lastRevision {
		v.mu.Unlock()
		return nil // the watch was faster
	}
	v.entries[key] = viewEntry{rev: lastRevision, deleted: true}
	v.mu.Unlock()
	if v.opts.OnChange != nil {
		v.opts.OnChange(key, false)
	}
	return nil
}

// Update applies merge to the key's current value and writes the result
// with compare-and-set. On a conflict it re-reads the key from the bucket
// and merges again, up to ViewOptions.MaxAttempts times, so that concurrent
// writers never lose an update. It returns the entry as written (or the
// current one if merge returned ErrNoChange).
func (v *View) Update(ctx context.Context, key string, merge MergeFunc) (Entry, error) {
	return v.UpdateEntry(ctx, key, func(cur Entry, found bool) ([]byte, error) { return merge(cur.Value, found) })
}

// UpdateEntry is Update with a merge function that sees the current entry,
// its revision included.
func (v *View) UpdateEntry(ctx context.Context, key string, merge EntryMergeFunc) (Entry, error) {
	cur, found := v.Get(key)
	cur.Key = key
	for attempt := 1; ; attempt++ {
		next, err := merge(cur, found)
		if errors.Is(err, ErrNoChange) {
			return cur, nil
		}
		if err != nil {
			return Entry{}, err
		}
		var last uint64
		if found {
			last = cur.Revision
		}
		rev, err := v.CompareAndSet(ctx, key, next, last)
		if err == nil {
			return Entry{Key: key, Value: next, Revision: rev}, nil
		}
		if !errors.Is(err, ErrConflict) {
			return Entry{}, err
		}
		if attempt >= v.opts.MaxAttempts {
			return Entry{}, fmt.Errorf("writing %s/%s: %w (%d attempts): %w", v.kv.Bucket(), key, ErrTooManyConflicts, attempt, err)
		}
		e, gerr := v.kv.Get(ctx, key)
		switch {
		case gerr == nil:
			v.apply(key, e.Value(), e.Revision(), false, false)
			cur, found = Entry{Key: key, Value: bytes.Clone(e.Value()), Revision: e.Revision()}, true
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			cur, found = Entry{Key: key}, false
		default:
			return Entry{}, fmt.Errorf("re-reading %s/%s after a conflict: %w", v.kv.Bucket(), key, gerr)
		}
	}
}

// Close stops following the bucket and waits for the watch to end. It is
// idempotent.
func (v *View) Close() {
	v.cancel()
	<-v.done
}

// CatchUp waits until the view's watch has delivered every revision the
// bucket held when CatchUp was called, so that reads see every write made
// before, by any worker. A worker that takes over a partition calls it
// before it handles the partition's keys: their previous owner's last writes
// may not have reached its views yet, and a verdict decided on a stale view
// would be published before the compare-and-set write finds the conflict.
func (v *View) CatchUp(ctx context.Context) error {
	st, err := v.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the status of bucket %s: %w", v.kv.Bucket(), err)
	}
	si, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok || si.StreamInfo() == nil {
		return fmt.Errorf("bucket %s: status without stream info", v.kv.Bucket())
	}
	last := si.StreamInfo().State.LastSeq
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		v.mu.RLock()
		rev := v.watchRev
		v.mu.RUnlock()
		if rev >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bucket %s: view at revision %d, bucket at %d: %w", v.kv.Bucket(), rev, last, ctx.Err())
		case <-v.done:
			return fmt.Errorf("bucket %s: %w", v.kv.Bucket(), ErrViewClosed)
		case <-t.C:
		}
	}
}
