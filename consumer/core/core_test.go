package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// harness feeds structured CloudEvents through Decode and the core into a
// MemState, as the live worker does, and keeps every verdict.
type harness struct {
	t     testing.TB
	core  *Core
	state *MemState
	seq   uint64
	all   []events.Event
	// onVerdict, if set, sees every verdict message as the core wrote it.
	onVerdict func(events.Message)
	// fresh applies every input with a new core: no cache of parsed tools,
	// fingerprints or diffs survives from one input to the next.
	fresh bool
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, core: New(Options{QualityEvery: 4}), state: NewMemState()}
}

// send decodes the event on its subject, applies it at the next sequence
// and returns its verdicts.
func (h *harness) send(kind, key, typ, data string) []events.Event {
	h.t.Helper()
	h.seq++
	return h.sendAt(h.seq, kind, key, typ, data)
}

func (h *harness) sendAt(seq uint64, kind, key, typ, data string) []events.Event {
	h.t.Helper()
	tok, err := events.KeyToken(key)
	if err != nil {
		h.t.Fatal(err)
	}
	subject := "toolsentry.telemetry." + kind + "." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"ev-%d","source":"test","type":%q,"time":"2026-10-03T10:00:00Z","datacontenttype":"application/json","data":%s}`, seq, typ, data)
	return h.apply(seq, subject, nil, []byte(body))
}

// apply applies one message at seq; the telemetry it publishes (quality
// checkpoints) is appended to the stream, as the live worker's is, and
// applied next, its verdicts returned with the message's.
func (h *harness) apply(seq uint64, subject string, header map[string][]string, body []byte) []events.Event {
	h.t.Helper()
	ev, err := events.Decode(subject, header, body)
	if err != nil {
		h.t.Fatalf("decode %s: %v", body, err)
	}
	if h.fresh {
		h.core = New(h.core.opts)
	}
	eff, err := h.core.Apply(h.state, Input{Event: ev, Subject: subject, Seq: seq})
	if err != nil {
		h.t.Fatalf("apply %s: %v", body, err)
	}
	if err := h.state.Store(eff.Writes); err != nil {
		h.t.Fatal(err)
	}
	var out []events.Event
	for _, m := range eff.Verdicts {
		if h.onVerdict != nil {
			h.onVerdict(m)
		}
		v, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			h.t.Fatalf("verdict does not decode: %v", err)
		}
		if m.ID != v.ID || m.Header["Nats-Msg-Id"][0] != v.ID {
			h.t.Fatalf("verdict message id %q, event id %q", m.ID, v.ID)
		}
		out = append(out, v)
	}
	h.all = append(h.all, out...)
	for _, m := range eff.Telemetry {
		h.seq++
		out = append(out, h.apply(h.seq, m.Subject, m.Header, m.Data)...)
	}
	return out
}

func (h *harness) observe(tool, version, mcpTool string) []events.Event {
	h.t.Helper()
	return h.send("schema", tool, events.TypeSchemaObserved, fmt.Sprintf(`{"tool_id":%q,"version":%q,"tool":%s}`, tool, version, mcpTool))
}

func (h *harness) invoke(tool, agent, rest string) []events.Event {
	h.t.Helper()
	data := fmt.Sprintf(`{"tool_id":%q,"agent_id":%q%s}`, tool, agent, rest)
	return h.send("invocation", tool, events.TypeInvocation, data)
}

func schemaVerdicts(t *testing.T, evs []events.Event) []*events.SchemaVerdict {
	t.Helper()
	var out []*events.SchemaVerdict
	for _, e := range evs {
		if e.SchemaVerdict == nil {
			t.Fatalf("not a schema verdict: %+v", e)
		}
		out = append(out, e.SchemaVerdict)
	}
	return out
}

const (
	crmV1 = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"The user's id."},"limit":{"type":"string"},"include_deleted":{"type":"boolean","default":false}},"required":["user_id"]}}`
	// the seed's silent rename
	crmRenamed = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"userId":{"type":"string","description":"The user's id."},"limit":{"type":"string"},"include_deleted":{"type":"boolean","default":false}},"required":["userId"]}}`
	// the seed's type coercion ambiguity
	crmTyped = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"The user's id."},"limit":{"type":"integer"},"include_deleted":{"type":"boolean","default":false}},"required":["user_id"]}}`
	// the seed's default value shift
	crmDefault = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"The user's id."},"limit":{"type":"string"},"include_deleted":{"type":"boolean","default":true}},"required":["user_id"]}}`
	// drift on a field nobody uses
	crmExtra = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"The user's id."},"limit":{"type":"string"},"include_deleted":{"type":"boolean","default":false},"region":{"type":"string"}},"required":["user_id"]}}`
)

