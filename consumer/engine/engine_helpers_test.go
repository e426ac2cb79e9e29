package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// engineServer starts an embedded JetStream server for one test and
// returns a JetStream client connected to it.
func engineServer(tb testing.TB) (*server.Server, jetstream.JetStream) {
	tb.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(s.Shutdown)
	return s, connectJS(tb, s.ClientURL())
}

// connectJS returns a JetStream client of the server at url, closed when
// the test ends.
func connectJS(tb testing.TB, url string) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// engineStreams creates the input stream T (subjects t.>) and the
// dead-letter stream D (subjects toolsentry.dlq.>).
func engineStreams(tb testing.TB, js jetstream.JetStream) {
	tb.Helper()
	ctx := context.Background()
	for _, c := range []jetstream.StreamConfig{{Name: "T", Subjects: []string{"t.>"}}, {Name: "D", Subjects: []string{"toolsentry.dlq.>"}}} {
		if _, err := js.CreateStream(ctx, c); err != nil {
			tb.Fatal(err)
		}
	}
}

// publishKeys publishes n messages per key on t.<kind>.<key>, interleaved
// across keys, with body "<key>-<i>".
func publishKeys(tb testing.TB, js jetstream.JetStream, kind string, keys []string, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		for _, k := range keys {
			if _, err := js.Publish(ctx, "t."+kind+"."+k, fmt.Appendf(nil, "%s-%d", k, i)); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// memCheckpointer is an in-memory Checkpointer.
type memCheckpointer struct {
	mu      sync.Mutex
	cp      uint64
	commits int
	lost    chan struct{}
	fail    error // returned by Commit when set
}

func newMemCheckpointer(cp uint64) *memCheckpointer {
	return &memCheckpointer{cp: cp, lost: make(chan struct{})}
}

func (c *memCheckpointer) Checkpoint() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cp
}

func (c *memCheckpointer) Commit(_ context.Context, cp uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.lost:
		return ErrLost
	default:
	}
	if c.fail != nil {
		return c.fail
	}
	if cp < c.cp {
		return fmt.Errorf("checkpoint went back from %d to %d", c.cp, cp)
	}
	c.cp = cp
	c.commits++
	return nil
}

func (c *memCheckpointer) Lost() <-chan struct{} { return c.lost }

// runEngine starts e.Run in the background; the returned func waits for
// Run's result.
func runEngine(tb testing.TB, e *Engine) func() error {
	tb.Helper()
	errc := make(chan error, 1)
	go func() { errc <- e.Run(context.Background()) }()
	tb.Cleanup(func() { e.Close() })
	return func() error {
		select {
		case err := <-errc:
			return err
		case <-time.After(30 * time.Second):
			tb.Fatal("Run did not return")
			return nil
		}
	}
}

// waitFor polls cond until it holds or 20s passed.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder is a BatchHandler that records what it was handed.
type recorder struct {
	mu    sync.Mutex
	seen  map[string][]string // key → bodies in handling order
	calls [][]*Message
	fn    func(ctx context.Context, key string, msgs []*Message) []error // optional behaviour
}

func newRecorder() *recorder { return &recorder{seen: map[string][]string{}} }

func (r *recorder) HandleBatch(ctx context.Context, key string, msgs []*Message) []error {
	var res []error
	if r.fn != nil {
		res = r.fn(ctx, key, msgs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, cloneMsgs(msgs))
	for i, m := range msgs {
		if res == nil || res[i] == nil {
			r.seen[key] = append(r.seen[key], string(m.Data))
		}
	}
	return res
}

func cloneMsgs(msgs []*Message) []*Message { return append([]*Message(nil), msgs...) }

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.seen {
		n += len(v)
	}
	return n
}

// deadLetters fetches every message of the dead-letter stream D.
func deadLetters(tb testing.TB, js jetstream.JetStream, want int) []jetstream.Msg {
	tb.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, "D", jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	var out []jetstream.Msg
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		b, err := c.Fetch(want-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
	}
	if len(out) != want {
		tb.Fatalf("dead letters: got %d, want %d", len(out), want)
	}
	return out
}
