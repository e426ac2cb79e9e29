package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEngineWithLease runs the engine on the real Lease: a release hands
// the checkpoint to the next owner, who reads only what follows it, and a
// takeover (another writer of the lease entry) stops the lane without a
// commit.
func TestEngineWithLease(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	publishKeys(t, js, "a", []string{"x", "y"}, 5) // seq 1..10

	l1, err := AcquireLease(ctx, kv, "tools.0", "w1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec1 := newRecorder()
	e1 := newEngine(t, js, l1, rec1, Options{})
	wait1 := runEngine(t, e1)
	waitFor(t, "first owner applied all", func() bool { return rec1.count() == 10 })
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait1(); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx, l1.Checkpoint()); err != nil {
		t.Fatal(err)
	}

	publishKeys(t, js, "b", []string{"x", "y"}, 2) // seq 11..14
	acq, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := AcquireLease(acq, kv, "tools.0", "w2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Checkpoint() != 11 {
		t.Fatalf("second owner starts at %d, want 11", l2.Checkpoint())
	}
	var mu sync.Mutex
	var seqs []uint64
	stopped := false
	var late error
	rec2 := newRecorder()
	rec2.fn = func(_ context.Context, _ string, msgs []*Message) []error {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			late = fmt.Errorf("handler called after the lane stopped (seq %d)", msgs[0].StreamSeq)
		}
		for _, m := range msgs {
			seqs = append(seqs, m.StreamSeq)
		}
		return nil
	}
	e2 := newEngine(t, js, l2, rec2, Options{CommitInterval: 20 * time.Millisecond})
	wait2 := runEngine(t, e2)
	waitFor(t, "second owner applied the suffix", func() bool { return rec2.count() == 4 })
	slicesSort(seqs)
	if fmt.Sprint(seqs) != "[11 12 13 14]" {
		t.Fatalf("second owner read %v, want 11..14", seqs)
	}
	waitFor(t, "checkpoint 15 committed", func() bool {
		st, ok, err := ReadLease(ctx, kv, "tools.0")
		return err == nil && ok && st.Checkpoint == 15
	})

	// A successor overwrites the entry: the next renewal's compare-and-set
	// fails and the lane stops.
	if _, err := kv.Put(ctx, "tools.0", []byte(`{"owner":"w3","epoch":99,"checkpoint":15}`)); err != nil {
		t.Fatal(err)
	}
	if err := wait2(); !errors.Is(err, ErrLost) {
		t.Fatalf("Run after the takeover: %v, want ErrLost", err)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	publishKeys(t, js, "c", []string{"x"}, 2)
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if late != nil {
		t.Fatal(late)
	}
	if e, err := kv.Get(ctx, "tools.0"); err != nil || string(e.Value()) != `{"owner":"w3","epoch":99,"checkpoint":15}` {
		t.Fatalf("the lost holder wrote the lease: %v %s", err, e.Value())
	}
}

// TestEngineRecordsItsLagInTheLease: a held lane's lag (what the server has
// not delivered plus what the engine holds) is measured at the renewals and
// stored with the lease, so that a reader of the lease sees it; Pending is
// the server's count.
func TestEngineRecordsItsLagInTheLease(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	publishKeys(t, js, "a", []string{"x"}, 6) // one key: a stuck call holds the rest
	lease, err := AcquireLease(ctx, kv, "tools.0", "w1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	rec := newRecorder()
	rec.fn = func(ctx context.Context, _ string, msgs []*Message) []error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	// MaxHeld 4 and ReadAhead 2: reading pauses with messages in the
	// client's buffer, which count as pending.
	e := newEngine(t, js, lease, rec, Options{CommitInterval: 20 * time.Millisecond, BatchSize: 1, KeyBatch: 1})
	if _, err := e.Pending(ctx); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pending before Run: %v, want ErrNotRunning", err)
	}
	wait := runEngine(t, e)
	waitFor(t, "the lag of 6 stored with the lease", func() bool {
		st, ok, err := ReadLease(ctx, kv, "tools.0")
		return err == nil && ok && st.HasLag && st.Lag == 6 && !st.At.IsZero()
	})
	close(release)
	waitFor(t, "every message applied", func() bool { return rec.count() == 6 })
	waitFor(t, "a lag of 0 stored", func() bool {
		st, ok, err := ReadLease(ctx, kv, "tools.0")
		return err == nil && ok && st.HasLag && st.Lag == 0 && st.Checkpoint == 7
	})
	if n, err := e.Pending(ctx); err != nil || n != 0 {
		t.Errorf("Pending after the drain: %d, %v", n, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
