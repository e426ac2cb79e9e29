package engine

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkBacklog drains one pre-filled backlog (TOOLSENTRY_ENGINE_BENCH_N
// messages of 512 B, default 100k, over 1000 keys) four ways in the same
// run and reports msgs/s for each (one iteration = the whole backlog):
//
//	ordered   a bare ordered consumer (the replay ceiling)
//	explicit  a bare durable consumer acking every message (the drain ceiling)
//	engine    this engine, trivial handler, ordered consumer + checkpoints
//	ackall    the alternative shape: a durable consumer with AckAll on the
//	          last message of every batch (what committing the applied
//	          prefix by ack would cost), trivial handling inline
//
//	go test -run '^$' -bench Backlog -benchtime 3x ./consumer/engine/
func BenchmarkBacklog(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("TOOLSENTRY_ENGINE_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	_, js := engineServer(b)
	engineStreams(b, js)
	fillBacklog(b, js, n)
	ctx := context.Background()
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "msgs/s")
	}

	b.Run("ordered", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			c, err := js.OrderedConsumer(ctx, "T", jetstream.OrderedConsumerConfig{})
			if err != nil {
				b.Fatal(err)
			}
			drainConsume(b, c, n, func(jetstream.Msg, int) {})
		}
		report(b, start)
	})
	b.Run("explicit", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			c, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: benchName("explicit"), AckPolicy: jetstream.AckExplicitPolicy})
			if err != nil {
				b.Fatal(err)
			}
			drainConsume(b, c, n, func(m jetstream.Msg, _ int) { _ = m.Ack() })
		}
		report(b, start)
	})
	b.Run("engine", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			e, err := New(js, Source{Stream: "T", FilterSubjects: []string{"t.>"}}, newMemCheckpointer(0),
				BatchFunc(func(context.Context, string, []*Message) []error { return nil }), Options{})
			if err != nil {
				b.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- e.Run(ctx) }()
			for e.Stats().Applied < uint64(n) {
				time.Sleep(time.Millisecond)
			}
			if err := e.Close(); err != nil {
				b.Fatal(err)
			}
			<-errc
		}
		report(b, start)
	})
	b.Run("ackall", func(b *testing.B) {
		start := time.Now()
		for range b.N {
			c, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: benchName("ackall"), AckPolicy: jetstream.AckAllPolicy})
			if err != nil {
				b.Fatal(err)
			}
			drainConsume(b, c, n, func(m jetstream.Msg, seen int) {
				if seen%512 == 0 || seen == n {
					_ = m.Ack()
				}
			})
		}
		report(b, start)
	})
}

var benchConsumers atomic.Int64

// benchName is a durable name never used before in this process: a
// benchmark function runs more than once (b.N = 1 first).
func benchName(prefix string) string {
	return prefix + strconv.FormatInt(benchConsumers.Add(1), 10)
}

// fillBacklog publishes n messages of 512 B on t.a.k<i%1000>.
func fillBacklog(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	body := make([]byte, 512)
	for i := range n {
		if _, err := js.PublishAsync("t.a.k"+strconv.Itoa(i%1000), body); err != nil {
			b.Fatal(err)
		}
		if i%4096 == 4095 {
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("backlog publish did not complete")
	}
}

// drainConsume consumes c until it saw n messages, calling f on each with
// its count.
func drainConsume(b *testing.B, c jetstream.Consumer, n int, f func(jetstream.Msg, int)) {
	b.Helper()
	var seen atomic.Int64
	done := make(chan struct{})
	cc, err := c.Consume(func(m jetstream.Msg) {
		s := int(seen.Add(1))
		f(m, s)
		if s == n {
			close(done)
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("drained %d of %d", seen.Load(), n)
	}
	cc.Stop()
}
