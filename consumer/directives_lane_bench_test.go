package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// BenchmarkDirectivesLane is the directives projector through the server:
// 2,000 verdicts over 200 tools (each a new version, so each writes its
// tool's directive) stored first, then a worker started, timed until its
// directives lane has applied them all. workers=1 is the projector one
// call at a time; the ratio of the two, measured in one run, is what
// projecting several tools at once buys.
func BenchmarkDirectivesLane(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchDirectivesLane(b, workers, 2000, 200) })
	}
}

func benchDirectivesLane(b *testing.B, workers, n, tools int) {
	cfg := testConfig()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		nc, _, res, pub := benchDeployment(b, cfg)
		ctx := context.Background()
		batch := pub.NewBatch()
		for v := range n {
			tool := fmt.Sprintf("svc.tool%03d", v%tools)
			fp := fmt.Sprintf("sha256:%064x", v)
			m := guards.EvaluateSchema(guards.ToolSchema{ToolID: tool, Version: "1", SchemaFingerprint: fp}, nil)
			msg, err := names.NewSchemaVerdict(events.SchemaVerdict{
				Verdict: m.Verdict, Directive: m.Directive, ManifestDigest: m.ManifestDigest, ToolID: tool, Version: "1",
				CurrentFingerprint: fp, Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`),
				Migration: json.RawMessage(`{"steps":[],"blocked":null}`), GuardVersion: guards.Version,
				InputEventID: fmt.Sprintf("bench-%d", v), InputSubject: "toolsentry.telemetry.schema.0." + tool, InputSequence: uint64(v + 1),
			}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			if err := batch.Publish(ctx, msg.Subject, msg.ID, nats.Header(msg.Header), msg.Data); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := batch.Wait(ctx); err != nil {
			b.Fatal(err)
		}

		b.StartTimer()
		svc, err := consumer.StartService(ctx, nc, consumer.ServiceOptions{Config: cfg, Engine: testOptions(),
			Directives: consumer.DirectivesOptions{Workers: workers}})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = svc.Run(ctx) }()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			left, err := consumer.Unapplied(ctx, res)
			if err != nil {
				b.Fatal(err)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d verdicts not projected after 2 minutes", left)
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StopTimer()
		if err := svc.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "verdicts/s")
}
