package consumer_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/publisher"
)

// Example runs the runtime on an embedded server: provisioning, emitting
// telemetry, and one lane's engine whose handler rejects one message as bad
// input, which lands in the dead-letter stream while the key goes on.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "toolsentry-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: dir, Port: -1})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	res, err := consumer.Provision(ctx, js, consumer.Config{})
	if err != nil {
		panic(err)
	}

	pub, err := publisher.New(nc, publisher.Options{})
	if err != nil {
		panic(err)
	}
	em := publisher.NewEmitter(pub, res.Config.TelemetryPrefix())
	for i, body := range []string{"first", "second", "bad", "third"} {
		if err := em.Emit(ctx, "toolsentry.telemetry.invocation.search", fmt.Sprintf("ce-%d", i), nil, []byte(body)); err != nil {
			panic(err)
		}
	}
	if _, err := em.Flush(ctx); err != nil {
		panic(err)
	}

	// One lane (tool partition 0) read from its lease's checkpoint.
	lane := engine.ToolLane(0)
	filters, err := res.Config.Layout().Filters(lane)
	if err != nil {
		panic(err)
	}
	lease, err := engine.AcquireLease(ctx, res.Leases, lane.Key(), "example", 10*time.Second)
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	h := engine.BatchFunc(func(ctx context.Context, key string, msgs []*engine.Message) []error {
		res := make([]error, len(msgs))
		for i, m := range msgs {
			if string(m.Data) == "bad" {
				res[i] = consumer.Permanent("example_bad_input", nil)
				continue
			}
			fmt.Println(key, m.StreamSeq, string(m.Data))
			if string(m.Data) == "third" {
				close(done)
			}
		}
		return res
	})
	e, err := engine.New(js, engine.Source{Stream: res.Config.TelemetryStream(), FilterSubjects: filters}, lease, h,
		engine.Options{DeadLetter: func(_ *engine.Message, reason string) string { return res.Config.DeadLetterSubject(reason) }})
	if err != nil {
		panic(err)
	}
	go func() { _ = e.Run(ctx) }()
	<-done
	if err := e.Close(); err != nil {
		panic(err)
	}
	info, err := res.DLQ.Info(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters:", info.State.Msgs)
	// Output:
	// search 1 first
	// search 2 second
	// search 4 third
	// dead letters: 1
}

func ExampleConfig_DeadLetterSubject() {
	cfg := consumer.Config{Prefix: "acme"}
	fmt.Println(cfg.TelemetryStream(), cfg.DLQStream())
	fmt.Println(cfg.DeadLetterSubject("schema_invalid"))
	fmt.Println(cfg.DeadLetterSubject("Not A Token"))
	// Output:
	// ACME_TELEMETRY ACME_DLQ
	// acme.dlq.schema_invalid
	// acme.dlq.permanent
}
