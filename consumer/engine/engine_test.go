package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func newEngine(t *testing.T, js jetstream.JetStream, cp Checkpointer, h BatchHandler, opts Options) *Engine {
	t.Helper()
	e, err := New(js, Source{Stream: "T", FilterSubjects: []string{"t.>"}}, cp, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func keyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strconv.Itoa(i)
	}
	return out
}

func TestEnginePerKeyOrderAndCloseCommits(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	keys := keyNames(20)
	publishKeys(t, js, "a", keys, 25) // half before the start: a backlog
	var mu sync.Mutex
	lastSeq := map[string]uint64{}
	var bad atomic.Value
	rec := newRecorder()
	var active sync.Map
	rec.fn = func(_ context.Context, key string, msgs []*Message) []error {
		if _, busy := active.LoadOrStore(key, true); busy {
			bad.Store(fmt.Sprintf("key %s handled concurrently with itself", key))
		}
		defer active.Delete(key)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if m.Key != key || m.StreamSeq <= lastSeq[key] || m.Attempt != 1 || m.Stream != "T" {
				bad.Store(fmt.Sprintf("key %s: got seq %d key %s attempt %d after %d", key, m.StreamSeq, m.Key, m.Attempt, lastSeq[key]))
			}
			lastSeq[key] = m.StreamSeq
		}
		return nil
	}
	cp := newMemCheckpointer(0)
	e := newEngine(t, js, cp, rec, Options{Workers: 4, BatchSize: 16})
	wait := runEngine(t, e)
	publishKeys(t, js, "b", keys, 25) // the rest while running
	waitFor(t, "all handled", func() bool { return rec.count() == 1000 })
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	for _, k := range keys {
		got := rec.seen[k]
		for i := range 50 {
			if want := fmt.Sprintf("%s-%d", k, i%25); got[i] != want {
				t.Fatalf("key %s message %d: got %q, want %q", k, i, got[i], want)
			}
		}
	}
	if got := cp.Checkpoint(); got != 1001 {
		t.Fatalf("committed checkpoint %d, want 1001", got)
	}
	if s := e.Stats(); s.Held != 0 || s.Keys != 0 || s.LastSeen != 1000 || s.Applied != 1000 || s.Committed != 1001 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEngineSlowKeyDoesNotHoldOthers(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"slow"}, 1) // seq 1
	others := keyNames(10)
	publishKeys(t, js, "a", others, 10)
	release := make(chan struct{})
	rec := newRecorder()
	rec.fn = func(ctx context.Context, key string, msgs []*Message) []error {
		if key == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return []error{ctx.Err()}
			}
		}
		return nil
	}
	cp := newMemCheckpointer(0)
	e := newEngine(t, js, cp, rec, Options{Workers: 2, BatchSize: 8})
	wait := runEngine(t, e)
	waitFor(t, "the other keys handled while slow blocks", func() bool { return rec.count() == 100 })
	if s := e.Stats(); s.Checkpoint != 1 || s.Running != 1 || s.Held != 1 {
		t.Fatalf("while slow blocks: stats %+v, want checkpoint 1 held by the slow key", s)
	}
	close(release)
	waitFor(t, "slow handled", func() bool { return rec.count() == 101 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if cp.Checkpoint() != 102 {
		t.Fatalf("checkpoint %d, want 102", cp.Checkpoint())
	}
}

func TestEngineBatchesAKeysBacklog(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"x"}, 100)
	var e *Engine
	first := true
	rec := newRecorder()
	rec.fn = func(ctx context.Context, _ string, msgs []*Message) []error {
		if first { // hold the first call until the whole backlog is read
			first = false
			for e.Stats().LastSeen < 100 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
		}
		return nil
	}
	e = newEngine(t, js, newMemCheckpointer(0), rec, Options{BatchSize: 64, KeyBatch: 200})
	wait := runEngine(t, e)
	waitFor(t, "all handled", func() bool { return rec.count() == 100 })
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// While the first call ran the rest queued behind it; it is handed over
	// in one call (KeyBatch 200), though it was read in batches of 64.
	n1 := len(rec.calls[0])
	if len(rec.calls) != 2 || len(rec.calls[1]) != 100-n1 {
		t.Fatalf("calls of %v messages; want the first call and then one with the other %d", callSizes(rec), 100-n1)
	}
	for i, m := range rec.calls[1] {
		if m.StreamSeq != uint64(n1+i+1) {
			t.Fatalf("second call message %d has seq %d", i, m.StreamSeq)
		}
	}
}

