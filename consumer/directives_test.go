package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

func directivesKV(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "toolsentry-directives")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// readDirective returns the directive under key and its revision (0 when absent).
func readDirective(t *testing.T, kv jetstream.KeyValue, key string) (events.Directive, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.Directive{}, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var d events.Directive
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		t.Fatalf("directive %s: %v", key, err)
	}
	return d, e.Revision()
}

// waitDirective waits until the directive under key satisfies ok.
func waitDirective(t *testing.T, kv jetstream.KeyValue, key, what string, ok func(events.Directive) bool) events.Directive {
	t.Helper()
	var d events.Directive
	natstest.Eventually(t, 20*time.Second, key+": "+what, func() bool {
		var rev uint64
		d, rev = readDirective(t, kv, key)
		return rev > 0 && ok(d)
	})
	return d
}

const crmLimitRemoved = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}},"required":["user_id"]}}`

// TestDirectivesFollowVerdicts: the baseline is a tool-wide PROCEED; a
// rename makes the agent's directive a MIGRATE carrying the plan; a tool
// reverted to its baseline supersedes it; an unmigratable drift is a HALT;
// a degraded workflow is a HALT.
func TestDirectivesFollowVerdicts(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	kv := directivesKV(t, w.js)
	const tool, agent = "crm.lookup", "agent-a"
	toolKey, _ := events.SchemaDirectiveKey(tool, "")
	agentKey, _ := events.SchemaDirectiveKey(tool, agent)

	publish(t, w.js, observation(t, tool, crmV1))
	d := waitDirective(t, kv, toolKey, "NO_BASELINE", func(d events.Directive) bool { return d.Verdict.Name == "NO_BASELINE" })
	if d.Action != guards.ActionProceed || d.ToFingerprint == "" || d.Verdict.Sequence != 1 || d.Verdict.ManifestDigest == "" {
		t.Errorf("baseline directive %+v", d)
	}
	v1 := d.ToFingerprint

	publish(t, w.js, invocation(t, tool, agent, `{"user_id":"alice@example.com","limit":5}`))
	publish(t, w.js, observation(t, tool, crmRenamed))
	d = waitDirective(t, kv, agentKey, "drift", func(d events.Directive) bool { return d.Verdict.Name == "DRIFT_ON_USED_FIELDS" })
	if d.Action != guards.ActionMigrate || !d.Held || d.FromFingerprint != v1 || d.ToFingerprint == v1 ||
		len(d.Migration.Steps) != 1 || d.Migration.Steps[0].To != "userId" || d.AgentID != agent || d.ToolID != tool {
		t.Errorf("drift directive %+v", d)
	}

	// Back to the baseline: SCHEMA_MATCH, for no agent in particular,
	// supersedes the agent's migration to a version the tool left.
	publish(t, w.js, observation(t, tool, crmV1))
	d = waitDirective(t, kv, agentKey, "superseded", func(d events.Directive) bool { return d.SupersededBy != "" })
	if d.Action != guards.ActionProceed || d.Verdict.Name != "SCHEMA_MATCH" || d.AgentID != agent || d.ToFingerprint != v1 {
		t.Errorf("superseded directive %+v", d)
	}

	// A removed field the agent sends: nothing can migrate it.
	publish(t, w.js, observation(t, tool, crmLimitRemoved))
	d = waitDirective(t, kv, agentKey, "halt", func(d events.Directive) bool { return d.Action == guards.ActionHalt })
	if d.Verdict.Name != "DRIFT_ON_USED_FIELDS" || !strings.Contains(d.Reason, "limit") || !strings.HasPrefix(d.Directive, "HALT:") {
		t.Errorf("halt directive %+v", d)
	}

	for _, id := range []string{"a", "b", "c", "d", "e"} {
		publish(t, w.js, contractMsg(t, id, 0.95))
	}
	wf, err := names.NewWorkflow(meta(), []byte(`{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, w.js, wf)
	compKey, _ := events.CompositionDirectiveKey("etl")
	d = waitDirective(t, kv, compKey, "degraded", func(d events.Directive) bool { return d.Verdict.Name != "" })
	if d.Action != guards.ActionHalt || d.Directive != "HALT: Composed quality 77.38% < requirement 95.00%." || d.CompositionID != "etl" {
		t.Errorf("composition directive %+v", d)
	}

	// Privacy: the argument value reached no directive.
	for _, m := range streamMessages(t, w.js, "KV_toolsentry-directives") {
		if strings.Contains(string(m.Data()), "alice@example.com") {
			t.Error("a directive holds the argument value")
		}
	}
}

