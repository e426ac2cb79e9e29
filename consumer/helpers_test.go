package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/publisher"
)

// fixture is one embedded server with the toolsentry resources provisioned
// for tests: MaxDeliver 3, and an AckWait long enough that a loaded machine
// does not expire messages the engine keeps alive.
type fixture struct {
	t   *testing.T
	ctx context.Context
	srv *consumer.Server
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	res *consumer.Resources
	pub *publisher.Publisher
}

func testConfig() consumer.Config {
	return consumer.Config{AckWait: 3 * time.Second, MaxDeliver: 3, MaxAckPending: 512}
}

func testOptions() consumer.Options {
	return consumer.Options{
		Workers:         8,
		BackoffInitial:  20 * time.Millisecond,
		BackoffMax:      80 * time.Millisecond,
		HandlerTimeout:  5 * time.Second,
		ShutdownTimeout: 3 * time.Second,
	}
}

func testContext(t testing.TB) context.Context {
	l := zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger()
	return l.WithContext(context.Background())
}

func newFixture(t *testing.T, cfg consumer.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: testContext(t)}
	f.srv, f.url = natstest.RunServer(t)
	f.connect()
	f.provision(cfg)
	return f
}

func (f *fixture) connect() {
	f.t.Helper()
	f.nc = natstest.Connect(f.t, f.url)
	js, err := jetstream.New(f.nc)
	if err != nil {
		f.t.Fatal(err)
	}
	f.js = js
	f.pub, err = publisher.New(f.nc, publisher.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) provision(cfg consumer.Config) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	res, err := consumer.Provision(ctx, f.js, cfg)
	if err != nil {
		f.t.Fatalf("Provision: %v", err)
	}
	f.res = res
}

// subject is a telemetry subject of kind invocation for key.
func (f *fixture) subject(key string) string {
	return f.res.Config.TelemetryPrefix() + ".invocation." + key
}

// publish stores messages synchronously, in order, and returns their
// stream sequences.
func (f *fixture) publish(key string, bodies ...string) []uint64 {
	f.t.Helper()
	seqs := make([]uint64, 0, len(bodies))
	for _, b := range bodies {
		ack, err := f.pub.PublishSync(f.ctx, f.subject(key), fmt.Sprintf("%s-%s", key, b), nats.Header{"X-Test": []string{"yes"}}, []byte(b))
		if err != nil {
			f.t.Fatalf("publish: %v", err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// run starts an engine with h; it is closed when the test ends. The
// returned channel yields Run's result.
func (f *fixture) run(h consumer.Handler, opts consumer.Options) (*consumer.Engine, <-chan error) {
	f.t.Helper()
	e, err := consumer.New(f.js, f.res.Consumer, h, opts)
	if err != nil {
		f.t.Fatalf("New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(f.ctx) }()
	f.t.Cleanup(func() { _ = e.Close() })
	return e, done
}

func (f *fixture) consumerInfo() *jetstream.ConsumerInfo {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	ci, err := f.res.Consumer.Info(ctx)
	if err != nil {
		f.t.Fatalf("consumer info: %v", err)
	}
	return ci
}

// settled reports whether the consumer has handled every message of its
// stream (consumerSettled).
func (f *fixture) settled() bool {
	info := f.res.Consumer.CachedInfo()
	return consumerSettled(f.js, info.Stream, info.Name)
}

func (f *fixture) waitSettled() {
	f.t.Helper()
	natstest.Eventually(f.t, 10*time.Second, "consumer settled", f.settled)
}

// deadLetters returns the messages of the DLQ stream.
func (f *fixture) deadLetters() []*jetstream.RawStreamMsg {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	info, err := f.res.DLQ.Info(ctx)
	if err != nil {
		f.t.Fatalf("dlq info: %v", err)
	}
	var out []*jetstream.RawStreamMsg
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := f.res.DLQ.GetMsg(ctx, seq)
		if err != nil {
			f.t.Fatalf("dlq get %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

func (f *fixture) waitDeadLetters(n int) []*jetstream.RawStreamMsg {
	f.t.Helper()
	var dl []*jetstream.RawStreamMsg
	natstest.Eventually(f.t, 10*time.Second, fmt.Sprintf("%d dead letters", n), func() bool {
		dl = f.deadLetters()
		return len(dl) >= n
	})
	return dl
}

// call is one Handle invocation seen by a recorder.
type call struct {
	Key          string
	Body         string
	Seq          uint64
	NumDelivered uint64
}

// recorder is a handler that records its calls and delegates the result to
// fn (nil: success).
type recorder struct {
	mu    sync.Mutex
	calls []call
	fn    func(ctx context.Context, m *consumer.Message, attempt int) error
}

func (r *recorder) Handle(ctx context.Context, m *consumer.Message) error {
	r.mu.Lock()
	attempt := 1
	for _, c := range r.calls {
		if c.Seq == m.StreamSeq {
			attempt++
		}
	}
	r.calls = append(r.calls, call{Key: m.Key, Body: string(m.Data), Seq: m.StreamSeq, NumDelivered: m.NumDelivered})
	r.mu.Unlock()
	if r.fn == nil {
		return nil
	}
	return r.fn(ctx, m, attempt)
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) count(pred func(call) bool) int {
	n := 0
	for _, c := range r.snapshot() {
		if pred(c) {
			n++
		}
	}
	return n
}

func (r *recorder) waitCalls(t *testing.T, n int) []call {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, fmt.Sprintf("%d handler calls", n), func() bool {
		return len(r.snapshot()) >= n
	})
	return r.snapshot()
}