func callSizes(r *recorder) []int {
	var out []int
	for _, c := range r.calls {
		out = append(out, len(c))
	}
	return out
}

func TestEngineDeadLettersPermanentAndPanic(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	ctx := context.Background()
	// seq 1..6 on key "k": 2 is bad input, 4 panics (inside a batch call).
	for i := 1; i <= 6; i++ {
		msg := &nats.Msg{Subject: "t.a.k", Data: []byte("k-" + strconv.Itoa(i)), Header: nats.Header{"Nats-Msg-Id": {"id-" + strconv.Itoa(i)}, "X-Trace": {"tr"}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	var gate sync.Once
	started := make(chan struct{})
	rec := newRecorder()
	rec.fn = func(_ context.Context, _ string, msgs []*Message) []error {
		gate.Do(func() { close(started) })
		res := make([]error, len(msgs))
		for i, m := range msgs {
			switch string(m.Data) {
			case "k-2":
				res[i] = Permanent("schema_invalid", errors.New("field x\nmissing"))
			case "k-4":
				panic("boom")
			}
		}
		return res
	}
	e := newEngine(t, js, newMemCheckpointer(0), rec, Options{})
	wait := runEngine(t, e)
	dl := deadLetters(t, js, 2)
	waitFor(t, "the good ones applied", func() bool { return rec.count() == 4 })
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := rec.seen["k"]; fmt.Sprint(got) != "[k-1 k-3 k-5 k-6]" {
		t.Fatalf("applied %v", got)
	}
	for i, want := range []struct{ seq, reason, subject string }{{"2", "schema_invalid", "toolsentry.dlq.schema_invalid"}, {"4", ReasonPanic, "toolsentry.dlq.handler_panic"}} {
		m := dl[i]
		h := m.Headers()
		if m.Subject() != want.subject || h.Get(HeaderDeadLetterReason) != want.reason || h.Get(HeaderOriginalSequence) != want.seq ||
			h.Get(HeaderOriginalSubject) != "t.a.k" || h.Get(HeaderOriginalStream) != "T" || h.Get(HeaderOriginalMsgID) != "id-"+want.seq ||
			h.Get("X-Trace") != "tr" || h.Get(HeaderNumDelivered) != "1" || h.Get(HeaderOriginalTime) == "" || string(m.Data()) != "k-"+want.seq {
			t.Fatalf("dead letter %d: subject %s headers %v", i, m.Subject(), h)
		}
	}
	if got := dl[0].Headers().Get(HeaderDeadLetterError); got != "permanent failure: schema_invalid: field x missing" {
		t.Fatalf("error header %q", got)
	}
	if s := e.Stats(); s.DeadLetters != 2 || s.Applied != 6 {
		t.Fatalf("stats %+v", s)
	}
	// The dead letters are deduplicated by a deterministic id.
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "toolsentry.dlq.x", Header: nats.Header{"Nats-Msg-Id": {DeadLetterMsgID("T", 2)}}}); err != nil {
		t.Fatal(err)
	}
	if info, _ := js.Stream(ctx, "D"); info.CachedInfo().State.Msgs != 2 {
		t.Fatalf("a second dead letter of T/2 was stored: %d", info.CachedInfo().State.Msgs)
	}
}

func TestEngineTransientRetryHoldsOnlyItsKey(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"flaky"}, 3) // seq 1..3
	others := keyNames(5)
	publishKeys(t, js, "a", others, 4)
	var allow atomic.Bool
	var okAttempt atomic.Int64
	rec := newRecorder()
	rec.fn = func(_ context.Context, key string, msgs []*Message) []error {
		if key != "flaky" {
			return nil
		}
		if !allow.Load() {
			res := make([]error, len(msgs))
			for i := range res {
				res[i] = errors.New("store unavailable")
			}
			return res
		}
		okAttempt.Store(int64(msgs[0].Attempt))
		return nil
	}
	cp := newMemCheckpointer(0)
	e := newEngine(t, js, cp, rec, Options{BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxAttempts: 1000})
	wait := runEngine(t, e)
	waitFor(t, "the other keys applied and flaky retried", func() bool { return rec.count() == 20 && e.Stats().Retries >= 2 })
	if s := e.Stats(); s.Checkpoint != 1 || s.Held != 3 || len(rec.seen["flaky"]) != 0 {
		t.Fatalf("while flaky retries: stats %+v, flaky applied %v", s, rec.seen["flaky"])
	}
	if got := cp.Checkpoint(); got > 1 {
		t.Fatalf("committed %d past the retrying key's first message", got)
	}
	allow.Store(true)
	waitFor(t, "flaky applied", func() bool { return rec.count() == 23 })
	if got := rec.seen["flaky"]; fmt.Sprint(got) != "[flaky-0 flaky-1 flaky-2]" {
		t.Fatalf("flaky applied %v", got)
	}
	if okAttempt.Load() < 3 {
		t.Fatalf("flaky succeeded at attempt %d, want >= 3", okAttempt.Load())
	}
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if cp.Checkpoint() != 24 {
		t.Fatalf("checkpoint %d, want 24", cp.Checkpoint())
	}
}

