package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/schemas"
)

// TestEveryVerdictMatchesItsSchema drives the core to every verdict it
// writes, schema verdicts from observations and from invocations, with an
// agent and without, and composition verdicts of every name, with bounds
// and with observed runs; and validates each one's data against its JSON
// Schema. Encode accepts a plain schema verdict without decoding it (see
// events.Encode), so this, besides the harness's own Decode of every
// verdict, is what shows that the verdicts the core builds are valid.
func TestEveryVerdictMatchesItsSchema(t *testing.T) {
	h := newHarness(t)
	seen := map[string]bool{}
	h.onVerdict = func(m events.Message) {
		addr, err := events.ParseSubject(m.Subject)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatalf("%s: %v", m.Data, err)
		}
		dec := json.NewDecoder(bytes.NewReader(body.Data))
		dec.UseNumber()
		var data map[string]any
		if err := dec.Decode(&data); err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate(addr.Kind.Schema(), data); err != nil {
			t.Errorf("%s verdict does not match %s: %v\n%s", addr.Verdict, addr.Kind.Schema(), err, body.Data)
		}
		seen[addr.Kind.String()+" "+addr.Verdict] = true
		if _, ok := data["agent_id"]; ok {
			seen[addr.Kind.String()+" with an agent"] = true
		} else {
			seen[addr.Kind.String()+" without an agent"] = true
		}
		if s, _ := data["input_subject"].(string); strings.Contains(s, ".invocation.") {
			seen[addr.Kind.String()+" from an invocation"] = true
		}
		for _, f := range []string{"composed_quality_lower", "confidence", "failure_modes", "observed"} {
			if _, ok := data[f]; ok {
				seen[addr.Kind.String()+" with "+f] = true
			}
		}
	}

	// Schema verdicts from observations.
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`)
	h.observe("crm.lookup", "1", crmV1)
	h.observe("crm.lookup", "1", crmExtra)
	h.observe("crm.lookup", "2", crmTyped)
	h.observe("crm.lookup", "1", crmExtra) // back to the baseline: SCHEMA_MATCH
	h.observe("idle.tool", "1", crmV1)
	h.observe("idle.tool", "2", crmRenamed)
	// From invocations: an agent integrated against an old fingerprint,
	// and one sending a field the tool no longer declares.
	v1 := schemaVerdicts(t, h.observe("old.tool", "1", crmV1))[0].CurrentFingerprint
	h.observe("old.tool", "2", crmRenamed)
	h.invoke("old.tool", "agent-d", `,"arguments":{"user_id":"u"},"schema_fingerprint":"`+v1+`"`)
	h.observe("new.tool", "3", crmRenamed)
	h.invoke("new.tool", "agent-b", `,"arguments":{"user_id":"u-1"}`)

	// Composition verdicts.
	h.send("contract", "solo", events.TypeContract, contract("solo", 0.9, "DETERMINISTIC", ""))
	h.send("workflow", "one", events.TypeWorkflow, `{"composition_id":"one","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["solo"]}}`)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		h.send("contract", id, events.TypeContract, contract(id, 0.95, "DETERMINISTIC", "h"))
	}
	h.send("workflow", "etl", events.TypeWorkflow, `{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`)
	h.send("contract", "c", events.TypeContract, contract("c", 0.5, "DETERMINISTIC", "other"))
	h.send("workflow", "support", events.TypeWorkflow, supportWorkflow)
	for i := 1; i <= ObservedCheckpoint; i++ {
		h.run("support", i%5 < 3)
	}
	h.send("contract", "x", events.TypeContract, contract("x", 0.99, "DETERMINISTIC", ""))
	h.send("contract", "y", events.TypeContract, contract("y", 0.99, "DETERMINISTIC", ""))
	h.send("workflow", "w", events.TypeWorkflow, `{"composition_id":"w","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"tools":{"x":{"determinism":"DETERMINISTIC"},"y":{"accuracy":0.99,"determinism":"DETERMINISTIC"}},"structure":{"chain":["x","y"]}}`)
	for i := range 8 {
		h.invoke("x", "agent", fmt.Sprintf(`,"used_fields":["q"],"outcome":{"status":%q}`, []string{"error", "ok"}[i%2]))
	}

	schema, composition := events.KindSchemaVerdict.String(), events.KindCompositionVerdict.String()
	want := []string{
		schema + " with an agent", schema + " without an agent", schema + " from an invocation",
		composition + " with composed_quality_lower", composition + " with confidence",
		composition + " with failure_modes", composition + " with observed",
	}
	for _, v := range []guards.SchemaVerdict{guards.NoBaseline, guards.SchemaMatch, guards.DriftOnUnusedFields, guards.DriftOnUsedFields} {
		want = append(want, schema+" "+string(v))
	}
	for _, v := range []guards.CompositionVerdict{guards.SingleTool, guards.CompositionMeetsQuality, guards.CompositionDegraded, guards.SemanticIncompatible} {
		want = append(want, composition+" "+string(v))
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no %s among the verdicts: %v", w, seen)
		}
	}
}