// TestDirectivesReplayChangesNothing: the directives lane read again from
// the start replays every verdict; each directive remembers the verdict
// sequence it follows, so no directive is written again.
func TestDirectivesReplayChangesNothing(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	kv := directivesKV(t, w.js)
	publish(t, w.js, observation(t, "crm.lookup", crmV1))
	publish(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`))
	publish(t, w.js, observation(t, "crm.lookup", crmRenamed))
	agentKey, _ := events.SchemaDirectiveKey("crm.lookup", "agent-a")
	waitDirective(t, kv, agentKey, "drift", func(d events.Directive) bool { return d.Action == guards.ActionMigrate })
	waitSettled(t, w.js)
	_, before := readDirective(t, kv, agentKey)
	w.stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The directives lane reads every verdict again from the start.
	leases, err := w.js.KeyValue(ctx, "toolsentry-leases")
	if err != nil {
		t.Fatal(err)
	}
	if err := leases.Purge(ctx, consumer.DirectivesLane); err != nil {
		t.Fatal(err)
	}
	w2 := startWorker(t, url)
	waitSettled(t, w2.js)
	if d, after := readDirective(t, kv, agentKey); after != before || d.Action != guards.ActionMigrate {
		t.Errorf("after a replay: revision %d (was %d), %+v", after, before, d)
	}
}

// TestAcceptDirectives: an operator's accept of the drifted version,
// applied by the tool's lane, releases the hold on the agent's directive
// but keeps its migration (the agent still sends the old field); the
// tool-wide directive becomes the accept's SCHEMA_MATCH; a second accept
// changes nothing.
func TestAcceptDirectives(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	kv := directivesKV(t, w.js)
	publish(t, w.js, observation(t, "crm.lookup", crmV1))
	publish(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`))
	publish(t, w.js, observation(t, "crm.lookup", crmRenamed))
	agentKey, _ := events.SchemaDirectiveKey("crm.lookup", "agent-a")
	toolKey, _ := events.SchemaDirectiveKey("crm.lookup", "")
	d := waitDirective(t, kv, agentKey, "drift", func(d events.Directive) bool { return d.Action == guards.ActionMigrate && d.Held })

	accept := func() {
		m, err := names.NewOperatorAction(meta(), events.KindBaselineAccepted,
			events.OperatorAction{ToolID: "crm.lookup", Fingerprint: d.ToFingerprint, Operator: "ana", Reason: "test"})
		if err != nil {
			t.Fatal(err)
		}
		publish(t, w.js, m)
	}
	accept()
	got := waitDirective(t, kv, agentKey, "accepted", func(d events.Directive) bool { return d.AcceptedFingerprint != "" })
	if got.Held || got.AcceptedFingerprint != d.ToFingerprint || got.Action != guards.ActionMigrate || len(got.Migration.Steps) != 1 || got.Verdict != d.Verdict {
		t.Errorf("accepted directive %+v", got)
	}
	tool := waitDirective(t, kv, toolKey, "the accept's SCHEMA_MATCH", func(d events.Directive) bool { return d.Verdict.Name == string(guards.SchemaMatch) })
	if tool.ToFingerprint != d.ToFingerprint || tool.Action != guards.ActionProceed {
		t.Errorf("tool-wide directive after accept %+v", tool)
	}
	_, rev := readDirective(t, kv, agentKey)
	accept()
	waitHandled(t, w.js)
	waitSettled(t, w.js)
	if _, after := readDirective(t, kv, agentKey); after != rev {
		t.Errorf("a second accept rewrote the agent's directive (revision %d, was %d)", after, rev)
	}
}

