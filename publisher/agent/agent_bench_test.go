package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// benchAgent is an agent on an embedded server whose directive for tool
// "rename" is a MIGRATE of user_id to userId.
func benchAgent(b *testing.B, opts agent.AgentOptions) *agent.Agent {
	b.Helper()
	_, url := natstest.RunServer(b)
	js := natstest.JetStream(b, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := consumer.Provision(ctx, js, consumer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	d := events.Directive{Guard: events.DirectiveSchema, ToolID: "rename", AgentID: "bench", Action: guards.ActionMigrate,
		Migration: toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{{Op: toolschema.OpMove, Path: "user_id", To: "userId"}}}}
	key, _ := d.Key()
	data, _ := json.Marshal(d)
	if _, err := res.Directives.Put(ctx, key, data); err != nil {
		b.Fatal(err)
	}
	// Tool "judged": the same MIGRATE, about the tool's current version,
	// whose input schema the guard judges the payload by.
	const input = `{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"},"options":{"type":"object","properties":{"include_archived":{"type":"boolean"},"fields":{"type":"array","items":{"type":"string"}}}}},"required":["userId"]}`
	rec := `{"tool_id":"judged","baseline":{"fingerprint":"sha256:v1","version":"1","tool":{"name":"judged","inputSchema":{"type":"object"}}},` +
		`"current":{"fingerprint":"sha256:v2","version":"1","tool":{"name":"judged","inputSchema":` + input + `}},"held":true,"known":[]}`
	if _, err := res.Baselines.Put(ctx, "judged", []byte(rec)); err != nil {
		b.Fatal(err)
	}
	d.ToolID, d.ToFingerprint = "judged", "sha256:v2"
	key, _ = d.Key()
	data, _ = json.Marshal(d)
	if _, err := res.Directives.Put(ctx, key, data); err != nil {
		b.Fatal(err)
	}
	opts.AgentID = "bench"
	a, err := agent.NewAgent(ctx, natstest.Connect(b, url), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// BenchmarkGuard is the cost Guard adds to a call: a map lookup under
// PROCEED, a decode, migration and encode under MIGRATE, and with the
// tool's current schema known the payload's check against it as well
// (judged: migrated, then the result checked).
func BenchmarkGuard(b *testing.B) {
	a := benchAgent(b, agent.AgentOptions{})
	args := json.RawMessage(`{"user_id":"u-42","limit":5,"options":{"include_archived":false,"fields":["name","email"]}}`)
	ctx := context.Background()
	for _, c := range []struct{ name, tool string }{{"action=PROCEED", "other"}, {"action=MIGRATE", "rename"}, {"action=MIGRATE,judged", "judged"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Guard(ctx, c.tool, args); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// BenchmarkEmit is the cost Emit adds to a call (building the event, field
// types only, and queueing it), with the publishes running behind.
func BenchmarkEmit(b *testing.B) {
	a := benchAgent(b, agent.AgentOptions{QueueSize: 1 << 16})
	args := json.RawMessage(`{"user_id":"u-42","limit":5,"options":{"include_archived":false,"fields":["name","email"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: args, Outcome: &events.Outcome{Status: "ok"}}); err != nil && err != agent.ErrQueueFull {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "emits/s")
	st := a.Stats()
	b.ReportMetric(float64(st.Dropped), "dropped")
}
