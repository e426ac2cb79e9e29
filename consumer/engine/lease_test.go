package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// leaseBucket starts an embedded JetStream server and returns a fresh KV
// bucket on it, everything shut down when the test ends.
func leaseBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js := leaseServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", History: 1})
	if err != nil {
		t.Fatalf("bucket: %v", err)
	}
	return kv
}

// leaseServer starts an embedded JetStream server for the lease and layout
// tests and returns a JetStream context on it.
func leaseServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  t.TempDir(),
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func acquire(t *testing.T, kv jetstream.KeyValue, key, owner string, ttl, within time.Duration) *engine.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := engine.AcquireLease(ctx, kv, key, owner, ttl)
	if err != nil {
		t.Fatalf("%s acquiring %s: %v", owner, key, err)
	}
	return l
}

func readLease(t *testing.T, kv jetstream.KeyValue, key string) engine.LeaseState {
	t.Helper()
	st, ok, err := engine.ReadLease(context.Background(), kv, key)
	if err != nil || !ok {
		t.Fatalf("reading lease %s: ok=%v err=%v", key, ok, err)
	}
	return st
}

// renewing renews l every period until stop is closed; it reports the first
// error on the returned channel.
func renewing(l *engine.Lease, period time.Duration, stop <-chan struct{}) <-chan error {
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if err := l.Renew(context.Background()); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	return errc
}

func TestAcquireLeaseFreeIsImmediate(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 2 * time.Second
	start := time.Now()
	l := acquire(t, kv, "tools.0", "w1", ttl, ttl)
	if el := time.Since(start); el > ttl/2 {
		t.Fatalf("acquiring an absent lease took %s", el)
	}
	if l.Epoch() != 1 || l.Checkpoint() != 0 || l.Owner() != "w1" {
		t.Fatalf("epoch %d checkpoint %d owner %q, want 1, 0, w1", l.Epoch(), l.Checkpoint(), l.Owner())
	}
	if err := l.Commit(context.Background(), 17); err != nil {
		t.Fatal(err)
	}
	if st := readLease(t, kv, "tools.0"); st.Owner != "w1" || st.Epoch != 1 || st.Checkpoint != 17 {
		t.Fatalf("stored %+v", st)
	}
	if err := l.Commit(context.Background(), 16); err == nil || errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("a checkpoint going backwards: err %v, want a refusal that is not ErrLeaseLost", err)
	}
	if err := l.Valid(); err != nil {
		t.Fatalf("after a refused commit the lease is still held: %v", err)
	}

	// A deleted entry counts as absent.
	if err := kv.Delete(context.Background(), "tools.1"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	acquire(t, kv, "tools.1", "w1", ttl, ttl)
	if el := time.Since(start); el > ttl/2 {
		t.Fatalf("acquiring a deleted lease took %s", el)
	}
}

func TestAcquireLeaseReleasedIsImmediateAndKeepsCheckpoint(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 2 * time.Second
	l1 := acquire(t, kv, "composition", "w1", ttl, ttl)
	if err := l1.CommitLayout(context.Background(), 5, "p4"); err != nil {
		t.Fatal(err)
	}

	// A contender waiting on the held lease gets it as soon as it is released.
	got := make(chan *engine.Lease, 1)
	go func() {
		l, err := engine.AcquireLease(context.Background(), kv, "composition", "w2", ttl)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := l1.Release(context.Background(), 42); err != nil {
		t.Fatal(err)
	}
	var l2 *engine.Lease
	select {
	case l2 = <-got:
	case <-time.After(ttl):
		t.Fatal("a released lease was not taken at once")
	}
	if el := time.Since(start); el > ttl/2 {
		t.Fatalf("takeover after release took %s", el)
	}
	if l2.Epoch() != 2 || l2.Checkpoint() != 42 || l2.Layout() != "p4" {
		t.Fatalf("epoch %d checkpoint %d layout %q, want 2, 42, p4", l2.Epoch(), l2.Checkpoint(), l2.Layout())
	}
	if err := l1.Commit(context.Background(), 43); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("commit after release: %v, want ErrLeaseLost", err)
	}
	if st := readLease(t, kv, "composition"); st.Owner != "w2" || st.Checkpoint != 42 {
		t.Fatalf("stored %+v", st)
	}
}

