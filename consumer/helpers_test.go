package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/publisher"
)

// fixture is one embedded server with the toolsentry resources provisioned
// for tests: MaxDeliver 3, and the shortest lease TTL.
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
	return consumer.Config{MaxDeliver: 3, LeaseTTL: 3 * time.Second, MemberTTL: time.Second}
}

func testOptions() engine.Options {
	return engine.Options{
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
