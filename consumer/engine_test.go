package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

var errFlaky = errors.New("flaky dependency")

func bodies(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func TestRedeliveryAfterNak(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{fn: func(_ context.Context, _ *consumer.Message, attempt int) error {
		if attempt == 1 {
			return errFlaky
		}
		return nil
	}}
	f.run(r, testOptions())
	seq := f.publish("k1", "a")[0]

	calls := r.waitCalls(t, 2)
	f.waitSettled()
	want := []call{
		{Key: "k1", Body: "a", Seq: seq, NumDelivered: 1},
		{Key: "k1", Body: "a", Seq: seq, NumDelivered: 2},
	}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if dl := f.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters = %d, want 0", len(dl))
	}
}

func TestTermStopsRedelivery(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{fn: func(_ context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "bad" {
			return consumer.Permanent("bad_input", errors.New("not a tool call"))
		}
		return nil
	}}
	f.run(r, testOptions())
	seqs := f.publish("k1", "bad")
	f.waitDeadLetters(1)
	f.waitSettled()

	// Once the server has nothing pending, nothing can be redelivered; a
	// later message of the same key is handled after the bad one settled.
	seqs = append(seqs, f.publish("k1", "good")...)
	r.waitCalls(t, 2)
	f.waitSettled()
	want := []call{
		{Key: "k1", Body: "bad", Seq: seqs[0], NumDelivered: 1},
		{Key: "k1", Body: "good", Seq: seqs[1], NumDelivered: 1},
	}
	if diff := cmp.Diff(want, r.snapshot()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if ci := f.consumerInfo(); ci.NumRedelivered != 0 {
		t.Errorf("NumRedelivered = %d, want 0", ci.NumRedelivered)
	}
}

func TestDedupeByMsgID(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{}
	f.run(r, testOptions())

	first, err := f.pub.PublishSync(f.ctx, f.subject("k1"), "event-1", nil, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.pub.PublishSync(f.ctx, f.subject("k1"), "event-1", nil, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !again.Duplicate || again.Sequence != first.Sequence {
		t.Errorf("acks = %+v then %+v, want the second a duplicate of the first", first, again)
	}
	f.publish("k1", "marker")
	calls := r.waitCalls(t, 2)
	f.waitSettled()
	if diff := cmp.Diff([]string{"x", "marker"}, []string{calls[0].Body, calls[1].Body}); diff != "" || len(r.snapshot()) != 2 {
		t.Errorf("handled %+v, want x once then marker", r.snapshot())
	}
}

// TestOrderPerKeyUnderParallelism publishes interleaved events of many keys,
// makes some of them fail transiently once, and checks that every key saw
// its events in publish order, never two at a time, while keys overlapped.
func TestOrderPerKeyUnderParallelism(t *testing.T) {
	const keys, perKey = 40, 25
	f := newFixture(t, testConfig())

	var (
		mu        sync.Mutex
		applied   = map[string][]int{}
		running   = map[string]int{}
		overlap   int // a key ran twice at once
		active    int
		maxActive int
		retries   atomic.Int64
	)
	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		idx, err := strconv.Atoi(string(m.Data))
		if err != nil {
			return consumer.Permanent("test_bad_body", err)
		}
		mu.Lock()
		running[m.Key]++
		if running[m.Key] > 1 {
			overlap++
		}
		active++
		maxActive = max(maxActive, active)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[m.Key]--
			active--
			mu.Unlock()
		}()

		hs := fnv.New32a()
		_, _ = hs.Write([]byte(m.Subject + string(m.Data)))
		select {
		case <-time.After(time.Duration(hs.Sum32()%1500) * time.Microsecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		if idx%7 == 3 && m.NumDelivered == 1 {
			retries.Add(1)
			return errFlaky
		}
		mu.Lock()
		applied[m.Key] = append(applied[m.Key], idx)
		mu.Unlock()
		return nil
	})
	f.run(h, testOptions())

	b := f.pub.NewBatch()
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("tool%02d", k)
			if err := b.Publish(f.ctx, f.subject(key), fmt.Sprintf("%s-%d", key, i), nil, []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res, err := b.Wait(f.ctx); err != nil || res.Stored != keys*perKey {
		t.Fatalf("publishing: %+v, %v", res, err)
	}

	natstest.Eventually(t, 20*time.Second, "all events applied", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range applied {
			n += len(v)
		}
		return n == keys*perKey
	})
	f.waitSettled()

	mu.Lock()
	defer mu.Unlock()
	want := make([]int, perKey)
	for i := range want {
		want[i] = i
	}
	for k := range keys {
		key := fmt.Sprintf("tool%02d", k)
		if diff := cmp.Diff(want, applied[key]); diff != "" {
			t.Errorf("key %s applied out of order (-want +got):\n%s", key, diff)
		}
	}
	if overlap != 0 {
		t.Errorf("a key was handled by two workers at once %d times", overlap)
	}
	if maxActive < 2 {
		t.Errorf("at most %d handlers ran at once, want keys to overlap", maxActive)
	}
	if retries.Load() == 0 {
		t.Error("no transient failure was injected")
	}
	if dl := f.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters = %d, want 0", len(dl))
	}
}

func TestPermanentErrorDeadLettersOriginal(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{fn: func(context.Context, *consumer.Message, int) error {
		return fmt.Errorf("decoding invocation: %w", consumer.Permanent("decode_invalid_json", errors.New("unexpected end of input\nat line 1")))
	}}
	f.run(r, testOptions())
	body := []byte(`{"tool":"search",`)
	ack, err := f.pub.PublishSync(f.ctx, f.subject("search"), "ce-42", map[string][]string{"Ce-Type": {"toolsentry.invocation.v1"}}, body)
	if err != nil {
		t.Fatal(err)
	}
	dl := f.waitDeadLetters(1)[0]
	f.waitSettled()

	if got, want := dl.Subject, "toolsentry.dlq.decode_invalid_json"; got != want {
		t.Errorf("dead letter subject = %q, want %q", got, want)
	}
	if diff := cmp.Diff(body, dl.Data); diff != "" {
		t.Errorf("dead letter data (-want +got):\n%s", diff)
	}
	wantHeaders := map[string]string{
		"Ce-Type":                         "toolsentry.invocation.v1",
		consumer.HeaderDeadLetterReason:   "decode_invalid_json",
		consumer.HeaderOriginalSubject:    f.res.Config.TelemetryPrefix() + ".invocation.0.search", // as stored, in partition 0 of 1
		consumer.HeaderOriginalStream:     "TOOLSENTRY_TELEMETRY",
		consumer.HeaderOriginalSequence:   strconv.FormatUint(ack.Sequence, 10),
		consumer.HeaderNumDelivered:       "1",
		consumer.HeaderOriginalMsgID:      "ce-42",
		consumer.HeaderDeadLetterError:    "decoding invocation: permanent failure: decode_invalid_json: unexpected end of input at line 1",
		jetstream.MsgIDHeader:             "dlq-TOOLSENTRY_TELEMETRY-" + strconv.FormatUint(ack.Sequence, 10),
		consumer.HeaderOriginalTime + "?": "set",
	}
	got := map[string]string{}
	for k := range wantHeaders {
		if k == consumer.HeaderOriginalTime+"?" {
			if _, err := time.Parse(time.RFC3339Nano, dl.Header.Get(consumer.HeaderOriginalTime)); err == nil {
				got[k] = "set"
			}
			continue
		}
		got[k] = dl.Header.Get(k)
	}
	if diff := cmp.Diff(wantHeaders, got); diff != "" {
		t.Errorf("dead letter headers (-want +got):\n%s", diff)
	}
	if n := len(r.snapshot()); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

func TestPanicDeadLettersAndGoesOn(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{fn: func(_ context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "boom" {
			var nilMap map[string]int
			nilMap["x"] = 1 // a real runtime panic
		}
		return nil
	}}
	f.run(r, testOptions())
	seqs := f.publish("k1", "before", "boom", "after")
	dl := f.waitDeadLetters(1)
	r.waitCalls(t, 3)
	f.waitSettled()

	if got := dl[0].Header.Get(consumer.HeaderDeadLetterReason); got != consumer.ReasonPanic {
		t.Errorf("reason = %q, want %q", got, consumer.ReasonPanic)
	}
	if got := dl[0].Header.Get(consumer.HeaderOriginalSequence); got != strconv.FormatUint(seqs[1], 10) {
		t.Errorf("dead-lettered sequence %s, want %d", got, seqs[1])
	}
	var got []string
	for _, c := range r.snapshot() {
		got = append(got, c.Body)
	}
	if diff := cmp.Diff([]string{"before", "boom", "after"}, got); diff != "" {
		t.Errorf("handled (-want +got):\n%s", diff)
	}
}

func TestTransientRetriedThenDeadLettered(t *testing.T) {
	f := newFixture(t, testConfig()) // MaxDeliver 3
	r := &recorder{fn: func(_ context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "stuck" {
			return errFlaky
		}
		return nil
	}}
	f.run(r, testOptions())
	seqs := f.publish("k1", "stuck", "next")
	dl := f.waitDeadLetters(1)
	r.waitCalls(t, 4)
	f.waitSettled()

	want := []call{
		{Key: "k1", Body: "stuck", Seq: seqs[0], NumDelivered: 1},
		{Key: "k1", Body: "stuck", Seq: seqs[0], NumDelivered: 2},
		{Key: "k1", Body: "stuck", Seq: seqs[0], NumDelivered: 3},
		{Key: "k1", Body: "next", Seq: seqs[1], NumDelivered: 1},
	}
	if diff := cmp.Diff(want, r.snapshot()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if got := dl[0].Header.Get(consumer.HeaderDeadLetterReason); got != consumer.ReasonMaxDeliver {
		t.Errorf("reason = %q, want %q", got, consumer.ReasonMaxDeliver)
	}
	if got := dl[0].Header.Get(consumer.HeaderNumDelivered); got != "3" {
		t.Errorf("num delivered header = %q, want 3", got)
	}
	if got := dl[0].Header.Get(consumer.HeaderDeadLetterError); got != errFlaky.Error() {
		t.Errorf("error header = %q, want %q", got, errFlaky.Error())
	}
}

// slowAckWait makes an AckWait expiry distinguishable from a hand-back: a
// message given back at shutdown comes again at once, not after AckWait.
func slowAckWait() consumer.Config {
	cfg := testConfig()
	cfg.AckWait = 10 * time.Second
	return cfg
}

func TestCloseWhileBusy(t *testing.T) {
	f := newFixture(t, slowAckWait())
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	first := &recorder{fn: func(ctx context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "slow" {
			once.Do(func() { close(started) })
			<-release
		}
		return nil
	}}
	e, done := f.run(first, testOptions())
	f.publish("busy", "slow", "q1", "q2", "q3")
	f.publish("other", bodies(5)...)
	<-started
	// Wait until the queued messages of "busy" reached the engine.
	natstest.Eventually(t, 5*time.Second, "engine holds the busy key's queue", func() bool {
		return e.Stats().Held >= 4
	})

	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a handler was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}

	second := &recorder{}
	f.run(second, testOptions())
	natstest.Eventually(t, 5*time.Second, "everything handled once, before AckWait", func() bool {
		return len(first.snapshot())+len(second.snapshot()) >= 9
	})
	f.waitSettled()

	seen := map[uint64]int{}
	for _, c := range append(first.snapshot(), second.snapshot()...) {
		seen[c.Seq]++
	}
	if len(seen) != 9 {
		t.Errorf("handled %d distinct messages, want 9", len(seen))
	}
	for seq, n := range seen {
		if n != 1 {
			t.Errorf("message %d handled %d times, want once", seq, n)
		}
	}
	var busy []string
	for _, c := range append(first.snapshot(), second.snapshot()...) {
		if c.Key == "busy" {
			busy = append(busy, c.Body)
		}
	}
	if diff := cmp.Diff([]string{"slow", "q1", "q2", "q3"}, busy); diff != "" {
		t.Errorf("busy key order across the restart (-want +got):\n%s", diff)
	}
}

// TestCloseWhileAwaitingKeepsOrder: a key waiting for the redelivery of a
// nak'd message hands its queued messages back so that they come after it.
func TestCloseWhileAwaitingKeepsOrder(t *testing.T) {
	f := newFixture(t, slowAckWait())
	first := &recorder{fn: func(_ context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "flaky" {
			return errFlaky
		}
		return nil
	}}
	opts := testOptions()
	opts.BackoffInitial, opts.BackoffMax = 300*time.Millisecond, 300*time.Millisecond
	e, _ := f.run(first, opts)
	f.publish("k1", "flaky", "t1", "t2")
	natstest.Eventually(t, 5*time.Second, "key awaiting its nak'd head with a queued tail", func() bool {
		s := e.Stats()
		return s.Awaiting == 1 && s.Held == 2
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	second := &recorder{}
	f.run(second, testOptions())
	natstest.Eventually(t, 5*time.Second, "all three handled, before AckWait", func() bool {
		return len(second.snapshot()) == 3
	})
	f.waitSettled()
	var got []string
	for _, c := range second.snapshot() {
		got = append(got, c.Body)
	}
	if diff := cmp.Diff([]string{"flaky", "t1", "t2"}, got); diff != "" {
		t.Errorf("order after hand-back (-want +got):\n%s", diff)
	}
	if got := len(first.snapshot()); got != 1 {
		t.Errorf("first engine handled %d messages, want only the flaky one", got)
	}
}

// TestShutdownTimeoutCancelsHandlers: a handler that outlives the shutdown
// deadline is cancelled, with every worker busy and another key waiting for
// one, and its message is handed back, not dead-lettered.
func TestShutdownTimeoutCancelsHandlers(t *testing.T) {
	f := newFixture(t, slowAckWait())
	started := make(chan struct{})
	var once sync.Once
	stubborn := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	})
	opts := testOptions()
	opts.Workers = 1
	opts.ShutdownTimeout = 200 * time.Millisecond
	e, _ := f.run(stubborn, opts)
	seqs := append(f.publish("k1", "x"), f.publish("k2", "y")...)
	<-started
	natstest.Eventually(t, 5*time.Second, "the second key queued behind the busy worker", func() bool {
		return e.Stats().Held == 2
	})
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, consumer.ErrShutdownTimeout) {
			t.Fatalf("Close = %v, want ErrShutdownTimeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the shutdown timeout")
	}

	r := &recorder{}
	f.run(r, testOptions())
	natstest.Eventually(t, 5*time.Second, "redelivered before AckWait", func() bool { return len(r.snapshot()) == 2 })
	calls := r.snapshot()
	f.waitSettled()
	sort.Slice(calls, func(i, j int) bool { return calls[i].Seq < calls[j].Seq })
	want := []call{
		{Key: "k1", Body: "x", Seq: seqs[0], NumDelivered: 2},
		{Key: "k2", Body: "y", Seq: seqs[1], NumDelivered: 2},
	}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("calls after restart (-want +got):\n%s", diff)
	}
	if dl := f.deadLetters(); len(dl) != 0 {
		t.Errorf("a cancelled handler dead-lettered its message")
	}
}

