package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLeaseLost is returned by Lease.Commit, Renew and Release when the lease
// is no longer this holder's: another owner took it over (the KV revision
// moved, so the compare-and-set failed), or this holder's last successful
// renewal started more than the TTL ago, so a contender may already have
// taken it. A holder that sees it must stop at once: no more state writes,
// no checkpoint.
var ErrLeaseLost = errors.New("lease lost")

// leaseValue is the JSON stored in a lane's lease entry.
type leaseValue struct {
	// Owner is the holder's name; empty when the lease is released (free).
	Owner string `json:"owner"`
	// Epoch counts acquisitions: each new holder stores the previous + 1.
	Epoch uint64 `json:"epoch"`
	// Checkpoint is the lowest stream sequence not yet fully applied (0:
	// none recorded yet, start at the stream's beginning).
	Checkpoint uint64 `json:"checkpoint"`
	// Layout names the subject layout the checkpoint belongs to.
	Layout string `json:"layout,omitempty"`
	// Lag is the holder's count of the lane's messages not yet applied, as
	// of At (the holder's clock when it wrote the entry); absent until the
	// holder measured it.
	Lag *uint64   `json:"lag,omitempty"`
	At  time.Time `json:"at,omitzero"`
}

func decodeLeaseValue(key string, data []byte) (leaseValue, error) {
	var v leaseValue
	if err := json.Unmarshal(data, &v); err != nil {
		return leaseValue{}, fmt.Errorf("lease %s: decoding its value: %w", key, err)
	}
	return v, nil
}

// LeaseState is a lease entry as stored, read without taking it.
type LeaseState struct {
	Owner      string // empty when released
	Epoch      uint64
	Checkpoint uint64
	Layout     string
	Revision   uint64 // the KV revision (the fencing token)
	// Lag is the holder's last measure of the lane's messages not yet
	// applied (HasLag false: none yet), and At when it wrote the entry.
	Lag    uint64
	HasLag bool
	At     time.Time
}

// ReadLease returns the lease entry at key, and false if there is none (never
// acquired, or deleted).
func ReadLease(ctx context.Context, kv jetstream.KeyValue, key string) (LeaseState, bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return LeaseState{}, false, nil
	}
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("lease %s: reading: %w", key, err)
	}
	v, err := decodeLeaseValue(key, e.Value())
	if err != nil {
		return LeaseState{}, false, err
	}
	st := LeaseState{Owner: v.Owner, Epoch: v.Epoch, Checkpoint: v.Checkpoint, Layout: v.Layout, Revision: e.Revision(), At: v.At}
	if v.Lag != nil {
		st.Lag, st.HasLag = *v.Lag, true
	}
	return st, true, nil
}

// Lease is one lane's ownership and its checkpoint, held in one KV entry.
//
// Fencing is the entry's KV revision: every Commit is a compare-and-set on
// the revision this holder last wrote, so a holder whose lease was taken
// over fails to commit. A local deadline covers the time before it learns
// that: a holder whose last successful renewal started more than the TTL ago
// (measured on this process's monotonic clock) refuses to commit, and a
// contender takes over only after watching the entry unchanged for the TTL
// on its own clock, which is never earlier.
//
// The methods are safe for concurrent use; they are serialised.
type Lease struct {
	kv    jetstream.KeyValue
	key   string
	ttl   time.Duration
	owner string
	epoch uint64

	mu         sync.Mutex
	rev        uint64
	checkpoint uint64
	layout     string
	renewedAt  time.Time // start of the last successful write
	lag        *uint64   // the last RecordLag, stored with the next write
	done       bool      // lost or released: never write again

	lostOnce sync.Once
	lost     chan struct{}
}

