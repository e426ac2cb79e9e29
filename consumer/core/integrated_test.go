package core

import (
	"slices"
	"testing"

	"github.com/toolsentry/toolsentry/guards"
)

// TestAgentThatMovesOnIsIntegrated is issue 18 §2: an agent told of the
// rename (DRIFT_ON_USED_FIELDS) that then sends the new field gets one
// SCHEMA_MATCH of its own, judged against the current version; its
// recorded surface moves to the new field; calls on the new surface
// publish nothing more, and a relapse to the old field is told again.
func TestAgentThatMovesOnIsIntegrated(t *testing.T) {
	for _, held := range []bool{true, false} {
		name := "told by the observation, baseline held"
		if !held {
			name = "told by its own call"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			var told []string
			if held {
				h.observe("crm.lookup", "1", crmV1)
				h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)
				for _, v := range schemaVerdicts(t, h.observe("crm.lookup", "1", crmRenamed)) {
					told = append(told, string(v.Verdict)+"/"+v.AgentID)
				}
			} else {
				h.observe("crm.lookup", "1", crmRenamed)
				for _, v := range schemaVerdicts(t, h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)) {
					told = append(told, string(v.Verdict)+"/"+v.AgentID)
				}
			}
			if !slices.Contains(told, "DRIFT_ON_USED_FIELDS/agent-a") {
				t.Fatalf("the agent was not told of the rename: %v", told)
			}
			rec, _ := h.state.Baseline("crm.lookup")
			cur := rec.Current.Fingerprint

			got := schemaVerdicts(t, h.invoke("crm.lookup", "agent-a", `,"arguments":{"userId":"u"}`))
			if len(got) != 1 || got[0].Verdict != guards.SchemaMatch || got[0].AgentID != "agent-a" ||
				got[0].BaselineFingerprint != cur || got[0].CurrentFingerprint != cur || got[0].ManifestDigest == "" {
				t.Fatalf("the agent moved on: %+v, want one SCHEMA_MATCH for it at %s", got, cur)
			}
			if want := "agent-a integrated crm.lookup's current version; its directive clears"; got[0].Summary != want || got[0].Action != guards.ActionProceed {
				t.Errorf("integrated verdict says %s %q, want PROCEED %q", got[0].Action, got[0].Summary, want)
			}
			u, _ := h.state.Usage("crm.lookup", "agent-a")
			if _, old := u.Input["user_id"]; old || u.Input["userId"] == nil || u.CheckedAgainst != cur {
				t.Errorf("recorded surface %+v, want userId only, checked against %s", u, cur)
			}
			for range 2 {
				if got := h.invoke("crm.lookup", "agent-a", `,"arguments":{"userId":"u"}`); len(got) != 0 {
					t.Fatalf("told again on the new surface: %+v", got)
				}
			}
			// A relapse to the old field is a drift again.
			got = schemaVerdicts(t, h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`))
			if len(got) != 1 || got[0].Verdict != guards.DriftOnUsedFields {
				t.Fatalf("relapse: %+v", got)
			}
		})
	}
}

// TestAgentNotToldIsNotIntegrated: an agent whose surface never deviated,
// or whose new call still sends an undeclared field, gets no verdict.
func TestAgentNotToldIsNotIntegrated(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmRenamed)
	if got := h.invoke("crm.lookup", "agent-a", `,"arguments":{"userId":"u"}`); len(got) != 0 {
		t.Fatalf("a conforming agent never told: %+v", got)
	}
	h.invoke("crm.lookup", "agent-b", `,"arguments":{"user_id":"u"}`) // told
	if got := schemaVerdicts(t, h.invoke("crm.lookup", "agent-b", `,"arguments":{"userId":"u","extra":1}`)); len(got) != 1 || got[0].Verdict != guards.DriftOnUsedFields {
		t.Fatalf("a call that still sends an undeclared field: %+v, want the drift, not an integration", got)
	}
}