func TestAcquireLeaseWaitsWhileHolderRenews(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 600 * time.Millisecond
	l1 := acquire(t, kv, "tools.0", "w1", ttl, ttl)
	stop := make(chan struct{})
	errc := renewing(l1, ttl/3, stop)

	ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
	_, err := engine.AcquireLease(ctx, kv, "tools.0", "w2", ttl)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("contender while the holder renews: %v, want the context's deadline", err)
	}

	// The holder stops renewing: the contender takes over after ttl of
	// silence, and within ttl plus one renew period of it.
	acquired := make(chan time.Time, 1)
	go func() {
		l, err := engine.AcquireLease(context.Background(), kv, "tools.0", "w2", ttl)
		if err != nil {
			t.Error(err)
			return
		}
		if l.Epoch() != 2 {
			t.Errorf("epoch %d, want 2", l.Epoch())
		}
		acquired <- time.Now()
	}()
	time.Sleep(ttl / 2)
	close(stop)
	if err := <-errc; err != nil {
		t.Fatalf("renewing: %v", err)
	}
	stopped := time.Now()
	lastRenew := stopped.Add(-ttl / 3) // at the earliest
	select {
	case at := <-acquired:
		if at.Sub(lastRenew) < ttl {
			t.Fatalf("took over %s after the last renewal at most, before its ttl %s", at.Sub(lastRenew), ttl)
		}
		if d := at.Sub(stopped); d > ttl+ttl/3+time.Second {
			t.Fatalf("took over %s after the holder stopped; want within ttl + one renew period", d)
		}
	case <-time.After(5 * ttl):
		t.Fatal("no takeover after the holder stopped")
	}
}

func TestAcquireLeaseExpiredWaitsTTLOnOwnClock(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 500 * time.Millisecond
	acquire(t, kv, "tools.3", "w1", ttl, ttl) // never renewed
	time.Sleep(2 * ttl)                       // long expired, but a newcomer cannot know

	start := time.Now()
	l := acquire(t, kv, "tools.3", "w2", ttl, 5*ttl)
	el := time.Since(start)
	if el < ttl {
		t.Fatalf("took an expired lease after %s, before watching it for ttl %s", el, ttl)
	}
	if el > ttl+time.Second {
		t.Fatalf("took an expired lease after %s", el)
	}
	if l.Epoch() != 2 || l.Owner() != "w2" {
		t.Fatalf("epoch %d owner %s", l.Epoch(), l.Owner())
	}
}

func TestLeasePastDeadlineIsLost(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 300 * time.Millisecond
	l := acquire(t, kv, "tools.0", "w1", ttl, ttl)
	if err := l.Valid(); err != nil {
		t.Fatal(err)
	}
	rev := readLease(t, kv, "tools.0").Revision
	time.Sleep(ttl + 100*time.Millisecond) // as if paused

	select {
	case <-l.Lost():
		t.Fatal("Lost closed before any call saw the loss")
	default:
	}
	err := l.Commit(context.Background(), 9)
	if !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("commit past the local deadline: %v, want ErrLeaseLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after ErrLeaseLost")
	}
	if st := readLease(t, kv, "tools.0"); st.Revision != rev || st.Checkpoint != 0 {
		t.Fatalf("a holder past its deadline wrote: %+v", st)
	}
	if err := l.Renew(context.Background()); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("renew after loss: %v", err)
	}
	if err := l.Valid(); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("valid after loss: %v", err)
	}
}