// TestInvocationLeavesStoredRecordsAlone: applyInvocation reads the
// store's usage record without copying it while nothing changes it, and
// never writes to it: the records the state returned are as they were,
// whatever the invocation (the same call again, a new field, an old
// fingerprint, a field the tool no longer declares).
func TestInvocationLeavesStoredRecordsAlone(t *testing.T) {
	h := newHarness(t)
	v1 := schemaVerdicts(t, h.observe("crm.lookup", "1", crmV1))[0].CurrentFingerprint
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`)
	snapshot := func() string {
		b, err := json.Marshal(h.state.UsageOfTool("crm.lookup"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for i, rest := range []string{
		`,"arguments":{"user_id":"u","limit":"5"}`,
		`,"arguments":{"user_id":"u","limit":"5"},"output_fields_read":["name"]`,
		`,"arguments":{"user_id":"u","limit":7}`,
		`,"used_fields":["include_deleted"]`,
		// Not yet judged against the new version, then a pair not told yet.
		`,"arguments":{"user_id":"u"}`,
		`,"arguments":{"user_id":"u"},"schema_fingerprint":"` + v1 + `"`,
		`,"arguments":{"user_id":"u"}`,
	} {
		switch i {
		case 4:
			h.observe("crm.lookup", "2", crmExtra) // drift on unused fields: advances
		case 6:
			h.observe("crm.lookup", "3", crmRenamed) // drift on used fields: held
		}
		before := snapshot()
		data := fmt.Sprintf(`{"tool_id":"crm.lookup","agent_id":"agent-a"%s}`, rest)
		body := fmt.Sprintf(`{"specversion":"1.0","id":"inv-%d","source":"test","type":%q,"data":%s}`, i, events.TypeInvocation, data)
		const subject = "toolsentry.telemetry.invocation.crm=2Elookup"
		ev, err := events.Decode(subject, nil, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		h.seq++
		eff, err := h.core.Apply(h.state, Input{Event: ev, Subject: subject, Seq: h.seq})
		if err != nil {
			t.Fatal(err)
		}
		if after := snapshot(); after != before {
			t.Fatalf("invocation %d changed the stored usage record:\nbefore %s\nafter  %s", i, before, after)
		}
		if err := h.state.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCachesChangeNoVerdict: the core's caches (parsed tool versions,
// their fingerprints, the diffs of pairs of versions) change no byte of any
// verdict or checkpoint: the same inputs applied with one core throughout
// and with a new core per input write the same messages. Two agents with
// different surfaces see a drift that holds the baseline, on several
// observations, and one agent sends an old fingerprint.
func TestCachesChangeNoVerdict(t *testing.T) {
	run := func(fresh bool) []string {
		h := newHarness(t)
		h.fresh = fresh
		var out []string
		h.onVerdict = func(m events.Message) { out = append(out, m.Subject+" "+string(m.Data)) }
		v1 := schemaVerdicts(t, h.observe("crm.lookup", "1", crmV1))[0].CurrentFingerprint
		h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`)
		h.invoke("crm.lookup", "agent-b", `,"arguments":{"limit":"5"},"used_fields":["include_deleted"]`)
		for range 3 {
			h.observe("crm.lookup", "2", crmRenamed)
		}
		h.observe("crm.lookup", "3", crmTyped)
		h.observe("crm.lookup", "3", crmTyped)
		h.invoke("crm.lookup", "agent-c", `,"arguments":{"user_id":"u"},"schema_fingerprint":"`+v1+`"`)
		h.observe("crm.lookup", "1", crmV1)
		h.observe("other.tool", "1", crmV1)
		h.observe("other.tool", "2", crmDefault)
		h.observe("other.tool", "2", crmDefault)
		return out
	}
	cached, fresh := run(false), run(true)
	if len(cached) < 8 { // repeats of the current version publish nothing
		t.Fatalf("only %d verdicts", len(cached))
	}
	if diff := cmp.Diff(fresh, cached); diff != "" {
		t.Errorf("verdicts with caches differ (-fresh core per input +one core):\n%s", diff)
	}
}