func TestSeedSchemaScenarios(t *testing.T) {
	tests := []struct {
		name      string
		v2        string
		args      string
		affected  []string
		migration string // substring of the migration JSON
		payload   string
		migrated  string
	}{
		{"silent rename", crmRenamed, `{"user_id":"u-7","limit":"5"}`, []string{"user_id"}, `"op":"move","path":"user_id","reason":"field user_id was renamed to userId","to":"userId"`, `{"user_id":"u-7","limit":"5"}`, `{"limit":"5","userId":"u-7"}`},
		{"type change", crmTyped, `{"user_id":"u-7","limit":"5"}`, []string{"limit"}, `"op":"convert","path":"limit"`, `{"user_id":"u-7","limit":"5"}`, `{"limit":5,"user_id":"u-7"}`},
		{"default shift", crmDefault, `{"user_id":"u-7"}`, []string{"include_deleted"}, `"op":"add_if_absent","path":"include_deleted"`, `{"user_id":"u-7"}`, `{"include_deleted":false,"user_id":"u-7"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			first := schemaVerdicts(t, h.observe("crm.lookup", "2.1", crmV1))
			if len(first) != 1 || first[0].Verdict != guards.NoBaseline || first[0].AgentID != "" {
				t.Fatalf("first observation: %+v", first)
			}
			if got := h.invoke("crm.lookup", "agent-a", `,"arguments":`+tt.args+`,"outcome":{"status":"ok"}`); len(got) != 0 {
				t.Fatalf("an invocation that fits the baseline got verdicts: %+v", got)
			}
			if got := h.observe("crm.lookup", "2.1", crmV1); len(got) != 0 {
				t.Fatalf("same schema again: %+v, want no verdict", got)
			}
			drift := schemaVerdicts(t, h.observe("crm.lookup", "2.1", tt.v2))
			if len(drift) != 1 {
				t.Fatalf("want one verdict for the one agent, got %+v", drift)
			}
			v := drift[0]
			if v.Verdict != guards.DriftOnUsedFields || v.AgentID != "agent-a" || !strings.HasPrefix(v.Directive, "HALT: Drift on used fields") {
				t.Fatalf("drift verdict %+v", v)
			}
			var affected []string
			if err := json.Unmarshal(v.Affected, &affected); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.affected, affected); diff != "" {
				t.Errorf("affected (-want +got):\n%s", diff)
			}
			if !strings.Contains(string(v.Migration), tt.migration) {
				t.Errorf("migration %s lacks %s", v.Migration, tt.migration)
			}
			var plan toolschema.MigrationPlan
			if err := json.Unmarshal(v.Migration, &plan); err != nil {
				t.Fatal(err)
			}
			var payload any
			if err := json.Unmarshal([]byte(tt.payload), &payload); err != nil {
				t.Fatal(err)
			}
			out, err := plan.Apply(payload)
			if err != nil {
				t.Fatalf("applying the verdict's migration: %v", err)
			}
			if got, _ := json.Marshal(out); string(got) != tt.migrated {
				t.Errorf("migrated payload %s, want %s", got, tt.migrated)
			}
			// The baseline is held; the same drift observed again is
			// counted, not reported again ...
			rec, _ := h.state.Baseline("crm.lookup")
			if !rec.Held || rec.Baseline.Fingerprint != v.BaselineFingerprint {
				t.Fatalf("baseline not held: %+v", rec)
			}
			if got := h.observe("crm.lookup", "2.1", tt.v2); len(got) != 0 {
				t.Fatalf("the held drift observed again: %+v, want no verdict", got)
			}
			// ... and the agent, still sending its old payload, is not told
			// again per call.
			if got := h.invoke("crm.lookup", "agent-a", `,"arguments":`+tt.args); len(got) != 0 {
				t.Errorf("told again on the next call: %+v", got)
			}
		})
	}
}

func TestDriftOnUnusedFieldsAdvancesTheBaseline(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)
	got := schemaVerdicts(t, h.observe("crm.lookup", "1", crmExtra))
	if len(got) != 1 || got[0].Verdict != guards.DriftOnUnusedFields {
		t.Fatalf("%+v", got)
	}
	rec, _ := h.state.Baseline("crm.lookup")
	if rec.Held || rec.Baseline.Fingerprint != got[0].CurrentFingerprint {
		t.Fatalf("baseline did not advance: %+v", rec)
	}
	if got := h.observe("crm.lookup", "1", crmExtra); len(got) != 0 {
		t.Fatalf("after advancing: %+v, want no verdict", got)
	}
}

func TestDriftWithoutKnownUsageIsOneVerdictWithoutAgent(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	got := schemaVerdicts(t, h.observe("crm.lookup", "1", crmRenamed))
	if len(got) != 1 || got[0].AgentID != "" || got[0].Verdict != guards.DriftOnUnusedFields {
		t.Fatalf("%+v", got)
	}
}

func TestAgentStillSendingRenamedFieldIsToldOncePerPair(t *testing.T) {
	h := newHarness(t)
	// toolsentry first sees the tool after the rename; the agent was
	// written for the old payload.
	h.observe("crm.lookup", "3", crmRenamed)
	first := schemaVerdicts(t, h.invoke("crm.lookup", "agent-b", `,"arguments":{"user_id":"u-1"}`))
	if len(first) != 1 || first[0].Verdict != guards.DriftOnUsedFields || first[0].AgentID != "agent-b" {
		t.Fatalf("%+v", first)
	}
	if !strings.Contains(string(first[0].Migration), `"to":"userId"`) {
		t.Errorf("migration %s", first[0].Migration)
	}
	for range 3 {
		if got := h.invoke("crm.lookup", "agent-b", `,"arguments":{"user_id":"u-2"}`); len(got) != 0 {
			t.Fatalf("told again: %+v", got)
		}
	}
	// Another agent with the same problem is told too.
	if got := h.invoke("crm.lookup", "agent-c", `,"arguments":{"user_id":"u-3"}`); len(got) != 1 {
		t.Fatalf("agent-c: %+v", got)
	}
}

func TestAgentIntegratedAgainstAnOldFingerprint(t *testing.T) {
	h := newHarness(t)
	v1 := schemaVerdicts(t, h.observe("crm.lookup", "1", crmV1))[0].CurrentFingerprint
	h.observe("crm.lookup", "1", crmRenamed) // no usage known: advances the baseline
	got := schemaVerdicts(t, h.invoke("crm.lookup", "agent-d", `,"arguments":{"user_id":"u"},"schema_fingerprint":"`+v1+`"`))
	if len(got) != 1 || got[0].Verdict != guards.DriftOnUsedFields || got[0].BaselineFingerprint != v1 {
		t.Fatalf("%+v", got)
	}
	if got := h.invoke("crm.lookup", "agent-d", `,"arguments":{"user_id":"u"},"schema_fingerprint":"`+v1+`"`); len(got) != 0 {
		t.Fatalf("told twice: %+v", got)
	}
}

func TestRedeliveryChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"},"outcome":{"status":"ok"}`)
	seq := h.seq
	q1, _ := h.state.Outcomes("crm.lookup")
	// The same event at the same stream sequence: counted once.
	if got := h.sendAt(seq, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"agent-a","arguments":{"user_id":"u"},"outcome":{"status":"ok"}}`); len(got) != 0 {
		t.Fatal(got)
	}
	q2, _ := h.state.Outcomes("crm.lookup")
	if q1.Calls != 1 || q2.Calls != 1 {
		t.Fatalf("calls %d then %d, want 1 and 1", q1.Calls, q2.Calls)
	}
	if got := h.sendAt(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":`+crmV1+`}`); len(got) != 0 {
		t.Fatalf("a redelivered observation republished: %+v", got)
	}
}

