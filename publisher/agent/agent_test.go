package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

const (
	crmV1      = `{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}`
	crmRenamed = `{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}`
	crmNoLimit = `{"type":"object","properties":{"userId":{"type":"string"}},"required":["userId"]}`
)

// loop is an embedded server with the real toolsentry service consuming.
type loop struct {
	t   *testing.T
	ctx context.Context
	srv *consumer.Server
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	res *consumer.Resources
}

func startLoop(t *testing.T) *loop {
	t.Helper()
	l := &loop{t: t, ctx: zerolog.New(zerolog.NewTestWriter(t)).WithContext(context.Background())}
	l.srv, l.url = natstest.RunServer(t)
	l.nc = natstest.Connect(t, l.url)
	l.js = natstest.JetStream(t, l.url)
	ctx, cancel := context.WithTimeout(l.ctx, 20*time.Second)
	defer cancel()
	svc, err := consumer.StartService(ctx, natstest.Connect(t, l.url), consumer.ServiceOptions{
		Config: consumer.Config{LeaseTTL: 3 * time.Second},
		Engine: engine.Options{Workers: 4, BackoffInitial: 20 * time.Millisecond, BackoffMax: 80 * time.Millisecond, ShutdownTimeout: 3 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	l.res = svc.Resources
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := svc.Run(l.ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = svc.Close()
		wg.Wait()
	})
	return l
}

// startBare is an embedded server with the resources provisioned and no
// service: for tests of the client alone.
func startBare(t *testing.T) *loop {
	t.Helper()
	l := &loop{t: t, ctx: zerolog.New(zerolog.NewTestWriter(t)).WithContext(context.Background())}
	l.srv, l.url = natstest.RunServer(t)
	l.nc = natstest.Connect(t, l.url)
	l.js = natstest.JetStream(t, l.url)
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	res, err := consumer.Provision(ctx, l.js, consumer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l.res = res
	return l
}

func (l *loop) agent(id string, opts agent.AgentOptions) *agent.Agent {
	l.t.Helper()
	opts.AgentID = id
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	a, err := agent.NewAgent(ctx, l.nc, opts)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

var seq int

func (l *loop) publish(m events.Message, err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
	defer cancel()
	if _, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}, jetstream.WithMsgID(m.ID)); err != nil {
		l.t.Fatal(err)
	}
}

func meta() events.Meta {
	seq++
	return events.Meta{ID: fmt.Sprintf("t-%d-%d", time.Now().UnixNano(), seq), Source: "test", Time: time.Now().UTC()}
}

// observe publishes the tool's schema as a tools/list would show it.
func (l *loop) observe(tool, inputSchema string) {
	l.t.Helper()
	var names events.Names
	l.publish(names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: tool, Version: "1",
		Tool: &events.MCPTool{Name: tool, InputSchema: json.RawMessage(inputSchema)}}))
}

// waitGuard polls the agent's Guard until ok accepts its answer.
func waitGuard(t *testing.T, a *agent.Agent, tool, payload, what string, ok func(json.RawMessage, error) bool) (json.RawMessage, error) {
	t.Helper()
	var out json.RawMessage
	var err error
	natstest.Eventually(t, 20*time.Second, what, func() bool {
		out, err = a.Guard(context.Background(), tool, json.RawMessage(payload))
		return ok(out, err)
	})
	return out, err
}