func TestLeaseCommitAfterTakeoverFails(t *testing.T) {
	kv := leaseBucket(t)
	// The holder's own ttl is long, so its local deadline does not save it:
	// the compare-and-set on the revision must.
	l1 := acquire(t, kv, "tools.0", "w1", time.Minute, time.Second)
	if err := l1.Commit(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	l2 := acquire(t, kv, "tools.0", "w2", 300*time.Millisecond, 5*time.Second)
	if l2.Checkpoint() != 3 || l2.Epoch() != 2 {
		t.Fatalf("successor checkpoint %d epoch %d", l2.Checkpoint(), l2.Epoch())
	}
	if err := l2.Commit(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	if err := l1.Commit(context.Background(), 5); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("old holder's commit after a takeover: %v, want ErrLeaseLost", err)
	}
	select {
	case <-l1.Lost():
	default:
		t.Fatal("Lost not closed")
	}
	if err := l1.Release(context.Background(), 5); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("old holder's release: %v", err)
	}
	if st := readLease(t, kv, "tools.0"); st.Owner != "w2" || st.Checkpoint != 8 || st.Epoch != 2 {
		t.Fatalf("stored %+v, want the successor's", st)
	}
}

func TestLeaseAdoptsItsOwnStoredWrite(t *testing.T) {
	kv := leaseBucket(t)
	l := acquire(t, kv, "tools.0", "w1", time.Minute, time.Second)
	// A write of ours that the server stored but whose reply was lost.
	data, _ := json.Marshal(map[string]any{"owner": "w1", "epoch": 1, "checkpoint": 4})
	if _, err := kv.Put(context.Background(), "tools.0", data); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(context.Background(), 6); err != nil {
		t.Fatalf("commit after its own lost-reply write: %v", err)
	}
	// A write by another epoch is a takeover, not ours.
	data, _ = json.Marshal(map[string]any{"owner": "w1", "epoch": 2, "checkpoint": 6})
	if _, err := kv.Put(context.Background(), "tools.0", data); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(context.Background(), 7); !errors.Is(err, engine.ErrLeaseLost) {
		t.Fatalf("commit after another epoch's write: %v, want ErrLeaseLost", err)
	}
}

func TestAcquireLeaseConcurrentContendersOneWins(t *testing.T) {
	kv := leaseBucket(t)
	const ttl = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		prep func()
	}{
		{"absent", func() {}},
		{"expired", func() { acquire(t, kv, "k.expired", "old", ttl, ttl) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k." + tc.name
			tc.prep()
			ctx, cancel := context.WithTimeout(context.Background(), 5*ttl)
			defer cancel()
			var (
				wins    atomic.Int32
				wg      sync.WaitGroup
				stop    = make(chan struct{})
				renewMu sync.Mutex
				errs    []<-chan error
			)
			for i := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := engine.AcquireLease(ctx, kv, key, "c"+string(rune('a'+i)), ttl)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("contender: %v", err)
						}
						return
					}
					wins.Add(1)
					renewMu.Lock()
					errs = append(errs, renewing(l, ttl/3, stop))
					renewMu.Unlock()
				}()
			}
			wg.Wait()
			close(stop)
			if n := wins.Load(); n != 1 {
				t.Fatalf("%d contenders won, want exactly 1", n)
			}
			for _, e := range errs {
				if err := <-e; err != nil {
					t.Fatalf("winner renewing: %v", err)
				}
			}
		})
	}
}

func TestAcquireLeaseRejectsBadInput(t *testing.T) {
	kv := leaseBucket(t)
	ctx := context.Background()
	if _, err := engine.AcquireLease(ctx, kv, "k", "", time.Second); err == nil {
		t.Fatal("empty owner accepted")
	}
	if _, err := engine.AcquireLease(ctx, kv, "k", "w", 0); err == nil {
		t.Fatal("zero ttl accepted")
	}
	if _, err := kv.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := engine.AcquireLease(cctx, kv, "junk", "w", time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("undecodable lease value: %v, want a decoding error", err)
	}
}
