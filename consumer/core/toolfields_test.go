package core

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// withToolFields is an MCP Tool object with _meta and icons (JSON members,
// each with its leading comma) put before its other fields.
func withToolFields(tool, fields string) string {
	return strings.Replace(tool, `{"name":"lookup",`, `{"name":"lookup"`+fields+`,`, 1)
}

const (
	build1 = `,"_meta":{"build":"1"}`
	build2 = `,"_meta":{"build":"2"},"icons":[{"src":"https://crm.example.com/icon.png"}]`
)

// changedPaths are a verdict's changes, as side:path:kind.
func changedPaths(t *testing.T, sv *events.SchemaVerdict) []string {
	t.Helper()
	var changes []toolschema.Change
	if err := json.Unmarshal(sv.Changes, &changes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range changes {
		out = append(out, string(c.Side)+":"+c.Path+":"+string(c.Kind))
	}
	return out
}

func viewVerdicts(t *testing.T, h *harness, tool, version, mcpTool string) []*events.SchemaVerdict {
	t.Helper()
	return schemaVerdicts(t, h.observe(tool, version, mcpTool))
}

// Issue 19 §6: a change of the Tool fields outside the fingerprint (_meta,
// icons) is one PROCEED verdict per agent when the tool first presents it;
// its repeats are counted, not reported; a change back is a change again.
func TestToolFieldsChangeIsReportedOnce(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", withToolFields(crmV1, build1))
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)
	first, _ := h.state.Baseline("crm.lookup")
	if first.Current.ToolFields == "" {
		t.Fatal("the first version was recorded without its tool fields digest")
	}

	got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build2))
	if len(got) != 1 || got[0].Verdict != guards.DriftOnUnusedFields || got[0].AgentID != "agent-a" ||
		!strings.HasPrefix(got[0].Directive, "PROCEED:") || string(got[0].Affected) != `[]` {
		t.Fatalf("verdicts %+v, want one DRIFT_ON_UNUSED_FIELDS for agent-a, affecting nothing", got)
	}
	if got[0].BaselineFingerprint != first.Current.Fingerprint || got[0].CurrentFingerprint != first.Current.Fingerprint {
		t.Errorf("verdict fingerprints %s → %s, want the unchanged %s", got[0].BaselineFingerprint, got[0].CurrentFingerprint, first.Current.Fingerprint)
	}
	if want := []string{"tool:_meta:tool_field_changed", "tool:icons:tool_field_changed"}; !slices.Equal(changedPaths(t, got[0]), want) {
		t.Errorf("changes %v, want %v", changedPaths(t, got[0]), want)
	}
	rec, _ := h.state.Baseline("crm.lookup")
	if rec.Held || rec.Current.ToolFields == first.Current.ToolFields || rec.Baseline.ToolFields != rec.Current.ToolFields || rec.Seen != 2 {
		t.Errorf("record %+v: want the baseline advanced to the new tool fields, not held, seen twice", rec)
	}

	for range 2 {
		if got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build2)); len(got) != 0 {
			t.Fatalf("the repeat: %+v, want no verdict", got)
		}
	}
	if rec, _ := h.state.Baseline("crm.lookup"); rec.Seen != 4 {
		t.Errorf("seen %d after two repeats, want 4", rec.Seen)
	}
	if got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build1)); len(got) != 1 || got[0].Verdict != guards.DriftOnUnusedFields {
		t.Fatalf("back to the first _meta: %+v, want one DRIFT_ON_UNUSED_FIELDS", got)
	}
}

// With no known usage the change is one verdict without agent; a baseline
// held on a drift stays held, and the verdict is about the tool fields
// only, not the held drift again.
func TestToolFieldsChangeWhileHeld(t *testing.T) {
	h := newHarness(t)
	if got := viewVerdicts(t, h, "crm.lookup", "1", crmV1); len(got) != 1 {
		t.Fatalf("%+v", got)
	}
	if got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build1)); len(got) != 1 || got[0].AgentID != "" || got[0].Verdict != guards.DriftOnUnusedFields {
		t.Fatalf("no usage: %+v, want one DRIFT_ON_UNUSED_FIELDS without agent", got)
	}
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)
	if got := viewVerdicts(t, h, "crm.lookup", "2", crmRenamed); len(got) != 1 || got[0].Verdict != guards.DriftOnUsedFields {
		t.Fatalf("the rename: %+v, want DRIFT_ON_USED_FIELDS", got)
	}
	held, _ := h.state.Baseline("crm.lookup")
	got := viewVerdicts(t, h, "crm.lookup", "2", withToolFields(crmRenamed, build2))
	if len(got) != 1 || got[0].Verdict != guards.DriftOnUnusedFields || got[0].BaselineFingerprint != held.Current.Fingerprint {
		t.Fatalf("icons while held: %+v, want one DRIFT_ON_UNUSED_FIELDS against the current version", got)
	}
	if paths := changedPaths(t, got[0]); slices.ContainsFunc(paths, func(p string) bool { return !strings.HasPrefix(p, "tool:") }) {
		t.Errorf("changes %v: want the tool fields only", paths)
	}
	rec, _ := h.state.Baseline("crm.lookup")
	if !rec.Held || rec.Baseline.Fingerprint != held.Baseline.Fingerprint || rec.Current.ToolFields == held.Current.ToolFields {
		t.Errorf("record %+v: want still held on the same baseline, current with the new tool fields", rec)
	}
}

// A baseline record written before the tool fields digest was kept takes
// the next observation's silently, whatever its _meta and icons: an
// upgrade reports nothing. The change after that is reported.
func TestToolFieldsDigestAdoptedAtUpgrade(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", withToolFields(crmV1, build1))
	old, _ := h.state.Baseline("crm.lookup")
	legacy := cloneBaseline(old)
	legacy.Baseline.ToolFields, legacy.Current.ToolFields = "", ""
	for i := range legacy.Known {
		legacy.Known[i].ToolFields = ""
	}
	if err := h.state.Store([]Write{{Bucket: Baselines, IDs: []string{"crm.lookup"}, Record: legacy}}); err != nil {
		t.Fatal(err)
	}
	if got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build2)); len(got) != 0 {
		t.Fatalf("first observation after the upgrade: %+v, want none", got)
	}
	rec, _ := h.state.Baseline("crm.lookup")
	if rec.Current.ToolFields == "" || rec.Seen != 2 {
		t.Fatalf("record %+v: want the digest adopted and the observation counted", rec)
	}
	if got := viewVerdicts(t, h, "crm.lookup", "1", withToolFields(crmV1, build1)); len(got) != 1 || got[0].Verdict != guards.DriftOnUnusedFields {
		t.Fatalf("the next change: %+v, want one DRIFT_ON_UNUSED_FIELDS", got)
	}
}