// TestDirectivesDeadLetterJunkVerdicts: a message on a verdict subject that
// is no verdict is dead-lettered with its reason; the next verdict is
// still projected.
func TestDirectivesDeadLetterJunkVerdicts(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	kv := directivesKV(t, w.js)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.js.Publish(ctx, "toolsentry.verdicts.schema.schema_match.junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	publish(t, w.js, observation(t, "crm.lookup", crmV1))
	toolKey, _ := events.SchemaDirectiveKey("crm.lookup", "")
	waitDirective(t, kv, toolKey, "baseline", func(d events.Directive) bool { return d.Verdict.Name == "NO_BASELINE" })
	var dead []jetstream.Msg
	natstest.Eventually(t, 10*time.Second, "a dead letter", func() bool {
		dead = streamMessages(t, w.js, "TOOLSENTRY_DLQ")
		return len(dead) == 1
	})
	h := dead[0].Headers()
	if h.Get(engine.HeaderDeadLetterReason) != "not_cloudevent" || h.Get(events.HeaderOriginalStream) != "TOOLSENTRY_VERDICTS" || string(dead[0].Data()) != "not json" {
		t.Errorf("dead letter %v %q", h, dead[0].Data())
	}
	if _, rev := readDirective(t, kv, "schema.junk"); rev != 0 {
		t.Error("junk became a directive")
	}
}

// TestDirectivesIgnoreARepeatedVerdict: a SCHEMA_MATCH after a SCHEMA_MATCH
// tells agents nothing new, so the directive in force is not rewritten (its
// watchers are not woken); a verdict that changes the instruction is. The
// core no longer publishes a match per repeated observation, but a verdict
// stream written by an earlier version holds them: they are published here
// as it wrote them.
func TestDirectivesIgnoreARepeatedVerdict(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startWorker(t, url)
	kv := directivesKV(t, w.js)
	const tool = "crm.lookup"
	toolKey, _ := events.SchemaDirectiveKey(tool, "")

	publish(t, w.js, observation(t, tool, crmV1))
	nb := waitDirective(t, kv, toolKey, "NO_BASELINE", func(d events.Directive) bool { return d.Verdict.Name == "NO_BASELINE" })
	fp := nb.ToFingerprint
	m := guards.EvaluateSchema(guards.ToolSchema{ToolID: tool, Version: "1", SchemaFingerprint: fp}, &guards.SchemaBaseline{BaselineFingerprint: fp})
	match := func(i int) events.Message {
		msg, err := names.NewSchemaVerdict(events.SchemaVerdict{
			Verdict: m.Verdict, Directive: m.Directive, ManifestDigest: m.ManifestDigest, ToolID: tool, Version: "1",
			BaselineFingerprint: fp, CurrentFingerprint: fp, Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`),
			Migration: json.RawMessage(`{"steps":[],"blocked":null}`), GuardVersion: guards.Version,
			InputEventID: fmt.Sprintf("earlier-%d", i), InputSubject: "toolsentry.telemetry.schema.crm=2Elookup", InputSequence: uint64(100 + i),
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	publish(t, w.js, match(0))
	first := waitDirective(t, kv, toolKey, "SCHEMA_MATCH", func(d events.Directive) bool { return d.Verdict.Name == "SCHEMA_MATCH" })
	_, rev := readDirective(t, kv, toolKey)
	for i := range 3 {
		publish(t, w.js, match(i+1))
	}
	publish(t, w.js, observation(t, tool, crmLimitRemoved)) // no usage known: DRIFT_ON_UNUSED_FIELDS
	d := waitDirective(t, kv, toolKey, "the drift", func(d events.Directive) bool { return d.Verdict.Name == "DRIFT_ON_UNUSED_FIELDS" })
	if d.Verdict.Sequence <= first.Verdict.Sequence {
		t.Errorf("drift directive %+v", d)
	}
	// The three repeated matches wrote nothing: the drift is the next
	// revision of the bucket, which holds this key alone.
	if _, after := readDirective(t, kv, toolKey); after != rev+1 {
		t.Errorf("the drift's directive is revision %d, the match's %d: the repeated matches were written", after, rev)
	}
}
