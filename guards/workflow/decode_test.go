package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeWorkflowLeavesToolsToTheCaller(t *testing.T) {
	raw := `{"composition_id": "w", "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false,
		"policy": {"require_schema_compatibility": false},
		"structure": {"chain": ["fetch", {"parallel": {"mode": "any", "of": ["rank", "rank_fallback"]}}, {"conditional": [{"p": 0.5, "then": "fetch"}, {"p": 0.5, "then": "summarise"}]}]}}`
	if _, err := ParseWorkflow([]byte(raw)); err == nil || !errors.Is(err, guards.ErrInvalid) {
		t.Fatalf("ParseWorkflow without tools: %v, want a missing-tools error", err)
	}
	w, err := DecodeWorkflow([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"fetch", "rank", "rank_fallback", "summarise"}, w.Structure.ToolIDs()); diff != "" {
		t.Errorf("ToolIDs (-want +got):\n%s", diff)
	}
	if _, err := EvaluateWorkflow(w); err == nil {
		t.Fatal("a workflow with no tool entries evaluated")
	}
	acc := 0.99
	w.Tools = map[string]WorkflowTool{}
	for _, id := range w.Structure.ToolIDs() {
		w.Tools[id] = WorkflowTool{Accuracy: &acc, Determinism: guards.Deterministic}
	}
	m, err := EvaluateWorkflow(w)
	if err != nil {
		t.Fatal(err)
	}
	if m.Verdict != guards.CompositionMeetsQuality {
		t.Errorf("verdict %s, composed %v", m.Verdict, m.ComposedQuality)
	}
	if _, err := DecodeWorkflow([]byte(`{"composition_id": "w", "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false, "structure": "a"}`)); err == nil {
		t.Error("a workflow without policy decoded")
	}
}