// TestAgentAdaptsToDriftWithoutRestart is the loop of issue 10: the agent
// sends user_id; the tool renames it userId; the verdict arrives; the
// agent's next Guard sends userId. Then the tool drops limit, which the
// agent sends: Guard returns the HALT with the verdict's digest.
func TestAgentAdaptsToDriftWithoutRestart(t *testing.T) {
	l := startLoop(t)
	a := l.agent("billing-7", agent.AgentOptions{})
	const tool = "crm.lookup"
	const args = `{"user_id":"alice@example.com","limit":5}`

	l.observe(tool, crmV1)
	if err := a.Emit(agent.Invocation{Tool: tool, Arguments: json.RawMessage(args), Outcome: &events.Outcome{Status: "ok"}}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Guard(l.ctx, tool, json.RawMessage(args))
	if err != nil || string(out) != args {
		t.Fatalf("before any drift: Guard = %s, %v; want the payload as given", out, err)
	}
	natstest.Eventually(t, 10*time.Second, "invocation published", func() bool { return a.Stats().Published == 1 })
	stored, err := l.res.Telemetry.GetLastMsgForSubject(l.ctx, "toolsentry.telemetry.invocation.0.crm=2Elookup") // stored in partition 0 of 1
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored.Data), "alice") || !strings.Contains(string(stored.Data), `"user_id":"string"`) {
		t.Errorf("published invocation %s: want field types, no values", stored.Data)
	}

	l.observe(tool, crmRenamed)
	out, _ = waitGuard(t, a, tool, args, "Guard migrates user_id to userId", func(out json.RawMessage, err error) bool {
		return err == nil && strings.Contains(string(out), `"userId"`)
	})
	if string(out) != `{"limit":5,"userId":"alice@example.com"}` {
		t.Errorf("migrated payload %s", out)
	}
	dec, err := a.Decide(l.ctx, tool, json.RawMessage(args))
	if err != nil || !dec.Migrated || dec.Directive == nil || dec.Directive.Action != guards.ActionMigrate ||
		dec.Directive.Verdict.Name != "DRIFT_ON_USED_FIELDS" || !dec.Staleness.Live {
		t.Errorf("Decide = %+v, %v", dec, err)
	}
	// A payload that already speaks the new schema goes as it is.
	if out, err := a.Guard(l.ctx, tool, json.RawMessage(`{"userId":"u"}`)); err != nil || string(out) != `{"userId":"u"}` {
		t.Errorf("new-style payload: %s, %v", out, err)
	}
	// Another agent, which never sent user_id, is not migrated.
	b := l.agent("search-1", agent.AgentOptions{})
	if d, err := b.Decide(l.ctx, tool, json.RawMessage(args)); err != nil || d.Migrated {
		t.Errorf("other agent: %+v, %v", d, err)
	}

	l.observe(tool, crmNoLimit)
	_, err = waitGuard(t, a, tool, args, "Guard halts", func(_ json.RawMessage, err error) bool { return err != nil })
	var halt *agent.HaltError
	if !errors.As(err, &halt) || !errors.Is(err, agent.ErrHalt) {
		t.Fatalf("Guard = %v, want a *HaltError", err)
	}
	if halt.Tool != tool || halt.Agent != "billing-7" || len(halt.ManifestDigest()) != 64 || !strings.HasPrefix(halt.Directive.Directive, "HALT: Drift on used fields") {
		t.Errorf("halt %+v", halt)
	}
	if !strings.Contains(err.Error(), halt.ManifestDigest()) {
		t.Errorf("message %q lacks the digest", err)
	}

	// Bad JSON is the caller's error, not a HALT.
	if _, err := a.Guard(l.ctx, "other.tool", json.RawMessage(`{`)); err != nil {
		t.Errorf("no directive: Guard does not parse, got %v", err)
	}
}

// TestAgentMigrationSurvivesBaselineAccept: accepting the renamed schema as
// the baseline keeps the agent's migration (it still sends user_id), and a
// new observation of the accepted version (a repeat: no verdict) keeps it too.
func TestAgentMigrationSurvivesBaselineAccept(t *testing.T) {
	l := startLoop(t)
	a := l.agent("billing-7", agent.AgentOptions{})
	const tool, args = "crm.lookup", `{"user_id":"u"}`
	l.observe(tool, crmV1)
	if err := a.Emit(agent.Invocation{Tool: tool, Arguments: json.RawMessage(args)}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "invocation published", func() bool { return a.Stats().Published == 1 })
	l.observe(tool, crmRenamed)
	waitGuard(t, a, tool, args, "migration", func(out json.RawMessage, err error) bool { return err == nil && string(out) == `{"userId":"u"}` })
	dec, _ := a.Decide(l.ctx, tool, json.RawMessage(args))

	var names events.Names
	l.publish(names.NewOperatorAction(meta(), events.KindBaselineAccepted,
		events.OperatorAction{ToolID: tool, Fingerprint: dec.Directive.ToFingerprint, Operator: "ana"}))
	natstest.Eventually(t, 10*time.Second, "accept seen by the agent", func() bool {
		d, err := a.Decide(l.ctx, tool, json.RawMessage(args))
		return err == nil && d.Directive.AcceptedFingerprint != "" && !d.Directive.Held && string(d.Arguments) == `{"userId":"u"}`
	})
	// An agent that integrated against the accepted version is not migrated.
	c := l.agent("billing-7", agent.AgentOptions{Fingerprints: map[string]string{tool: dec.Directive.ToFingerprint}})
	if d, err := c.Decide(l.ctx, tool, json.RawMessage(args)); err != nil || d.Applies || d.Migrated {
		t.Errorf("integrated against the new version: %+v, %v", d, err)
	}
}

