package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// worker is one toolsentry service on a test server.
type worker struct {
	t   *testing.T
	ctx context.Context
	nc  *nats.Conn
	js  jetstream.JetStream
	svc *consumer.Service
	wg  sync.WaitGroup
}

func startWorker(t *testing.T, url string) *worker {
	t.Helper()
	w := &worker{t: t, ctx: testContext(t)}
	w.nc = natstest.Connect(t, url)
	w.js = natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	svc, err := consumer.StartService(ctx, w.nc, consumer.ServiceOptions{
		Config: testConfig(),
		Engine: testOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.svc = svc
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := svc.Run(w.ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *worker) stop() {
	if err := w.svc.Close(); err != nil {
		w.t.Errorf("closing service: %v", err)
	}
	w.wg.Wait()
}

var names events.Names

func publish(t *testing.T, js jetstream.JetStream, m events.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
		t.Fatal(err)
	}
}

var evSeq int

func meta() events.Meta {
	evSeq++
	return events.Meta{ID: fmt.Sprintf("test-%d-%d", time.Now().UnixNano(), evSeq), Source: "test", Time: time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)}
}

func observation(t *testing.T, tool, mcpTool string) events.Message {
	t.Helper()
	var raw struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if err := json.Unmarshal([]byte(mcpTool), &raw); err != nil {
		t.Fatal(err)
	}
	m, err := names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: tool, Version: "1", Tool: &events.MCPTool{Name: raw.Name, Description: raw.Description, InputSchema: raw.InputSchema}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func invocation(t *testing.T, tool, agent, args string) events.Message {
	t.Helper()
	ft, err := events.FieldTypesOf([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	m, err := names.NewInvocation(meta(), events.Invocation{ToolID: tool, AgentID: agent, ArgumentTypes: ft, Outcome: &events.Outcome{Status: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func contractMsg(t *testing.T, tool string, acc float64) events.Message {
	t.Helper()
	m, err := names.NewContract(meta(), events.Contract{ToolID: tool, Accuracy: acc, Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// streamMessages reads every message of a stream.
// streamMessages reads every message of the stream, in order. A read that
// fails is tried again for up to 20s: after a node of a cluster stops, the
// JetStream API can answer "no responders" until its leaders move, and
// what the tests check is the stream's content, not that moment.
func streamMessages(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := readStream(js, stream)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading stream %s: %v", stream, err)
		}
		t.Logf("reading stream %s: %v; trying again", stream, err)
		time.Sleep(200 * time.Millisecond)
	}
}

func readStream(js jetstream.JetStream, stream string) ([]jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	n := int(info.State.Msgs)
	if n == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []jetstream.Msg
	for len(out) < n {
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if batch.Error() != nil {
			return nil, batch.Error()
		}
	}
	return out, nil
}

func verdictsOf(t *testing.T, js jetstream.JetStream) []events.Event {
	t.Helper()
	var out []events.Event
	for _, m := range streamMessages(t, js, "TOOLSENTRY_VERDICTS") {
		ev, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("stored verdict does not decode: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func waitVerdicts(t *testing.T, js jetstream.JetStream, n int) []events.Event {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, fmt.Sprintf("%d verdicts", n), func() bool {
		return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= n
	})
	return verdictsOf(t, js)
}

func streamCount(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

func waitSettled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, "every lane settled", func() bool { return lanesSettled(js) })
}

// lanesSettled reports whether every lane of the default deployment has
// committed a checkpoint past every message it reads.
func lanesSettled(js jetstream.JetStream) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := consumer.ReadStatus(ctx, js, consumer.Config{})
	return err == nil && st.TotalLag() == 0
}

const (
	crmV1      = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}}`
	crmRenamed = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}}`
)

func TestEndToEndSilentRenameWithBadInputBetween(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	js := w.js

	publish(t, js, observation(t, "crm.lookup", crmV1))
	publish(t, js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"alice@example.com","limit":5}`))
	// Malformed input between good events: dead-lettered, and processing goes on.
	if _, err := js.Publish(context.Background(), "toolsentry.telemetry.invocation.crm=2Elookup", []byte(`{"specversion":"1.0","id":"broken"`)); err != nil {
		t.Fatal(err)
	}
	bad, err := names.Encode(events.Event{Kind: events.KindContract, ID: "bad-accuracy", Source: "test",
		Contract: &events.Contract{ToolID: "crm.lookup", Accuracy: 0.5, Determinism: "SOMETIMES"}})
	if err == nil {
		publish(t, js, bad)
	} else if _, err := js.Publish(context.Background(), "toolsentry.telemetry.contract.crm=2Elookup",
		[]byte(`{"specversion":"1.0","id":"bad-accuracy","source":"test","type":"io.toolsentry.tool.contract.v1","data":{"tool_id":"crm.lookup","accuracy":1.5,"determinism":"DETERMINISTIC"}}`)); err != nil {
		t.Fatal(err)
	}
	publish(t, js, observation(t, "crm.lookup", crmRenamed))

	verdicts := waitVerdicts(t, js, 2)
	waitSettled(t, js)
	if len(verdicts) != 2 {
		t.Fatalf("want NO_BASELINE then one drift verdict, got %d", len(verdicts))
	}
	if v := verdicts[0].SchemaVerdict; v.Verdict != guards.NoBaseline {
		t.Errorf("first verdict %s", v.Verdict)
	}
	v := verdicts[1].SchemaVerdict
	if v.Verdict != guards.DriftOnUsedFields || v.AgentID != "agent-a" || !strings.Contains(string(v.Migration), `"to":"userId"`) {
		t.Errorf("drift verdict %+v", v)
	}
	if !strings.HasPrefix(verdicts[1].Type, "io.toolsentry.verdict.schema") {
		t.Errorf("type %s", verdicts[1].Type)
	}
	// Subscribers filter by subject.
	subj, _ := names.Verdict(events.KindSchemaVerdict, "DRIFT_ON_USED_FIELDS", "crm.lookup")
	if got := streamMessages(t, js, "TOOLSENTRY_VERDICTS")[1].Subject(); got != subj {
		t.Errorf("subject %s, want %s", got, subj)
	}

	dead := streamMessages(t, js, "TOOLSENTRY_DLQ")
	if len(dead) != 2 {
		t.Fatalf("dead letters: %d, want 2", len(dead))
	}
	for _, d := range dead {
		dl, err := events.ParseDeadLetter(d.Headers())
		if err != nil {
			t.Fatal(err)
		}
		if dl.Reason == "" || dl.Subject == "" || dl.Sequence == 0 || dl.Error == "" {
			t.Errorf("dead letter lacks its reason or origin: %+v", dl)
		}
	}
	reasons := map[string]bool{}
	for _, d := range dead {
		r := d.Headers().Get(engine.HeaderDeadLetterReason)
		reasons[r] = true
		if d.Subject() != "toolsentry.dlq."+r {
			t.Errorf("dead letter subject %s, reason %s", d.Subject(), r)
		}
	}
	if !reasons["not_cloudevent"] || !reasons["schema_invalid"] {
		t.Errorf("dead-letter reasons %v, want not_cloudevent and schema_invalid", reasons)
	}

	// Privacy: the argument value reached neither state nor verdicts.
	for _, stream := range []string{"TOOLSENTRY_VERDICTS", "KV_toolsentry-usage", "KV_toolsentry-baselines", "KV_toolsentry-quality"} {
		for _, m := range streamMessages(t, js, stream) {
			if strings.Contains(string(m.Data()), "alice@example.com") {
				t.Errorf("%s holds the argument value", stream)
			}
		}
	}
}

func TestEndToEndRestartLosesNothingAndRepeatsNothing(t *testing.T) {
	srv, url := natstest.RunServer(t)
	w := startWorker(t, url)
	publish(t, w.js, observation(t, "crm.lookup", crmV1))
	publish(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`))
	drift := observation(t, "crm.lookup", crmRenamed)
	publish(t, w.js, drift)
	waitVerdicts(t, w.js, 2)
	waitSettled(t, w.js)
	w.stop()

	_, url = natstest.Restart(t, srv)
	w2 := startWorker(t, url)
	// The same input published again (an agent's retry): the telemetry stream
	// drops the duplicate id, so no verdict is repeated.
	publish(t, w2.js, drift)
	// A new observation of the drifted tool: the held drift survived the
	// restart, so it is the drift already reported (no verdict), and the
	// tool's revert is judged against the held baseline: SCHEMA_MATCH, not
	// NO_BASELINE.
	publish(t, w2.js, observation(t, "crm.lookup", crmRenamed))
	publish(t, w2.js, observation(t, "crm.lookup", crmV1))
	verdicts := waitVerdicts(t, w2.js, 3)
	waitSettled(t, w2.js)
	if len(verdicts) != 3 {
		t.Fatalf("%d verdicts, want 3", len(verdicts))
	}
	if v := verdicts[1].SchemaVerdict; v.Verdict != guards.DriftOnUsedFields || v.AgentID != "agent-a" {
		t.Errorf("before restart: %+v", v)
	}
	if v := verdicts[2].SchemaVerdict; v.Verdict != guards.SchemaMatch || v.AgentID != "" {
		t.Errorf("after restart: %+v", v)
	}
	// 5 inputs (the retry deduplicated) and the 3 quality checkpoints the
	// worker published for the versions it came to observe.
	if n := streamCount(t, w2.js, "TOOLSENTRY_TELEMETRY"); n != 8 {
		t.Errorf("telemetry stream holds %d messages, want 8 (the retry deduplicated)", n)
	}
}

func TestEndToEndSeedChainOfFive(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		publish(t, w.js, contractMsg(t, id, 0.95))
	}
	wf, err := names.NewWorkflow(meta(), []byte(`{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, w.js, wf)
	verdicts := waitVerdicts(t, w.js, 1)
	v := verdicts[0].CompositionVerdict
	if v == nil || v.Verdict != guards.CompositionDegraded || v.Directive != "HALT: Composed quality 77.38% < requirement 95.00%." {
		t.Fatalf("%+v", verdicts[0])
	}
}

// TestStartUpDeadlineDoesNotReachTheViews: startWorker starts the service
// under a 20 s deadline that is cancelled when it returns. The state views
// must go on following their buckets: a lane taken again later (a lease
// lost under load) catches them up first, and views stopped with the
// start-up context failed that forever with "view closed".
func TestStartUpDeadlineDoesNotReachTheViews(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	publish(t, w.js, observation(t, "crm.lookup", crmV1))
	publish(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`))
	publish(t, w.js, observation(t, "crm.lookup", crmRenamed))
	waitVerdicts(t, w.js, 2)
	waitSettled(t, w.js)
	// The worker wrote baselines and usage after its start-up context
	// ended; a caught-up view has seen those writes.
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	if err := w.svc.Store.CatchUp(ctx, nil); err != nil {
		t.Fatalf("Store.CatchUp after the start-up context ended: %v", err)
	}
}
