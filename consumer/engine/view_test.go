package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// viewFixture is an embedded server with the buckets the view tests use,
// and the URL for a second client ("another process").
type viewFixture struct {
	ctx                                              context.Context
	url                                              string
	baselines, usage, quality, workflows, directives jetstream.KeyValue
}

func newViewFixture(t *testing.T) *viewFixture {
	t.Helper()
	s, js := engineServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	f := &viewFixture{ctx: ctx, url: s.ClientURL()}
	for name, kv := range map[string]*jetstream.KeyValue{"baselines": &f.baselines, "usage": &f.usage, "quality": &f.quality, "workflows": &f.workflows, "directives": &f.directives} {
		b, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1})
		if err != nil {
			t.Fatal(err)
		}
		*kv = b
	}
	return f
}

// otherJetStream is a second client of the fixture's server.
func (f *viewFixture) otherJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return connectJS(t, f.url)
}

func newView(t *testing.T, ctx context.Context, kv jetstream.KeyValue, opts ViewOptions) *View {
	t.Helper()
	v, err := NewView(ctx, kv, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := v.WaitReady(wctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return v
}

func increment(cur []byte, found bool) ([]byte, error) {
	n := 0
	if found {
		var err error
		if n, err = strconv.Atoi(string(cur)); err != nil {
			return nil, err
		}
	}
	return []byte(strconv.Itoa(n + 1)), nil
}

func TestViewLoadsInitialValuesAndFollows(t *testing.T) {
	f := newViewFixture(t)
	kv := f.usage
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(f.ctx, k, []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	v := newView(t, f.ctx, kv, ViewOptions{})
	if e, ok := v.Get("a"); !ok || string(e.Value) != "v-a" || e.Revision == 0 {
		t.Errorf("Get(a) after ready = %+v, %v", e, ok)
	}
	if v.Len() != 2 {
		t.Errorf("Len = %d, want 2", v.Len())
	}

	// Another process writes and deletes: the watch brings it in.
	other := f.otherJetStream(t)
	okv, err := other.KeyValue(f.ctx, kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := okv.Put(f.ctx, "c", []byte("v-c")); err != nil {
		t.Fatal(err)
	}
	if err := okv.Delete(f.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "view sees c and not a", func() bool {
		_, hasA := v.Get("a")
		c, hasC := v.Get("c")
		return !hasA && hasC && string(c.Value) == "v-c"
	})

	// A key written after a delete is created again on top of the tombstone.
	e, err := v.Update(f.ctx, "a", increment)
	if err != nil || string(e.Value) != "1" {
		t.Errorf("Update of a deleted key = %+v, %v; want 1", e, err)
	}
}

func TestViewOwnWritesVisibleAtOnce(t *testing.T) {
	f := newViewFixture(t)
	v := newView(t, f.ctx, f.quality, ViewOptions{})

	var last Entry
	for i := 1; i <= 50; i++ {
		e, err := v.Update(f.ctx, "x", increment)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := v.Get("x")
		if !ok || string(got.Value) != strconv.Itoa(i) || got.Revision != e.Revision {
			t.Fatalf("Get right after write %d = %+v, %v; want the write, revision %d", i, got, ok, e.Revision)
		}
		last = e
	}
	// Once the watch has delivered a later write of another key it has
	// delivered all 50 writes of x too, in order; none of them may roll x back.
	if _, err := f.quality.Put(f.ctx, "marker", []byte("m")); err != nil {
		t.Fatal(err)
	}
	rolledBack := 0
	waitFor(t, "view sees the marker", func() bool {
		if got, _ := v.Get("x"); got.Revision != last.Revision {
			rolledBack++
		}
		_, ok := v.Get("marker")
		return ok
	})
	if rolledBack > 0 {
		t.Errorf("an older watch update replaced the view's own write %d times", rolledBack)
	}
	if got, _ := v.Get("x"); got.Revision != last.Revision || string(got.Value) != "50" {
		t.Errorf("x after the watch caught up = %+v, want 50 at revision %d", got, last.Revision)
	}

	if _, err := v.CompareAndSet(f.ctx, "x", []byte("stale"), last.Revision-1); !errors.Is(err, ErrConflict) || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("CompareAndSet at an old revision = %v, want ErrConflict and ErrKeyRevisionMismatch", err)
	}
	if _, err := v.CompareAndSet(f.ctx, "x", []byte("new"), 0); !errors.Is(err, ErrConflict) || !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("CompareAndSet create of an existing key = %v, want ErrConflict and ErrKeyExists", err)
	}
	e, err := v.Update(f.ctx, "x", func([]byte, bool) ([]byte, error) { return nil, ErrNoChange })
	if err != nil || e.Revision != last.Revision {
		t.Errorf("Update with ErrNoChange = %+v, %v; want the current entry", e, err)
	}
	boom := errors.New("merge refused")
	if _, err := v.Update(f.ctx, "x", func([]byte, bool) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Update with a failing merge = %v, want its error", err)
	}
}

// TestViewConcurrentCASNeverLosesUpdates: two processes (two connections,
// two views) increment one counter concurrently; every increment counts.
func TestViewConcurrentCASNeverLosesUpdates(t *testing.T) {
	const writers, each = 8, 25
	f := newViewFixture(t)
	other := f.otherJetStream(t)
	okv, err := other.KeyValue(f.ctx, f.usage.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	views := []*View{
		newView(t, f.ctx, f.usage, ViewOptions{MaxAttempts: 1000}),
		newView(t, f.ctx, okv, ViewOptions{MaxAttempts: 1000}),
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for _, v := range views {
		for range writers {
			wg.Go(func() {
				for range each {
					if _, err := v.Update(f.ctx, "counter", increment); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Update: %v", err)
	}
	want := strconv.Itoa(2 * writers * each)
	e, err := f.usage.Get(f.ctx, "counter")
	if err != nil || string(e.Value()) != want {
		t.Fatalf("counter in the bucket = %v, %v; want %s", e, err, want)
	}
	for i, v := range views {
		waitFor(t, "view "+strconv.Itoa(i)+" converges", func() bool {
			got, ok := v.Get("counter")
			return ok && string(got.Value) == want && got.Revision == e.Revision()
		})
	}
}

func TestViewStaleness(t *testing.T) {
	f := newViewFixture(t)
	ctx, cancel := context.WithCancel(f.ctx)
	v := newView(t, ctx, f.workflows, ViewOptions{ProbeInterval: 20 * time.Millisecond})
	if _, err := f.workflows.Put(f.ctx, "w", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// An idle bucket stays fresh through probes.
	start := time.Now()
	waitFor(t, "probes keep an idle view fresh", func() bool {
		return time.Since(start) > 200*time.Millisecond && v.Staleness() < 100*time.Millisecond
	})
	// A view that stopped following grows stale.
	cancel()
	waitFor(t, "a stopped view grows stale", func() bool {
		return v.Staleness() > 300*time.Millisecond
	})
	v.Close()
	v.Close() // idempotent
	if err := v.WaitReady(f.ctx); err != nil {
		t.Errorf("WaitReady on a closed view that was ready = %v", err)
	}
}

func TestViewTooManyConflicts(t *testing.T) {
	f := newViewFixture(t)
	v := newView(t, f.ctx, f.directives, ViewOptions{MaxAttempts: 2})
	if _, err := f.directives.Put(f.ctx, "d", []byte("0")); err != nil {
		t.Fatal(err)
	}
	// A merge that makes a concurrent write every time loses every race.
	_, err := v.Update(f.ctx, "d", func(cur []byte, found bool) ([]byte, error) {
		if _, err := f.directives.Put(f.ctx, "d", []byte("interfering")); err != nil {
			return nil, err
		}
		return []byte("mine"), nil
	})
	if !errors.Is(err, ErrTooManyConflicts) {
		t.Errorf("Update against a writer that always wins = %v, want ErrTooManyConflicts", err)
	}
}

// TestViewDeleteAt: a delete at the revision read is visible at once and
// survives the watch's tombstone; a delete at an old revision conflicts;
// the key can be created again.
func TestViewDeleteAt(t *testing.T) {
	f := newViewFixture(t)
	v := newView(t, f.ctx, f.baselines, ViewOptions{})
	e, err := v.Update(f.ctx, "k", increment)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Update(f.ctx, "k", increment); err != nil {
		t.Fatal(err)
	}
	if err := v.DeleteAt(f.ctx, "k", e.Revision); !errors.Is(err, ErrConflict) {
		t.Fatalf("DeleteAt an old revision = %v, want ErrConflict", err)
	}
	cur, _ := v.Get("k")
	if err := v.DeleteAt(f.ctx, "k", cur.Revision); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Get("k"); ok {
		t.Fatal("the view still has the key right after its delete")
	}
	if _, err := f.baselines.Put(f.ctx, "marker", []byte("m")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "view sees the marker", func() bool {
		_, ok := v.Get("marker")
		return ok
	})
	if _, ok := v.Get("k"); ok {
		t.Fatal("the watch brought the deleted key back")
	}
	if _, err := f.baselines.Get(f.ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("bucket Get after delete: %v", err)
	}
	if e, err := v.Update(f.ctx, "k", increment); err != nil || string(e.Value) != "1" {
		t.Errorf("Update after delete = %+v, %v; want 1", e, err)
	}
}

func TestNewViewRefusesNoAttempts(t *testing.T) {
	f := newViewFixture(t)
	if _, err := NewView(f.ctx, f.usage, ViewOptions{MaxAttempts: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("NewView with MaxAttempts -1 = %v, want ErrInvalidOptions", err)
	}
}
