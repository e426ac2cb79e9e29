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

// BenchmarkPartitioned measures events/s through partitioned workers on one
// server, with the passthrough handler (a PubAck per event before the ack),
// 512-byte events over 1024 keys: partitions=1 is the single engine,
// partitions=N/members=1 one process running every partition (the cost of
// each partition consumer delivering the whole stream), members=N the
// work shared by N in-process workers, each with its own connection.
func BenchmarkPartitioned(b *testing.B) {
	for _, c := range []struct{ partitions, members int }{{1, 1}, {3, 1}, {3, 3}} {
		b.Run(fmt.Sprintf("partitions=%d/members=%d", c.partitions, c.members), func(b *testing.B) {
			benchPartitioned(b, c.partitions, c.members)
		})
	}
}

func benchPartitioned(b *testing.B, partitions, members int) {
	const keys, size = 1024, 512
	_, url := natstest.RunServer(b)
	nc := natstest.Connect(b, url)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cfg := consumer.Config{MaxAckPending: 4096, Partitions: partitions, MemberTTL: time.Second, PinnedTTL: 3 * time.Second}
	res, err := consumer.Provision(ctx, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	pub, err := publisher.New(nc, publisher.Options{MaxPending: 4096})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
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

	var handled atomic.Int64
	all := make(chan struct{})
	verdicts := res.Config.VerdictsPrefix()
	type runner interface {
		Run(context.Context) error
		Close() error
	}
	var runners []runner
	for m := range members {
		wnc := natstest.Connect(b, url)
		wjs, err := jetstream.New(wnc)
		if err != nil {
			b.Fatal(err)
		}
		wres, err := consumer.Provision(ctx, wjs, cfg)
		if err != nil {
			b.Fatal(err)
		}
		wpub, err := publisher.New(wnc, publisher.Options{MaxPending: 4096})
		if err != nil {
			b.Fatal(err)
		}
		h := consumer.Passthrough(wpub, func(m *consumer.Message) string { return verdicts + ".bench." + m.Key })
		counting := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			if err := h.Handle(ctx, m); err != nil {
				return err
			}
			if handled.Add(1) == int64(b.N) {
				close(all)
			}
			return nil
		})
		opts := consumer.Options{Workers: 32}
		if partitions == 1 {
			e, err := consumer.New(wjs, wres.Consumer, counting, opts)
			if err != nil {
				b.Fatal(err)
			}
			runners = append(runners, e)
			continue
		}
		g, err := consumer.NewGroup(wjs, wres, counting, fmt.Sprintf("m%d", m), opts)
		if err != nil {
			b.Fatal(err)
		}
		runners = append(runners, g)
	}

	b.ResetTimer()
	start := time.Now()
	for _, r := range runners {
		go func() { _ = r.Run(ctx) }()
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, r := range runners {
		_ = r.Close()
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}