// AcquireLease takes the lease at key for owner: at once if it is absent or
// released, otherwise after its holder has not renewed it for ttl (watched by
// this process's monotonic clock). It blocks until acquired or ctx ends.
func AcquireLease(ctx context.Context, kv jetstream.KeyValue, key, owner string, ttl time.Duration) (*Lease, error) {
	if kv == nil {
		return nil, errors.New("acquiring a lease: no KV bucket")
	}
	if owner == "" {
		return nil, fmt.Errorf("acquiring lease %s: empty owner", key)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("acquiring lease %s: ttl must be positive, got %s", key, ttl)
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("acquiring lease %s: watching: %w", key, err)
	}
	defer func() { _ = w.Stop() }()

	var (
		cur     jetstream.KeyValueEntry // latest entry seen; nil: none
		seenAt  time.Time               // when cur was first seen, local clock
		initial = true                  // until the watcher's end-of-initial marker
		timer   = time.NewTimer(ttl)
	)
	defer timer.Stop()
	// see records an entry, restarting the takeover wait when it changed.
	see := func(e jetstream.KeyValueEntry) {
		if e != nil && cur != nil && e.Revision() < cur.Revision() {
			return // a lagging watcher's older revision
		}
		if cur == nil || e == nil || e.Revision() != cur.Revision() {
			seenAt = time.Now()
		}
		cur = e
	}
	rearm := func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wait := ttl - time.Since(seenAt)
		if wait < 0 {
			wait = 0
		}
		timer.Reset(wait)
	}
	seenAt = time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquiring lease %s: %w", key, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("acquiring lease %s: watcher closed", key)
			}
			if e == nil {
				initial = false
			} else {
				see(e)
			}
			if initial {
				continue
			}
		case <-timer.C:
			// Confirm with a read (the watcher may lag or have stalled).
			e, err := kv.Get(ctx, key)
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
				see(nil)
			case err != nil:
				if ctx.Err() != nil {
					return nil, fmt.Errorf("acquiring lease %s: %w", key, ctx.Err())
				}
				// Transient: look again shortly, without resetting the wait.
				timer.Reset(ttl / 10)
				continue
			default:
				see(e)
			}
		}
		l, err := tryAcquire(ctx, kv, key, owner, ttl, cur, time.Since(seenAt) >= ttl)
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		rearm()
	}
}

// tryAcquire writes the lease for owner if cur allows it: absent, deleted or
// released at once, held only when expired (the entry unchanged for the
// TTL). It returns nil and no error when the lease is not (yet) free or the
// compare-and-set lost a race; the caller waits for the next change.
func tryAcquire(ctx context.Context, kv jetstream.KeyValue, key, owner string, ttl time.Duration, cur jetstream.KeyValueEntry, expired bool) (*Lease, error) {
	var prev leaseValue
	absent := cur == nil || cur.Operation() != jetstream.KeyValuePut
	if !absent {
		v, err := decodeLeaseValue(key, cur.Value())
		if err != nil {
			return nil, err
		}
		prev = v
		if prev.Owner != "" && !expired {
			return nil, nil
		}
	}
	next := leaseValue{Owner: owner, Epoch: prev.Epoch + 1, Checkpoint: prev.Checkpoint, Layout: prev.Layout}
	data, err := json.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("acquiring lease %s: %w", key, err)
	}
	start := time.Now()
	var rev uint64
	if absent {
		rev, err = kv.Create(ctx, key, data)
	} else {
		rev, err = kv.Update(ctx, key, data, cur.Revision())
	}
	if isRevisionConflict(err) {
		return nil, nil // someone else wrote first; the watcher shows it
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("acquiring lease %s: %w", key, ctx.Err())
		}
		return nil, nil // transient; retried on the next change or timer
	}
	return &Lease{
		kv: kv, key: key, ttl: ttl, owner: owner, epoch: next.Epoch,
		rev: rev, checkpoint: next.Checkpoint, layout: next.Layout,
		renewedAt: start, lost: make(chan struct{}),
	}, nil
}

// Key returns the lease's KV key.
func (l *Lease) Key() string { return l.key }

// Owner returns the holder's name.
func (l *Lease) Owner() string { return l.owner }

// Epoch returns this holder's acquisition number (the previous holder's + 1).
func (l *Lease) Epoch() uint64 { return l.epoch }

// Checkpoint returns the checkpoint as stored when acquired or last
// committed: the lowest stream sequence not yet fully applied (0: none yet).
func (l *Lease) Checkpoint() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkpoint
}

// Layout returns the subject layout stored with the checkpoint ("" if none).
func (l *Lease) Layout() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.layout
}

// Deadline returns the local time after which this holder no longer
// commits: the TTL after the start of its last successful write.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt.Add(l.ttl)
}

// Valid returns ErrLeaseLost if the lease was lost or released, or if this
// holder is past its local deadline; nil while it still holds it. A caller
// checks it before a write that the lease's compare-and-set does not fence.
func (l *Lease) Valid() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validLocked(time.Now())
}

