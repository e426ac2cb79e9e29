package core

import (
	"testing"

	"github.com/toolsentry/toolsentry/events"
)

func outcomeWrite(eff Effects) (Write, bool) {
	for _, w := range eff.Writes {
		if w.Bucket == Outcomes {
			return w, true
		}
	}
	return Write{}, false
}

// Outcome counts are deferred (the shell may keep them in memory) except
// at a quality checkpoint and when the input also moved the chain head.
func TestOutcomeWritesAreDeferredBetweenCheckpoints(t *testing.T) {
	d := direct{t, New(Options{QualityEvery: 3}), NewMemState()}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":`+crmV1+`}`)
	inv := `{"tool_id":"crm.lookup","agent_id":"a","arguments":{"user_id":"u"},"outcome":{"status":"ok"}}`
	for _, step := range []struct {
		seq      uint64
		deferred bool
	}{{2, true}, {3, true}, {4, false}, {5, true}} {
		w, ok := outcomeWrite(d.apply(step.seq, "invocation", "crm.lookup", events.TypeInvocation, inv))
		if !ok {
			t.Fatalf("seq %d: no outcome write", step.seq)
		}
		if w.Deferred != step.deferred {
			t.Errorf("seq %d: deferred %t, want %t (calls %d)", step.seq, w.Deferred, step.deferred, w.Record.(*OutcomeRecord).Calls)
		}
	}
	// A drift verdict on the same input: the chain head moves, stored now.
	d.apply(6, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"2","tool":`+crmRenamed+`}`)
	eff := d.apply(7, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"b","arguments":{"user_id":"u"},"outcome":{"status":"ok"}}`)
	if len(eff.Verdicts) == 0 {
		t.Fatal("no drift verdict")
	}
	if w, _ := outcomeWrite(eff); w.Deferred {
		t.Error("an outcome write that moved the chain head was deferred")
	}
}

// Count counts an input once, and only an invocation with an outcome.
func TestOutcomeRecordCount(t *testing.T) {
	var r OutcomeRecord
	ok := &events.Invocation{Outcome: &events.Outcome{Status: "ok"}}
	failed := &events.Invocation{Outcome: &events.Outcome{Status: "error"}}
	wrong := false
	judged := &events.Invocation{Outcome: &events.Outcome{Status: "ok", Correct: &wrong}}
	for _, c := range []struct {
		inv  *events.Invocation
		seq  uint64
		want bool
	}{{ok, 3, true}, {ok, 3, false}, {failed, 2, false}, {&events.Invocation{}, 4, false}, {failed, 5, true}, {judged, 6, true}} {
		if got := r.Count(c.inv, c.seq); got != c.want {
			t.Errorf("seq %d: counted %t, want %t", c.seq, got, c.want)
		}
	}
	if r.Calls != 3 || r.Successes != 1 || r.LastSeq != 6 {
		t.Errorf("got %+v, want 3 calls, 1 success, last 6", r)
	}
}