// TestAgentWorkflowRefusesDegraded: the seed's chain of five 0.95 tools
// against a 0.95 requirement is refused before it runs; a single tool is
// not.
func TestAgentWorkflowRefusesDegraded(t *testing.T) {
	l := startLoop(t)
	a := l.agent("etl-runner", agent.AgentOptions{})
	var names events.Names
	if _, err := a.Workflow(l.ctx, "etl"); !errors.Is(err, agent.ErrNoDirective) {
		t.Errorf("before any verdict: %v, want ErrNoDirective", err)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		l.publish(names.NewContract(meta(), events.Contract{ToolID: id, Accuracy: 0.95, Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"}))
	}
	l.publish(names.NewWorkflow(meta(), []byte(`{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`)))
	l.publish(names.NewWorkflow(meta(), []byte(`{"composition_id":"one","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a"]}}`)))
	var err error
	var d events.Directive
	natstest.Eventually(t, 20*time.Second, "composition verdict", func() bool {
		d, err = a.Workflow(l.ctx, "etl")
		return !errors.Is(err, agent.ErrNoDirective)
	})
	var halt *agent.HaltError
	if !errors.As(err, &halt) || halt.Composition != "etl" || d.Verdict.Name != "COMPOSITION_DEGRADED" ||
		halt.Directive.Directive != "HALT: Composed quality 77.38% < requirement 95.00%." {
		t.Errorf("Workflow(etl) = %+v, %v", d, err)
	}
	natstest.Eventually(t, 20*time.Second, "single-tool verdict", func() bool {
		d, err = a.Workflow(l.ctx, "one")
		return err == nil && d.Verdict.Name == "SINGLE_TOOL"
	})
}

// TestAgentEmitNeverBlocksWithNATSDown: with the server gone, Emit returns
// at once for every invocation, the queue holds a bounded number, the rest
// are dropped and counted, and Close gives up at its deadline and says how
// many were lost.
func TestAgentEmitNeverBlocksWithNATSDown(t *testing.T) {
	l := startBare(t)
	a := l.agent("billing-7", agent.AgentOptions{QueueSize: 64, BatchSize: 16, Publisher: publisher.Options{AckTimeout: time.Minute}})
	if !a.Staleness().Live {
		t.Error("view not live with the server up")
	}
	l.srv.Shutdown()
	natstest.Eventually(t, 10*time.Second, "disconnected", func() bool { return !l.nc.IsConnected() })

	const n = 10_000
	var queued, full int
	for i := range n {
		err := a.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: json.RawMessage(fmt.Sprintf(`{"user_id":"u%d"}`, i))})
		switch {
		case err == nil:
			queued++
		case errors.Is(err, agent.ErrQueueFull):
			full++
		default:
			t.Fatalf("Emit %d: %v", i, err)
		}
	}
	st := a.Stats()
	if queued+full != n || st.Emitted != uint64(queued) || st.Dropped != uint64(full) || full < n-64-16-256 || st.Queued > 64 {
		t.Errorf("after %d emits with NATS down: %d queued, %d refused, stats %+v", n, queued, full, st)
	}
	if a.Staleness().Live {
		t.Error("view live with the server down")
	}
	if _, err := a.Guard(l.ctx, "crm.lookup", json.RawMessage(`{"user_id":"u"}`)); err != nil {
		t.Errorf("Guard with NATS down answers from its view: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := a.Close(ctx); !errors.Is(err, publisher.ErrNotAcked) {
		t.Errorf("Close = %v, want ErrNotAcked", err)
	}
	st = a.Stats()
	if st.Published != 0 || st.Dropped+st.Failed != n {
		t.Errorf("after Close: %+v", st)
	}
	if err := a.Emit(agent.Invocation{Tool: "crm.lookup"}); !errors.Is(err, agent.ErrClosed) {
		t.Errorf("Emit after Close = %v, want ErrClosed", err)
	}
	if err := a.Close(ctx); !errors.Is(err, publisher.ErrNotAcked) {
		t.Errorf("second Close = %v, want the same error", err)
	}
}

func TestAgentOptionsAndBadInput(t *testing.T) {
	l := startBare(t)
	if _, err := agent.NewAgent(l.ctx, l.nc, agent.AgentOptions{}); !errors.Is(err, publisher.ErrInvalidConfig) {
		t.Errorf("no agent id: %v", err)
	}
	if _, err := agent.NewAgent(l.ctx, l.nc, agent.AgentOptions{AgentID: "a", QueueSize: -1}); !errors.Is(err, publisher.ErrInvalidConfig) {
		t.Errorf("negative queue: %v", err)
	}
	other, _ := events.NewNames("other")
	if _, err := agent.NewAgent(l.ctx, l.nc, agent.AgentOptions{AgentID: "a", Names: other}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("no bucket: %v", err)
	}
	a := l.agent("a", agent.AgentOptions{})
	if err := a.Emit(agent.Invocation{Tool: "t", Arguments: json.RawMessage(`[1]`)}); err == nil || errors.Is(err, agent.ErrQueueFull) {
		t.Errorf("arguments not an object: %v", err)
	}
	if err := a.Emit(agent.Invocation{Arguments: json.RawMessage(`{}`)}); err == nil {
		t.Error("no tool: accepted")
	}
	if st := a.Stats(); st.Emitted != 0 || st.Dropped != 0 {
		t.Errorf("caller errors counted: %+v", st)
	}
}

// TestAgentHook: the proxy's switches over one MIGRATE and one HALT
// directive.
func TestAgentHook(t *testing.T) {
	l := startBare(t)
	kv, err := l.js.KeyValue(l.ctx, "toolsentry-directives")
	if err != nil {
		t.Fatal(err)
	}
	put := func(tool string, d events.Directive) {
		t.Helper()
		d.Guard, d.ToolID, d.AgentID = events.DirectiveSchema, tool, "proxy-1"
		key, _ := d.Key()
		b, _ := json.Marshal(d)
		if _, err := kv.Put(l.ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put("rename", events.Directive{Action: guards.ActionMigrate, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		Migration: toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{{Op: toolschema.OpMove, Path: "user_id", To: "userId"}}}})
	put("gone", events.Directive{Action: guards.ActionHalt, Directive: "HALT: Drift on used fields ['limit']. Apply migration.",
		Verdict: events.VerdictRef{Name: "DRIFT_ON_USED_FIELDS", ManifestDigest: strings.Repeat("d", 64)}})
	a := l.agent("proxy-1", agent.AgentOptions{})
	args := json.RawMessage(`{"user_id":"u"}`)
	for _, c := range []struct {
		apply, halt bool
		tool        string
		want        string // arguments, or "error"
	}{
		{true, true, "rename", `{"userId":"u"}`},
		{true, true, "gone", "error"},
		{true, false, "rename", `{"userId":"u"}`},
		{true, false, "gone", `{"user_id":"u"}`},
		{false, true, "rename", `{"user_id":"u"}`},
		{false, true, "gone", "error"},
		{false, false, "gone", `{"user_id":"u"}`},
	} {
		out, err := a.Hook(c.apply, c.halt)(l.ctx, c.tool, args)
		got := string(out)
		if err != nil {
			got = "error"
			if !strings.Contains(err.Error(), "HALT: Drift on used fields ['limit']") || !strings.Contains(err.Error(), strings.Repeat("d", 64)) {
				t.Errorf("hook error %q does not name the directive and digest", err)
			}
		}
		if got != c.want {
			t.Errorf("Hook(apply=%v, halt=%v)(%s) = %s, want %s", c.apply, c.halt, c.tool, got, c.want)
		}
	}
}