func contract(tool string, acc float64, det, hash string) string {
	return fmt.Sprintf(`{"tool_id":%q,"accuracy":%v,"determinism":%q,"output_schema_hash":%q,"expected_input_schema_hash":%q}`, tool, acc, det, hash, hash)
}

func TestSeedFiveToolChain(t *testing.T) {
	h := newHarness(t)
	tools := []string{"a", "b", "c", "d", "e"}
	for _, id := range tools {
		h.send("contract", id, events.TypeContract, contract(id, 0.95, "DETERMINISTIC", "h"))
	}
	wf := `{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`
	got := h.send("workflow", "etl", events.TypeWorkflow, wf)
	if len(got) != 1 || got[0].CompositionVerdict == nil {
		t.Fatalf("%+v", got)
	}
	v := got[0].CompositionVerdict
	seed := guards.EvaluateComposition(guards.ToolComposition{
		CompositionID: "etl", WorkflowQualityRequirement: 0.95,
		Tools: []guards.ToolQuality{
			{ToolID: "a", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"},
			{ToolID: "b", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"},
			{ToolID: "c", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"},
			{ToolID: "d", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"},
			{ToolID: "e", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"},
		},
	}, guards.CompositionPolicy{RequireSchemaCompatibility: true})
	if v.Verdict != seed.Verdict || v.ComposedQuality != seed.ComposedQuality || v.Directive != seed.Directive || v.ManifestDigest != seed.ManifestDigest {
		t.Fatalf("verdict %+v\nseed %+v", v, seed)
	}
	if v.Directive != "HALT: Composed quality 77.38% < requirement 95.00%." {
		t.Errorf("directive %q", v.Directive)
	}
	// A contract that changes nothing a subscriber acts on publishes nothing.
	if got := h.send("contract", "c", events.TypeContract, contract("c", 0.95, "DETERMINISTIC", "h")); len(got) != 0 {
		t.Errorf("unchanged contract republished: %+v", got)
	}
	// A contract that changes the composed quality publishes a new verdict.
	got = h.send("contract", "c", events.TypeContract, contract("c", 0.5, "DETERMINISTIC", "h"))
	if len(got) != 1 || got[0].CompositionVerdict.ComposedQuality >= v.ComposedQuality {
		t.Fatalf("%+v", got)
	}
	// A broken edge halts it as the seed does.
	got = h.send("contract", "c", events.TypeContract, contract("c", 0.5, "DETERMINISTIC", "other"))
	if len(got) != 1 || got[0].CompositionVerdict.Verdict != guards.SemanticIncompatible {
		t.Fatalf("%+v", got)
	}
}

func TestWorkflowWaitsForContracts(t *testing.T) {
	h := newHarness(t)
	wf := `{"composition_id":"w","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["x","y"]}}`
	if got := h.send("workflow", "w", events.TypeWorkflow, wf); len(got) != 0 {
		t.Fatalf("verdict without contracts: %+v", got)
	}
	rec, _ := h.state.Workflow("w")
	if !strings.Contains(rec.Pending, `"x"`) {
		t.Errorf("pending %q", rec.Pending)
	}
	if got := h.send("contract", "x", events.TypeContract, contract("x", 0.9, "DETERMINISTIC", "")); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
	got := h.send("contract", "y", events.TypeContract, contract("y", 0.9, "NON_DETERMINISTIC", ""))
	if len(got) != 1 || got[0].CompositionVerdict.Verdict != guards.CompositionDegraded || !strings.Contains(got[0].CompositionVerdict.Directive, "non-deterministic") {
		t.Fatalf("%+v", got)
	}
}

func TestMeasuredQualityReachesWorkflows(t *testing.T) {
	h := newHarness(t) // QualityEvery: 4
	h.send("contract", "x", events.TypeContract, contract("x", 0.99, "DETERMINISTIC", ""))
	h.send("contract", "y", events.TypeContract, contract("y", 0.99, "DETERMINISTIC", ""))
	wf := `{"composition_id":"w","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"tools":{"x":{"determinism":"DETERMINISTIC"},"y":{"accuracy":0.99,"determinism":"DETERMINISTIC"}},"structure":{"chain":["x","y"]}}`
	// x declared without accuracy: its quality is measured; none yet.
	if got := h.send("workflow", "w", events.TypeWorkflow, wf); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
	var verdicts []events.Event
	for i := range 8 {
		status := "ok"
		if i%2 == 0 {
			status = "error"
		}
		verdicts = append(verdicts, h.invoke("x", "agent", `,"used_fields":["q"],"outcome":{"status":"`+status+`"}`)...)
	}
	if len(verdicts) != 1 {
		t.Fatalf("want one verdict when x's measured quality first decides, got %d: %+v", len(verdicts), verdicts)
	}
	v := verdicts[0].CompositionVerdict
	if v.Verdict != guards.CompositionDegraded || v.ComposedQualityLower == nil {
		t.Fatalf("%+v", v)
	}
}

func TestBadInputIsAnError(t *testing.T) {
	h := newHarness(t)
	body := `{"specversion":"1.0","id":"x","source":"s","type":"io.toolsentry.workflow.declared.v1","data":{"composition_id":"w","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"tools":{},"structure":{"conditional":[{"p":0.2,"then":"a"},{"p":0.2,"then":"b"}]}}}`
	ev, err := events.Decode("toolsentry.telemetry.workflow.w", nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.core.Apply(h.state, Input{Event: ev, Seq: 1})
	if err == nil {
		t.Fatal("probabilities summing to 0.4 accepted")
	}
	if _, ok := events.ReasonFor(err); !ok {
		t.Errorf("error %v maps to no dead-letter reason", err)
	}
}
