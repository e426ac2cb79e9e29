package consumer_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/publisher"
)

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDeployment starts a server for one benchmark and provisions cfg on
// it: the connection, its JetStream context, the resources and a
// publisher of up to 4096 messages in flight.
func benchDeployment(b *testing.B, cfg consumer.Config) (*nats.Conn, jetstream.JetStream, *consumer.Resources, *publisher.Publisher) {
	b.Helper()
	_, url := natstest.RunServer(b)
	nc := natstest.Connect(b, url)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	res, err := consumer.Provision(context.Background(), js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	pub, err := publisher.New(nc, publisher.Options{MaxPending: 4096})
	if err != nil {
		b.Fatal(err)
	}
	return nc, js, res, pub
}

// BenchmarkReplay measures the audit over a recorded mix (file storage):
// the telemetry of events=N generated events and the verdicts the core
// derives from them, as the live service would have stored them. It
// reports inputs replayed per second, including loading the verdicts.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{20000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) { benchReplay(b, n) })
	}
}

func benchReplay(b *testing.B, n int) {
	_, js, res, pub := benchDeployment(b, consumer.Config{})
	ctx := context.Background()
	mix, err := benchmix.New(benchmix.Options{Events: n})
	if err != nil {
		b.Fatal(err)
	}
	c := core.New(core.Options{Names: names})
	st := core.NewMemState()
	batch := pub.NewBatch()
	flush := func() {
		if _, err := batch.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		batch = pub.NewBatch()
	}
	verdicts := 0
	layout := res.Config.Layout()
	for i, ev := range mix.All() {
		if err := batch.Publish(ctx, ev.Subject, ev.ID, ev.Header, ev.Data); err != nil {
			b.Fatal(err)
		}
		e, err := names.Decode(ev.Subject, ev.Header, ev.Data)
		if err != nil {
			b.Fatal(err)
		}
		stored, ok := layout.StoredSubject(ev.Subject) // what the replay reads
		if !ok {
			b.Fatalf("event %s on %s: not a telemetry subject", ev.ID, ev.Subject)
		}
		eff, err := c.Apply(st, core.Input{Event: e, Subject: stored, Seq: uint64(i + 1)})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Store(eff.Writes); err != nil {
			b.Fatal(err)
		}
		for _, v := range eff.Verdicts {
			if err := batch.Publish(ctx, v.Subject, v.ID, nats.Header(v.Header), v.Data); err != nil {
				b.Fatal(err)
			}
			verdicts++
		}
		if batch.Len() >= 2048 {
			flush()
		}
	}
	flush()
	// As if workers had handled every input: each telemetry lane's lease
	// released with its checkpoint past the stream's last message.
	info, err := res.Telemetry.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, lane := range res.Config.Layout().Lanes() {
		lease, err := engine.AcquireLease(ctx, res.Leases, lane.Key(), "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx, info.State.LastSeq+1); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := cpuTime(b)
	for b.Loop() {
		rep, err := consumer.Replay(testContext(b), js, consumer.ReplayOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Matched != verdicts || len(rep.Differences) != 0 || rep.InputsReplayed != n {
			if len(rep.Differences) > 0 {
				b.Logf("first difference: %+v", rep.Differences[0])
			}
			b.Fatalf("matched %d of %d verdicts, %d differences, %d inputs", rep.Matched, verdicts, len(rep.Differences), rep.InputsReplayed)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	// CPU time tells more than wall time on a shared machine: that of the
	// whole process, the embedded server's included.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n*b.N), "cpu-µs/event")
	b.ReportMetric(float64(verdicts), "verdicts")
}