func TestEngineMaxAttemptsDeadLetters(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"x"}, 3)
	rec := newRecorder()
	rec.fn = func(_ context.Context, _ string, msgs []*Message) []error {
		if string(msgs[0].Data) == "x-0" {
			res := make([]error, len(msgs))
			for i := range res {
				res[i] = errors.New("timeout")
			}
			return res
		}
		return nil
	}
	e := newEngine(t, js, newMemCheckpointer(0), rec, Options{MaxAttempts: 3, BackoffInitial: time.Millisecond, BackoffMax: time.Millisecond})
	wait := runEngine(t, e)
	dl := deadLetters(t, js, 1)
	waitFor(t, "the rest applied", func() bool { return rec.count() == 2 })
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	h := dl[0].Headers()
	if h.Get(HeaderDeadLetterReason) != ReasonMaxAttempts || h.Get(HeaderNumDelivered) != "3" || h.Get(HeaderOriginalSequence) != "1" || h.Get(HeaderDeadLetterError) != "timeout" {
		t.Fatalf("dead letter headers %v", h)
	}
	if fmt.Sprint(rec.seen["x"]) != "[x-1 x-2]" {
		t.Fatalf("applied %v", rec.seen["x"])
	}
}

func TestEngineRestartReadsTheUncommittedSuffix(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"p", "q", "r"}, 4) // seq 1..12; q's first is seq 2
	cp := newMemCheckpointer(0)
	rec := newRecorder()
	rec.fn = func(_ context.Context, key string, msgs []*Message) []error {
		if key == "q" {
			res := make([]error, len(msgs))
			for i := range res {
				res[i] = errors.New("not yet")
			}
			return res
		}
		return nil
	}
	e := newEngine(t, js, cp, rec, Options{MaxAttempts: 1000, BackoffInitial: 5 * time.Millisecond, BackoffMax: 5 * time.Millisecond})
	wait := runEngine(t, e)
	waitFor(t, "p and r applied", func() bool { return rec.count() == 8 })
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if cp.Checkpoint() != 2 {
		t.Fatalf("checkpoint %d, want 2 (q's first message)", cp.Checkpoint())
	}
	publishKeys(t, js, "b", []string{"p"}, 1) // seq 13
	rec2 := newRecorder()
	var seqs []uint64
	var mu sync.Mutex
	rec2.fn = func(_ context.Context, _ string, msgs []*Message) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seqs = append(seqs, m.StreamSeq)
		}
		return nil
	}
	e2 := newEngine(t, js, cp, rec2, Options{})
	wait2 := runEngine(t, e2)
	waitFor(t, "the suffix re-read", func() bool { return rec2.count() == 12 })
	e2.Close()
	if err := wait2(); err != nil {
		t.Fatal(err)
	}
	slicesSort(seqs)
	if fmt.Sprint(seqs) != "[2 3 4 5 6 7 8 9 10 11 12 13]" {
		t.Fatalf("second engine read %v, want exactly 2..13", seqs)
	}
	if cp.Checkpoint() != 14 {
		t.Fatalf("checkpoint %d, want 14", cp.Checkpoint())
	}
}

