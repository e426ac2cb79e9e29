package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// operate sends an operator action about tool at the next sequence.
func (h *harness) operate(kind events.Kind, tool, rest string) []events.Event {
	h.t.Helper()
	return h.send(kind.Token(), tool, kind.Type(), fmt.Sprintf(`{"tool_id":%q,"operator":"ana@ops","reason":"test"%s}`, tool, rest))
}

// result is the tool's last operator result.
func (h *harness) result(tool string) OperatorResult {
	h.t.Helper()
	o, ok := h.state.Outcomes(tool)
	if !ok || o.Operator == nil {
		h.t.Fatalf("%s: no operator result recorded", tool)
	}
	return *o.Operator
}

// heldDrift observes crmV1, has bot call it with user_id, then observes
// the rename: the drift on user_id holds the baseline.
func heldDrift(t *testing.T) (*harness, *BaselineRecord) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "bot", `,"arguments":{"user_id":"u1"}`)
	vs := schemaVerdicts(t, h.observe("crm.lookup", "2", crmRenamed))
	if len(vs) != 1 || vs[0].Verdict != guards.DriftOnUsedFields {
		t.Fatalf("setup: %+v", vs)
	}
	rec, _ := h.state.Baseline("crm.lookup")
	if !rec.Held {
		t.Fatal("setup: the drift does not hold the baseline")
	}
	return h, rec
}

// TestOperatorAccept: an accept of the version the operator saw makes it
// the baseline, releases the hold and publishes a SCHEMA_MATCH for the
// tool, linked into the tool's chain; an accept of another version is
// refused and changes nothing; a repeated accept changes nothing.
func TestOperatorAccept(t *testing.T) {
	h, rec := heldDrift(t)
	before, _ := h.state.Outcomes("crm.lookup")
	chain := before.Chain

	if vs := h.operate(events.KindBaselineAccepted, "crm.lookup", `,"fingerprint":"sha256:not-it"`); len(vs) != 0 {
		t.Fatalf("a refused accept published %d verdicts", len(vs))
	}
	if r := h.result("crm.lookup"); r.Result != OperatorRefused || !strings.Contains(r.Message, "nothing accepted") || r.Operator != "ana@ops" {
		t.Errorf("refused accept: %+v", r)
	}
	if now, _ := h.state.Baseline("crm.lookup"); !now.Held || now.Baseline.Fingerprint != rec.Baseline.Fingerprint {
		t.Fatalf("a refused accept changed the baseline: %+v", now)
	}

	fp := rec.Current.Fingerprint
	evs := h.operate(events.KindBaselineAccepted, "crm.lookup", fmt.Sprintf(`,"fingerprint":%q`, fp))
	vs := schemaVerdicts(t, evs)
	if len(vs) != 1 || vs[0].Verdict != guards.SchemaMatch || vs[0].AgentID != "" || vs[0].CurrentFingerprint != fp || vs[0].BaselineFingerprint != fp {
		t.Fatalf("accept verdicts: %+v", vs)
	}
	if !strings.Contains(vs[0].InputSubject, ".baseline_accepted.") {
		t.Errorf("verdict input subject %q", vs[0].InputSubject)
	}
	if evs[0].Extensions[events.AttrPrevious] != chain {
		t.Errorf("the accept's verdict names %q as predecessor, want the chain head %q", evs[0].Extensions[events.AttrPrevious], chain)
	}
	now, _ := h.state.Baseline("crm.lookup")
	if now.Held || now.Baseline.Fingerprint != fp || now.LastSeq != h.seq {
		t.Fatalf("after accept: %+v", now)
	}
	r := h.result("crm.lookup")
	if r.Result != OperatorApplied || r.Seq != h.seq || r.Verdict != evs[0].ID || r.Action != "baseline_accepted" {
		t.Errorf("accept result: %+v", r)
	}

	// Redelivered: nothing published again, the result kept.
	seq := h.seq
	if vs := h.sendAt(seq, "baseline_accepted", "crm.lookup", events.TypeBaselineAccepted,
		fmt.Sprintf(`{"tool_id":"crm.lookup","operator":"ana@ops","reason":"test","fingerprint":%q}`, fp)); len(vs) != 0 {
		t.Errorf("a redelivered accept published %d verdicts", len(vs))
	}
	if got := h.result("crm.lookup"); got != r {
		t.Errorf("a redelivered accept recorded %+v, want %+v", got, r)
	}
	// An observation from before the accept, redelivered: nothing.
	if vs := h.sendAt(seq-1, "schema", "crm.lookup", events.TypeSchemaObserved,
		fmt.Sprintf(`{"tool_id":"crm.lookup","version":"1","tool":%s}`, crmV1)); len(vs) != 0 {
		t.Errorf("an observation before the accept, redelivered, published %+v", vs)
	}
	if now, _ := h.state.Baseline("crm.lookup"); now.Baseline.Fingerprint != fp || now.Held {
		t.Errorf("an old observation redelivered changed the baseline: %+v", now)
	}

	if vs := h.operate(events.KindBaselineAccepted, "crm.lookup", fmt.Sprintf(`,"fingerprint":%q`, fp)); len(vs) != 0 {
		t.Errorf("accepting twice published %d verdicts", len(vs))
	}
	if r := h.result("crm.lookup"); r.Result != OperatorUnchanged {
		t.Errorf("second accept: %+v", r)
	}
	// The renamed version is the baseline now: observing it again is a
	// repeat of the current version, with nothing held.
	if vs := h.observe("crm.lookup", "2", crmRenamed); len(vs) != 0 {
		t.Errorf("after accept, a repeat published %+v", vs)
	}
	if now, _ := h.state.Baseline("crm.lookup"); now.Held || now.Baseline.Fingerprint != fp {
		t.Errorf("after accept and a repeat: %+v", now)
	}
}