func TestContextCancelled(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx, cancel := context.WithCancel(f.ctx)
	r := &recorder{}
	e, err := consumer.New(f.js, f.res.Consumer, r, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	f.publish("k1", "a")
	r.waitCalls(t, 1)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the context was cancelled")
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close after Run = %v", err)
	}
	if err := e.Run(f.ctx); !errors.Is(err, consumer.ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
	f.waitSettled()

	closedFirst, err := consumer.New(f.js, f.res.Consumer, r, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := closedFirst.Close(); err != nil {
		t.Errorf("Close before Run = %v", err)
	}
	if err := closedFirst.Run(f.ctx); !errors.Is(err, consumer.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}

	// Cancelled while it starts (it reads the consumer first): a requested
	// stop too, not a failure.
	cancelledFirst, err := consumer.New(f.js, f.res.Consumer, r, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	gone, cancelGone := context.WithCancel(f.ctx)
	cancelGone()
	if err := cancelledFirst.Run(gone); err != nil {
		t.Errorf("Run with a cancelled context = %v, want nil", err)
	}
}

// TestProgressKeepsSlowHandler: a handler slower than AckWait is not
// redelivered, because the engine sends progress acks.
func TestProgressKeepsSlowHandler(t *testing.T) {
	cfg := testConfig()
	cfg.AckWait = time.Second
	f := newFixture(t, cfg)
	r := &recorder{fn: func(ctx context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "slow" {
			select {
			case <-time.After(3 * cfg.AckWait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}}
	var redelivered atomic.Int64
	opts := testOptions()
	opts.Observer = &countingObserver{redeliveries: &redelivered}
	f.run(r, opts)
	f.publish("k1", "slow", "queued")
	r.waitCalls(t, 2)
	f.waitSettled()
	if n := redelivered.Load(); n != 0 {
		t.Errorf("server redelivered %d times while the engine held the messages, want 0", n)
	}
	for _, c := range r.snapshot() {
		if c.NumDelivered != 1 {
			t.Errorf("%s delivered %d times, want once", c.Body, c.NumDelivered)
		}
	}
	if n := len(r.snapshot()); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
	if ci := f.consumerInfo(); ci.NumRedelivered != 0 {
		t.Errorf("NumRedelivered = %d, want 0", ci.NumRedelivered)
	}
}

// TestAwaitGivesUpOnVanishedMessage: a nak'd message that can never come
// back (deleted from the stream) does not block its key forever.
func TestAwaitGivesUpOnVanishedMessage(t *testing.T) {
	cfg := testConfig()
	cfg.AckWait = 500 * time.Millisecond // the key gives up 2 × AckWait after the retry delay
	f := newFixture(t, cfg)
	r := &recorder{fn: func(ctx context.Context, m *consumer.Message, _ int) error {
		if string(m.Data) == "vanishing" {
			if err := f.res.Telemetry.DeleteMsg(ctx, m.StreamSeq); err != nil {
				return consumer.Permanent("test_delete_failed", err)
			}
			return errFlaky
		}
		return nil
	}}
	f.run(r, testOptions())
	f.publish("k1", "vanishing", "next")
	r.waitCalls(t, 2)
	f.waitSettled()
	var got []string
	for _, c := range r.snapshot() {
		got = append(got, c.Body)
	}
	if diff := cmp.Diff([]string{"vanishing", "next"}, got); diff != "" {
		t.Errorf("handled (-want +got):\n%s", diff)
	}
}

func TestRestartKeepsStreamsBucketsAndPosition(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{}
	e, _ := f.run(r, testOptions())
	f.publish("k1", bodies(10)...)
	r.waitCalls(t, 10)
	f.waitSettled()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.res.Baselines.Put(f.ctx, "search", []byte("v1")); err != nil {
		t.Fatal(err)
	}

	f.srv, f.url = natstest.Restart(t, f.srv)
	f.connect()
	f.provision(testConfig())

	ci := f.consumerInfo()
	if ci.Delivered.Stream != 10 || ci.AckFloor.Stream != 10 || ci.NumPending != 0 {
		t.Errorf("consumer after restart: delivered %d, ack floor %d, pending %d; want 10, 10, 0",
			ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending)
	}
	v, err := f.res.Baselines.Get(f.ctx, "search")
	if err != nil || string(v.Value()) != "v1" {
		t.Errorf("baseline after restart = %v, %v; want v1", v, err)
	}

	after := &recorder{}
	f.run(after, testOptions())
	seqs := f.publish("k1", "10", "11")
	calls := after.waitCalls(t, 2)
	f.waitSettled()
	want := []call{
		{Key: "k1", Body: "10", Seq: seqs[0], NumDelivered: 1},
		{Key: "k1", Body: "11", Seq: seqs[1], NumDelivered: 1},
	}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("calls after restart (-want +got):\n%s", diff)
	}
	if seqs[0] != 11 {
		t.Errorf("first sequence after restart = %d, want 11", seqs[0])
	}
}

// TestDeadLetterPublishFailureNaks: when the dead-letter stream cannot take
// the message, it is nak'd and dead-lettered on a later delivery, not lost.
func TestDeadLetterPublishFailureNaks(t *testing.T) {
	f := newFixture(t, testConfig())
	var broken atomic.Bool
	broken.Store(true)
	r := &recorder{fn: func(context.Context, *consumer.Message, int) error {
		return consumer.Permanent("bad_input", nil)
	}}
	opts := testOptions()
	opts.DeadLetterSubject = func(subject, reason string) string {
		if broken.Load() {
			return "nowhere.dlq" // no stream: the publish fails
		}
		return f.res.Config.DeadLetterSubject(reason)
	}
	opts.DeadLetterTimeout = 200 * time.Millisecond
	var outcomes sync.Map
	opts.Observer = observerFunc(func(o consumer.Outcome) {
		n, _ := outcomes.LoadOrStore(o, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	})
	f.run(r, opts)
	seq := f.publish("k1", "bad")[0]
	natstest.Eventually(t, 10*time.Second, "a failed dead-letter publish", func() bool {
		n, ok := outcomes.Load(consumer.OutcomeDeadLetterFailed)
		return ok && n.(*atomic.Int64).Load() > 0
	})
	broken.Store(false)
	dl := f.waitDeadLetters(1)
	f.waitSettled()
	if got := dl[0].Header.Get(consumer.HeaderOriginalSequence); got != strconv.FormatUint(seq, 10) {
		t.Errorf("dead letter of sequence %s, want %d", got, seq)
	}
}

type countingObserver struct{ redeliveries *atomic.Int64 }

func (c *countingObserver) OnOutcome(string, consumer.Outcome, time.Duration) {}
func (c *countingObserver) OnRedelivery(string)                               { c.redeliveries.Add(1) }
func (c *countingObserver) OnDeadLetter(string, string)                       {}

type observerFunc func(consumer.Outcome)

func (f observerFunc) OnOutcome(_ string, o consumer.Outcome, _ time.Duration) { f(o) }
func (f observerFunc) OnRedelivery(string)                                     {}
func (f observerFunc) OnDeadLetter(string, string)                             {}

func TestNewRejectsUnsafeConsumers(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
	}{
		{"ack none", jetstream.ConsumerConfig{Durable: "none", AckPolicy: jetstream.AckNonePolicy}},
		{"unbounded ack pending", jetstream.ConsumerConfig{Durable: "unbounded", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1}},
		{"server max deliver below engine's", jetstream.ConsumerConfig{Durable: "low", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := f.res.Telemetry.CreateOrUpdateConsumer(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			opts := testOptions()
			opts.MaxDeliver = 3
			if _, err := consumer.New(f.js, c, &recorder{}, opts); !errors.Is(err, consumer.ErrInvalidConfig) {
				t.Errorf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts consumer.Options
		ok   bool
	}{
		{"zero takes defaults", consumer.Options{}, true},
		{"negative workers", consumer.Options{Workers: -1}, false},
		{"backoff max below initial", consumer.Options{BackoffInitial: time.Second, BackoffMax: time.Millisecond}, false},
		{"negative shutdown", consumer.Options{ShutdownTimeout: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, consumer.ErrInvalidConfig)) {
				t.Errorf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestBeyondMaxDeliverDeadLettersWithoutHandler: a message whose earlier
// deliveries ended without a decision (here: handed back at shutdown) is
// dead-lettered on the delivery past MaxDeliver, not handled again.
func TestBeyondMaxDeliverDeadLettersWithoutHandler(t *testing.T) {
	f := newFixture(t, slowAckWait())
	started := make(chan struct{})
	var once sync.Once
	stubborn := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	})
	opts := testOptions()
	opts.MaxDeliver = 1
	opts.ShutdownTimeout = 100 * time.Millisecond
	e, _ := f.run(stubborn, opts)
	seq := f.publish("k1", "x")[0]
	<-started
	if err := e.Close(); !errors.Is(err, consumer.ErrShutdownTimeout) {
		t.Fatalf("Close = %v, want ErrShutdownTimeout", err)
	}

	r := &recorder{}
	opts = testOptions()
	opts.MaxDeliver = 1
	f.run(r, opts)
	dl := f.waitDeadLetters(1)
	f.waitSettled()
	if n := len(r.snapshot()); n != 0 {
		t.Errorf("handler called %d times on a message past MaxDeliver, want 0", n)
	}
	got := []string{dl[0].Header.Get(consumer.HeaderDeadLetterReason), dl[0].Header.Get(consumer.HeaderOriginalSequence), dl[0].Header.Get(consumer.HeaderNumDelivered)}
	if diff := cmp.Diff([]string{consumer.ReasonMaxDeliver, strconv.FormatUint(seq, 10), "2"}, got); diff != "" {
		t.Errorf("dead letter reason, sequence, deliveries (-want +got):\n%s", diff)
	}
}

// TestRunFailsWhenConsumerDeleted: losing the consumer stops the engine with
// an error instead of leaving it waiting silently.
func TestRunFailsWhenConsumerDeleted(t *testing.T) {
	f := newFixture(t, testConfig())
	r := &recorder{}
	_, done := f.run(r, testOptions())
	f.publish("k1", "a")
	r.waitCalls(t, 1)
	if err := f.res.Telemetry.DeleteConsumer(f.ctx, f.res.Config.Durable); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) {
			t.Errorf("Run = %v, want ErrConsumerDeleted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept going after its consumer was deleted")
	}
}