func slicesSort(s []uint64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestEngineLostStopsTheLane(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"a", "b"}, 5)
	var calls, afterLost atomic.Int64
	var isLost atomic.Bool
	blocked := make(chan struct{})
	rec := newRecorder()
	rec.fn = func(ctx context.Context, key string, msgs []*Message) []error {
		calls.Add(1)
		if isLost.Load() {
			afterLost.Add(1)
		}
		if key == "b" { // b blocks until the loss cancels it
			select {
			case blocked <- struct{}{}:
			default:
			}
			<-ctx.Done()
			res := make([]error, len(msgs))
			for i := range res {
				res[i] = ctx.Err()
			}
			return res
		}
		return nil
	}
	cp := newMemCheckpointer(0)
	e := newEngine(t, js, cp, rec, Options{})
	wait := runEngine(t, e)
	<-blocked
	waitFor(t, "a applied", func() bool { return rec.count() == 5 })
	waitFor(t, "the checkpoint committed", func() bool { return cp.Checkpoint() == 2 })
	cp.mu.Lock()
	commits := cp.commits
	isLost.Store(true)
	close(cp.lost)
	cp.mu.Unlock()
	if err := wait(); !errors.Is(err, ErrLost) {
		t.Fatalf("Run: %v, want ErrLost", err)
	}
	publishKeys(t, js, "a", []string{"a"}, 3)
	if err := e.Close(); err != nil {
		t.Fatalf("Close after lost: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if afterLost.Load() != 0 {
		t.Fatalf("%d handler calls after the loss", afterLost.Load())
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.commits != commits || cp.cp != 2 {
		t.Fatalf("committed after the loss: %d commits (was %d), checkpoint %d", cp.commits, commits, cp.cp)
	}
}

func TestEngineMaxHeldPausesReading(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	publishKeys(t, js, "a", []string{"a"}, 200)
	release := make(chan struct{})
	rec := newRecorder()
	rec.fn = func(ctx context.Context, _ string, msgs []*Message) []error {
		<-release
		return nil
	}
	e := newEngine(t, js, newMemCheckpointer(0), rec, Options{BatchSize: 10, MaxHeld: 20, ReadAhead: 10})
	wait := runEngine(t, e)
	waitFor(t, "held reaches MaxHeld", func() bool { return e.Stats().Held >= 20 })
	for range 20 {
		if s := e.Stats(); s.Held >= 30 || s.LastSeen >= 30 {
			t.Fatalf("read on past MaxHeld: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	waitFor(t, "all applied", func() bool { return rec.count() == 200 })
	e.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Workers: -1}, {BatchSize: 10, MaxHeld: 5}, {BackoffInitial: time.Minute, BackoffMax: time.Second}, {Linger: -1}} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, Source{Stream: "T"}, newMemCheckpointer(0), newRecorder(), Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatal(err)
	}
}

func TestBackoffDoubles(t *testing.T) {
	for a, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 30 * time.Second} {
		if got := backoff(time.Second, 30*time.Second, a); got != want {
			t.Errorf("attempt %d: %s, want %s", a, got, want)
		}
	}
}