// TestOperatorReset: a reset deletes the baseline, and the next
// observation is NO_BASELINE; a reset naming another baseline is refused.
func TestOperatorReset(t *testing.T) {
	h, rec := heldDrift(t)
	if vs := h.operate(events.KindBaselineReset, "crm.lookup", `,"fingerprint":"sha256:other"`); len(vs) != 0 {
		t.Fatalf("reset published %+v", vs)
	}
	if r := h.result("crm.lookup"); r.Result != OperatorRefused {
		t.Errorf("reset of another baseline: %+v", r)
	}
	if vs := h.operate(events.KindBaselineReset, "crm.lookup", fmt.Sprintf(`,"fingerprint":%q`, rec.Baseline.Fingerprint)); len(vs) != 0 {
		t.Fatalf("reset published %+v", vs)
	}
	if r := h.result("crm.lookup"); r.Result != OperatorApplied || !strings.Contains(r.Message, "held is forgotten") {
		t.Errorf("reset: %+v", r)
	}
	if _, ok := h.state.Baseline("crm.lookup"); ok {
		t.Fatal("the baseline survived its reset")
	}
	// The drifted observation (sequence 3), redelivered after the reset:
	// applied before it, it changes nothing.
	if vs := h.sendAt(3, "schema", "crm.lookup", events.TypeSchemaObserved,
		fmt.Sprintf(`{"tool_id":"crm.lookup","version":"2","tool":%s}`, crmRenamed)); len(vs) != 0 {
		t.Errorf("an observation before the reset, redelivered, published %+v", vs)
	}
	if _, ok := h.state.Baseline("crm.lookup"); ok {
		t.Fatal("an observation before the reset, redelivered, made a baseline")
	}
	o, _ := h.state.Outcomes("crm.lookup")
	if o.Chain == "" {
		t.Error("the reset lost the tool's verdict chain")
	}
	if vs := schemaVerdicts(t, h.observe("crm.lookup", "2", crmRenamed)); len(vs) != 1 || vs[0].Verdict != guards.NoBaseline {
		t.Errorf("after reset: %+v", vs)
	}
	if vs := h.operate(events.KindBaselineReset, "nothing.here", ""); len(vs) != 0 {
		t.Error("reset of an unknown tool published")
	}
	if r := h.result("nothing.here"); r.Result != OperatorUnchanged {
		t.Errorf("reset of an unknown tool: %+v", r)
	}
}

// TestOperatorMigrated: after an accept the agent still gets its
// migration; marked migrated, its surface moves to the new field and a
// SCHEMA_MATCH for the agent clears its directive.
func TestOperatorMigrated(t *testing.T) {
	h, rec := heldDrift(t)
	fp := rec.Current.Fingerprint
	h.operate(events.KindBaselineAccepted, "crm.lookup", fmt.Sprintf(`,"fingerprint":%q`, fp))

	if vs := h.operate(events.KindAgentMigrated, "crm.lookup", `,"agent_id":"bot","fingerprint":"sha256:old"`); len(vs) != 0 {
		t.Fatalf("a refused migration published %+v", vs)
	}
	if r := h.result("crm.lookup"); r.Result != OperatorRefused || r.AgentID != "bot" {
		t.Errorf("migrated to another version: %+v", r)
	}
	if vs := h.operate(events.KindAgentMigrated, "crm.lookup", `,"agent_id":"nobody"`); len(vs) != 0 || h.result("crm.lookup").Result != OperatorRefused {
		t.Errorf("an agent without usage marked migrated: %+v, %+v", vs, h.result("crm.lookup"))
	}

	vs := schemaVerdicts(t, h.operate(events.KindAgentMigrated, "crm.lookup", fmt.Sprintf(`,"agent_id":"bot","fingerprint":%q`, fp)))
	if len(vs) != 1 || vs[0].Verdict != guards.SchemaMatch || vs[0].AgentID != "bot" || vs[0].CurrentFingerprint != fp {
		t.Fatalf("migrated verdicts: %+v", vs)
	}
	u, _ := h.state.Usage("crm.lookup", "bot")
	paths := slices.Sorted(func(yield func(string) bool) {
		for p := range u.Input {
			if !yield(p) {
				return
			}
		}
	})
	if !slices.Equal(paths, []string{"userId"}) || u.CheckedAgainst != fp {
		t.Errorf("surface after migration: %v (checked against %s)", paths, u.CheckedAgainst)
	}
	if r := h.result("crm.lookup"); r.Result != OperatorApplied || !strings.Contains(r.Message, "1 field(s) moved") {
		t.Errorf("migrated: %+v", r)
	}
	// It calls with the new field: no drift to report.
	if vs := h.invoke("crm.lookup", "bot", `,"arguments":{"userId":"u1"}`); len(vs) != 0 {
		t.Errorf("a migrated agent calling the new way got %+v", vs)
	}
}