func (l *Lease) validLocked(now time.Time) error {
	if l.done {
		return fmt.Errorf("lease %s (epoch %d): %w", l.key, l.epoch, ErrLeaseLost)
	}
	if since := now.Sub(l.renewedAt); since > l.ttl {
		l.markLostLocked()
		return fmt.Errorf("lease %s (epoch %d): last renewed %s ago, beyond its ttl %s: %w",
			l.key, l.epoch, since.Round(time.Millisecond), l.ttl, ErrLeaseLost)
	}
	return nil
}

func (l *Lease) markLostLocked() {
	l.done = true
	l.lostOnce.Do(func() { close(l.lost) })
}

// Commit stores checkpoint (the lowest stream sequence not yet fully applied)
// with a compare-and-set on the revision this holder last wrote, which also
// renews the lease. It returns ErrLeaseLost, and closes Lost, when the lease
// was taken over or this holder is past its local deadline. Another error
// (the server unreachable) leaves the lease held until its deadline: the
// caller may retry. A checkpoint below the committed one is refused.
func (l *Lease) Commit(ctx context.Context, checkpoint uint64) error {
	return l.write(ctx, checkpoint, nil, false)
}

// CommitLayout is Commit that also stores a new subject layout with the
// checkpoint; the checkpoint may then be any value (it belongs to the new
// layout).
func (l *Lease) CommitLayout(ctx context.Context, checkpoint uint64, layout string) error {
	return l.write(ctx, checkpoint, &layout, false)
}

// Renew is Commit of the current checkpoint.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	cp := l.checkpoint
	l.mu.Unlock()
	return l.write(ctx, cp, nil, false)
}

// Release commits checkpoint and marks the lease free, so that the next
// contender takes it at once. The lease is unusable afterwards (Commit
// returns ErrLeaseLost; Lost is not closed by a release).
func (l *Lease) Release(ctx context.Context, checkpoint uint64) error {
	return l.write(ctx, checkpoint, nil, true)
}

// RecordLag keeps the lane's lag (messages not yet applied), stored with
// the next commit so that readers of the lease see it (ReadLease).
func (l *Lease) RecordLag(lag uint64) {
	l.mu.Lock()
	l.lag = &lag
	l.mu.Unlock()
}

// Lost returns a channel closed when this holder saw ErrLeaseLost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) write(ctx context.Context, checkpoint uint64, layout *string, release bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Now()
	if err := l.validLocked(start); err != nil {
		return err
	}
	next := leaseValue{Owner: l.owner, Epoch: l.epoch, Checkpoint: checkpoint, Layout: l.layout, Lag: l.lag, At: start.UTC().Truncate(time.Millisecond)}
	if layout != nil {
		next.Layout = *layout
	} else if checkpoint < l.checkpoint {
		return fmt.Errorf("lease %s: checkpoint %d below the committed %d", l.key, checkpoint, l.checkpoint)
	}
	if release {
		next.Owner = ""
	}
	data, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("lease %s: %w", l.key, err)
	}
	rev, err := l.kv.Update(ctx, l.key, data, l.rev)
	if isRevisionConflict(err) && l.adoptLocked(ctx) {
		// An earlier write of ours was stored but its reply was lost.
		rev, err = l.kv.Update(ctx, l.key, data, l.rev)
	}
	if isRevisionConflict(err) {
		l.markLostLocked()
		return fmt.Errorf("lease %s (epoch %d): taken over: %w", l.key, l.epoch, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("lease %s: committing checkpoint %d: %w", l.key, checkpoint, err)
	}
	l.rev, l.checkpoint, l.layout, l.renewedAt = rev, checkpoint, next.Layout, start
	if release {
		l.done = true
	}
	return nil
}

func isRevisionConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// adoptLocked handles a compare-and-set conflict that may be this holder's
// own write whose reply was lost (a timeout after the server stored it): if
// the entry still carries this owner and epoch, nobody took over (a takeover
// stores a higher epoch), so its revision becomes the one to compare
// against. The local deadline is not extended: the write's time is unknown.
func (l *Lease) adoptLocked(ctx context.Context) bool {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil || e.Revision() <= l.rev {
		return false
	}
	v, err := decodeLeaseValue(l.key, e.Value())
	if err != nil || v.Owner != l.owner || v.Epoch != l.epoch {
		return false
	}
	l.rev = e.Revision()
	if v.Checkpoint > l.checkpoint {
		l.checkpoint = v.Checkpoint
	}
	return true
}
