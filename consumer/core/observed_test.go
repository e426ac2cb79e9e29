package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// supportWorkflow: two tools of 95% each, measured at 95%, required 85%:
// the chain predicts 90.25% and proceeds.
const supportWorkflow = `{"composition_id":"support","workflow_quality_requirement":0.85,"introduction_of_nondeterminism_acceptable":false,
	"policy":{"require_schema_compatibility":false},
	"tools":{"a":{"accuracy":0.95,"determinism":"DETERMINISTIC","observed":{"calls":100,"successes":95}},
		"b":{"accuracy":0.95,"determinism":"DETERMINISTIC","observed":{"calls":100,"successes":95}}},
	"structure":{"chain":["a","b"]}}`

func (h *harness) run(composition string, success bool) []events.Event {
	h.t.Helper()
	status := "ok"
	if !success {
		status = "error"
	}
	data := fmt.Sprintf(`{"composition_id":%q,"agent_id":"bot","trace_id":"t%d","span_id":"s","structure":{"chain":["a","b"]},
		"calls":[{"tool_id":"a","span_id":"1","status":"ok"},{"tool_id":"b","span_id":"2","status":%q}],"success":%v}`, composition, h.seq+1, status, success)
	return h.send("observed", composition, events.TypeWorkflowObserved, data)
}

func TestObservedRunsCorrelatedErrors(t *testing.T) {
	h := newHarness(t)
	decl := h.send("workflow", "support", events.TypeWorkflow, supportWorkflow)
	if len(decl) != 1 || decl[0].CompositionVerdict.Verdict != guards.CompositionMeetsQuality {
		t.Fatalf("declaration: %+v", decl)
	}
	// 18 of 30 runs succeed: 60%, far below the 90.25% the tools predict.
	for i := 1; i <= ObservedCheckpoint; i++ {
		got := h.run("support", i%5 < 3)
		if i < ObservedCheckpoint && len(got) != 0 {
			t.Fatalf("run %d: a verdict before the checkpoint: %+v", i, got[0].CompositionVerdict)
		}
		if i == ObservedCheckpoint {
			if len(got) != 1 {
				t.Fatalf("checkpoint: %d verdicts, want 1", len(got))
			}
			v := got[0].CompositionVerdict
			if v.Verdict != guards.CompositionDegraded || !strings.HasPrefix(v.Directive, "HALT: Observed quality 60.00% < requirement 85.00% over 30 runs; errors are correlated") {
				t.Errorf("verdict %s %q", v.Verdict, v.Directive)
			}
			o := v.Observed
			if o == nil || o.Runs != 30 || o.Successes != 18 || !o.CorrelatedErrors || fmt.Sprintf("%.4f", o.PredictedQuality) != "0.9025" {
				t.Errorf("observed %+v", o)
			}
			if v.InputSequence != h.seq {
				t.Errorf("input sequence %d, want %d", v.InputSequence, h.seq)
			}
		}
	}
	rec, _ := h.state.Workflow("support")
	if rec.Observed == nil || rec.Observed.Runs != 30 || rec.Observed.Successes != 18 || rec.Observed.LastSeq != h.seq {
		t.Fatalf("record %+v", rec.Observed)
	}
	// A redelivery of the last run changes nothing and publishes nothing.
	if got := h.sendAt(h.seq, "observed", "support", events.TypeWorkflowObserved,
		`{"composition_id":"support","agent_id":"bot","trace_id":"x","span_id":"s","structure":"a","calls":[{"tool_id":"a","span_id":"1","status":"ok"}],"success":true}`); len(got) != 0 {
		t.Errorf("redelivery published %d verdicts", len(got))
	}
	if again, _ := h.state.Workflow("support"); again.Observed.Runs != 30 {
		t.Errorf("redelivery counted: %+v", again.Observed)
	}
}

func TestObservedRunsAsPredicted(t *testing.T) {
	h := newHarness(t)
	h.send("workflow", "support", events.TypeWorkflow, supportWorkflow)
	var last []events.Event
	for i := 1; i <= 2*ObservedCheckpoint; i++ {
		last = h.run("support", i%10 != 0) // 90%, as predicted
		if i == ObservedCheckpoint && len(last) != 1 {
			t.Fatalf("first checkpoint: %d verdicts", len(last))
		}
	}
	if len(last) != 1 {
		t.Fatalf("second checkpoint: %d verdicts", len(last))
	}
	v := last[0].CompositionVerdict
	if v.Verdict != guards.CompositionMeetsQuality || v.Observed == nil || v.Observed.CorrelatedErrors || v.Observed.Runs != 60 || v.Observed.Successes != 54 {
		t.Errorf("verdict %s, observed %+v", v.Verdict, v.Observed)
	}
}

func TestObservedRunsBeforeTheDeclaration(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < ObservedCheckpoint; i++ {
		if got := h.run("support", false); len(got) != 0 {
			t.Fatalf("a verdict without a declared workflow: %+v", got)
		}
	}
	h.send("workflow", "support", events.TypeWorkflow, supportWorkflow)
	rec, _ := h.state.Workflow("support")
	if rec.Observed == nil || rec.Observed.Runs != ObservedCheckpoint || rec.Observed.Successes != 0 || len(rec.Workflow) == 0 {
		t.Fatalf("the declaration lost the observed runs: %+v", rec)
	}
	for i := 0; i < ObservedCheckpoint-1; i++ {
		h.run("support", false)
	}
	got := h.run("support", false)
	if len(got) != 1 || got[0].CompositionVerdict.Verdict != guards.CompositionDegraded || got[0].CompositionVerdict.Observed.Runs != 2*ObservedCheckpoint {
		t.Fatalf("checkpoint after the declaration: %+v", got)
	}
}

func TestObservedOrderingKey(t *testing.T) {
	if got := OrderingKey("observed", "support"); got != CompositionLane {
		t.Errorf("OrderingKey(observed) = %q, want the composition lane", got)
	}
}