// TestOperatorForget: a forgotten agent's usage no longer holds the
// baseline: the next drift advances it.
func TestOperatorForget(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "bot", `,"arguments":{"user_id":"u1"}`)
	if vs := h.operate(events.KindAgentForgotten, "crm.lookup", `,"agent_id":"bot"`); len(vs) != 0 {
		t.Fatalf("forget published %+v", vs)
	}
	if r := h.result("crm.lookup"); r.Result != OperatorApplied || r.AgentID != "bot" {
		t.Errorf("forget: %+v", r)
	}
	if _, ok := h.state.Usage("crm.lookup", "bot"); ok {
		t.Fatal("the usage survived forget")
	}
	h.sendAt(2, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"bot","arguments":{"user_id":"u1"}}`)
	if _, ok := h.state.Usage("crm.lookup", "bot"); ok {
		t.Fatal("a call from before the forget, redelivered, recorded the usage again")
	}
	vs := schemaVerdicts(t, h.observe("crm.lookup", "2", crmRenamed))
	if len(vs) != 1 || vs[0].AgentID != "" || vs[0].Verdict == guards.DriftOnUsedFields {
		t.Errorf("drift after forget: %+v", vs)
	}
	if rec, _ := h.state.Baseline("crm.lookup"); rec.Held {
		t.Error("a forgotten agent still holds the baseline")
	}
	h.operate(events.KindAgentForgotten, "crm.lookup", `,"agent_id":"bot"`)
	if r := h.result("crm.lookup"); r.Result != OperatorUnchanged {
		t.Errorf("forgetting twice: %+v", r)
	}
}

// TestOperatorWritesOutcomeFirst: the outcome record, which marks the
// action applied, is the first write, so that a failure after it is
// redone on redelivery.
func TestOperatorWritesOutcomeFirst(t *testing.T) {
	h, rec := heldDrift(t)
	tok, _ := events.KeyToken("crm.lookup")
	subject := "toolsentry.telemetry.baseline_accepted." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"op-x","source":"test","type":%q,"data":{"tool_id":"crm.lookup","operator":"ana","fingerprint":%q}}`, events.TypeBaselineAccepted, rec.Current.Fingerprint)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := h.core.Apply(h.state, Input{Event: ev, Subject: subject, Seq: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Writes) != 3 || eff.Writes[0].Bucket != Outcomes || eff.Writes[1].Bucket != Baselines || eff.Writes[2].Bucket != Outcomes {
		t.Fatalf("writes %+v", eff.Writes)
	}
	first, last := eff.Writes[0].Record.(*OutcomeRecord).Operator, eff.Writes[2].Record.(*OutcomeRecord).Operator
	if first.Done || !last.Done || first.Result != OperatorApplied || last.Result != OperatorApplied {
		t.Fatalf("results first %+v, last %+v", first, last)
	}
	// Only the first outcome write was stored: the redelivery writes the
	// baseline, publishes nothing again and keeps the result.
	if err := h.state.Store(eff.Writes[:1]); err != nil {
		t.Fatal(err)
	}
	again, err := h.core.Apply(h.state, Input{Event: ev, Subject: subject, Seq: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Verdicts) != 0 || len(again.Writes) != 3 || again.Writes[1].Bucket != Baselines {
		t.Fatalf("redelivery: %d verdicts, writes %+v", len(again.Verdicts), again.Writes)
	}
	if got := *again.Writes[2].Record.(*OutcomeRecord).Operator; got != *last {
		t.Errorf("redelivery records %+v, want %+v", got, *last)
	}
	if err := h.state.Store(again.Writes); err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.state.Baseline("crm.lookup"); rec.Held || rec.LastSeq != 100 {
		t.Errorf("after the redelivery: %+v", rec)
	}
}
