package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/publisher"
)

// BenchmarkEngine measures events/s through the engine with file storage,
// 512-byte events over 1024 keys: handler=noop is the runtime alone
// (consume, order per key, ack); handler=passthrough republishes each event
// to the verdict stream and waits for its PubAck before the ack, the floor
// that the full guard pipeline is compared with.
func BenchmarkEngine(b *testing.B) {
	for _, handler := range []string{"noop", "passthrough"} {
		for _, workers := range []int{8, 32} {
			b.Run(fmt.Sprintf("handler=%s/workers=%d", handler, workers), func(b *testing.B) {
				benchEngine(b, handler, workers)
			})
		}
	}
}

func benchEngine(b *testing.B, handler string, workers int) {
	const keys, size = 1024, 512
	_, url := natstest.RunServer(b)
	nc := natstest.Connect(b, url)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	res, err := consumer.Provision(ctx, js, consumer.Config{MaxAckPending: 4096})
	if err != nil {
		b.Fatal(err)
	}
	pub, err := publisher.New(nc, publisher.Options{MaxPending: 4096})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	batch := pub.NewBatch()
	for i := range b.N {
		subject := fmt.Sprintf("%s.invocation.tool%04d", res.Config.TelemetryPrefix(), i%keys)
		if err := batch.Publish(ctx, subject, fmt.Sprintf("ev-%d", i), nil, body); err != nil {
			b.Fatal(err)
		}
		if batch.Len() == 2048 {
			if _, err := batch.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		b.Fatal(err)
	}

	var h consumer.Handler = consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil })
	if handler == "passthrough" {
		verdicts := res.Config.VerdictsPrefix()
		h = consumer.Passthrough(pub, func(m *consumer.Message) string { return verdicts + ".bench." + m.Key })
	}
	var handled atomic.Int64
	all := make(chan struct{})
	counting := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if err := h.Handle(ctx, m); err != nil {
			return err
		}
		if handled.Add(1) == int64(b.N) {
			close(all)
		}
		return nil
	})
	e, err := consumer.New(js, res.Consumer, counting, consumer.Options{Workers: workers})
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	go func() { _ = e.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
