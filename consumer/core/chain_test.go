package core

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/events"
)

// direct applies inputs to a core and a MemState, returning each input's
// effects.
type direct struct {
	t  *testing.T
	c  *Core
	st *MemState
}

func (d direct) apply(seq uint64, kind, key, typ, data string) Effects {
	d.t.Helper()
	eff := d.effects(seq, kind, key, typ, data)
	if err := d.st.Store(eff.Writes); err != nil {
		d.t.Fatal(err)
	}
	return eff
}

// effects applies one input and returns its effects, storing none of its
// writes.
func (d direct) effects(seq uint64, kind, key, typ, data string) Effects {
	d.t.Helper()
	tok, _ := events.KeyToken(key)
	subject := "toolsentry.telemetry." + kind + "." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"ev-%d","source":"test","type":%q,"time":"2026-10-03T10:00:00Z","datacontenttype":"application/json","data":%s}`, seq, typ, data)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		d.t.Fatal(err)
	}
	eff, err := d.c.Apply(d.st, Input{Event: ev, Subject: subject, Seq: seq})
	if err != nil {
		d.t.Fatal(err)
	}
	return eff
}

// A drift verdict told on an invocation that also has an outcome moves the
// tool's chain head to that verdict: the outcome count written after it
// must not put the old head back.
func TestInvocationWithOutcomeKeepsTheVerdictChainHead(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"3","tool":`+crmRenamed+`}`)
	eff := d.apply(2, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"agent-b","arguments":{"user_id":"u-1"},"outcome":{"status":"ok"}}`)
	if len(eff.Verdicts) != 1 {
		t.Fatalf("want one drift verdict, got %d", len(eff.Verdicts))
	}
	want, err := events.VerdictDigest(eff.Verdicts[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := d.st.Outcomes("crm.lookup")
	if !ok || o.Calls != 1 {
		t.Fatalf("outcomes %+v", o)
	}
	if o.Chain != want {
		t.Errorf("chain head %q, want the drift verdict's digest %q", o.Chain, want)
	}
}

// An observation that repeats the current version publishes no verdict
// and writes only the baseline record, which counts it; the chain head
// stays where it was. A redelivery of it, acknowledged too late, is a
// no-op.
func TestRepeatedVersionIsCountedNotReported(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	obs := func(version, tool string) string {
		return fmt.Sprintf(`{"tool_id":"crm.lookup","version":%q,"tool":%s}`, version, tool)
	}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, obs("1", crmV1))
	if rec, _ := d.st.Baseline("crm.lookup"); rec.Seen != 1 || rec.LastSeq != 1 {
		t.Fatalf("first observation: seen %d, last_seq %d; want 1 and 1", rec.Seen, rec.LastSeq)
	}
	o1, _ := d.st.Outcomes("crm.lookup")

	eff := d.apply(2, "schema", "crm.lookup", events.TypeSchemaObserved, obs("1", crmV1))
	if len(eff.Verdicts) != 0 || len(eff.Telemetry) != 0 {
		t.Fatalf("verdicts %+v, telemetry %+v: want none", eff.Verdicts, eff.Telemetry)
	}
	if len(eff.Writes) != 1 || eff.Writes[0].Bucket != Baselines {
		t.Fatalf("writes %+v, want the baseline record only", eff.Writes)
	}
	rec, _ := d.st.Baseline("crm.lookup")
	if rec.Seen != 2 || rec.LastSeq != 2 || rec.LastEventID != "ev-2" || rec.Current.Seq != 1 || !rec.LastSeen.Equal(time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("baseline seen %d, last_seq %d, current seq %d, last seen %v; want 2, 2, 1 and the event's time", rec.Seen, rec.LastSeq, rec.Current.Seq, rec.LastSeen)
	}
	if o2, _ := d.st.Outcomes("crm.lookup"); *o2 != *o1 {
		t.Errorf("outcome record %+v, want it left at %+v", o2, o1)
	}

	if again := d.apply(2, "schema", "crm.lookup", events.TypeSchemaObserved, obs("1", crmV1)); len(again.Verdicts) != 0 || len(again.Writes) != 0 {
		t.Fatalf("the redelivered repeat gave %d verdicts and %d writes, want none", len(again.Verdicts), len(again.Writes))
	}

	// The same fingerprint under another version label, or in another Tool
	// object (an annotation stating its default), is recorded as the
	// current version, and counted with it. (A change of _meta, outside
	// the fingerprint, is reported: TestToolFieldsChangeIsReportedOnce.)
	spelledOut := strings.Replace(crmV1, `{"name":"lookup",`, `{"name":"lookup","annotations":{"readOnlyHint":false},`, 1)
	for i, next := range []string{obs("1.0.1", crmV1), obs("1.0.1", spelledOut)} {
		seq := uint64(3 + i)
		eff := d.apply(seq, "schema", "crm.lookup", events.TypeSchemaObserved, next)
		if len(eff.Verdicts) != 0 {
			t.Fatalf("observation %d: verdicts %+v, want none", seq, eff.Verdicts)
		}
		if rec, _ := d.st.Baseline("crm.lookup"); rec.LastSeq != seq || rec.Current.Seq != seq || rec.Seen != seq {
			t.Errorf("observation %d: baseline last_seq %d, current seq %d, seen %d, want all %d", seq, rec.LastSeq, rec.Current.Seq, rec.Seen, seq)
		}
	}
}

// An observation whose verdict and chain head were stored but whose
// baseline write failed (the writes are not one transaction) is applied
// again on its redelivery without its verdict: the baseline is written,
// and the chain head stays on the verdict the stream has.
func TestRedeliveryAfterAPartialCommitKeepsTheChain(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":`+crmV1+`}`)

	// The drift (no agent uses the tool, so the baseline advances): only
	// the outcome record is stored.
	drift := `{"tool_id":"crm.lookup","version":"2","tool":` + crmTyped + `}`
	first := d.effects(2, "schema", "crm.lookup", events.TypeSchemaObserved, drift)
	if len(first.Verdicts) != 1 {
		t.Fatalf("want one drift verdict, got %d", len(first.Verdicts))
	}
	var outcome []Write
	for _, w := range first.Writes {
		if w.Bucket == Outcomes {
			outcome = append(outcome, w)
		}
	}
	if len(outcome) != 1 || len(first.Writes) < 2 {
		t.Fatalf("writes %+v: want the outcome record and the baseline", first.Writes)
	}
	if err := d.st.Store(outcome); err != nil {
		t.Fatal(err)
	}
	head, _ := events.VerdictDigest(first.Verdicts[0].Data)

	again := d.effects(2, "schema", "crm.lookup", events.TypeSchemaObserved, drift)
	if len(again.Verdicts) != 0 {
		t.Errorf("the redelivery published %d verdicts again", len(again.Verdicts))
	}
	for _, w := range again.Writes {
		if w.Bucket == Outcomes {
			t.Errorf("the redelivery writes the outcome record again: %+v", w.Record)
		}
	}
	if err := d.st.Store(again.Writes); err != nil {
		t.Fatal(err)
	}
	rec, _ := d.st.Baseline("crm.lookup")
	if rec.LastSeq != 2 || rec.Baseline.Version != "2" {
		t.Errorf("baseline %+v: want version 2 written at seq 2", rec)
	}
	if o, _ := d.st.Outcomes("crm.lookup"); o.Chain != head {
		t.Errorf("chain head %q, want the stored verdict's %q", o.Chain, head)
	}
}

// The same for an invocation that told its agent of a drift: stored with
// its count and chain head, its usage write failed. The redelivery writes
// the usage (the agent was told) without telling it again or counting the
// call twice.
func TestInvocationRedeliveryAfterAPartialCommit(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"3","tool":`+crmRenamed+`}`)
	call := `{"tool_id":"crm.lookup","agent_id":"agent-b","arguments":{"user_id":"u-1"},"outcome":{"status":"ok"}}`
	first := d.effects(2, "invocation", "crm.lookup", events.TypeInvocation, call)
	if len(first.Verdicts) != 1 || len(first.Writes) != 2 || first.Writes[0].Bucket != Outcomes {
		t.Fatalf("%d verdicts, writes %+v: want a drift verdict, the outcome record then the usage", len(first.Verdicts), first.Writes)
	}
	if err := d.st.Store(first.Writes[:1]); err != nil {
		t.Fatal(err)
	}
	head, _ := events.VerdictDigest(first.Verdicts[0].Data)

	again := d.effects(2, "invocation", "crm.lookup", events.TypeInvocation, call)
	if len(again.Verdicts) != 0 || len(again.Writes) != 1 || again.Writes[0].Bucket != Usage {
		t.Fatalf("redelivery: %d verdicts, writes %+v; want none and the usage record", len(again.Verdicts), again.Writes)
	}
	if err := d.st.Store(again.Writes); err != nil {
		t.Fatal(err)
	}
	o, _ := d.st.Outcomes("crm.lookup")
	if o.Chain != head || o.Calls != 1 {
		t.Errorf("outcome record %+v: want chain head %q and one call", o, head)
	}
	if later := d.apply(3, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"agent-b","arguments":{"user_id":"u-1"}}`); len(later.Verdicts) != 0 {
		t.Errorf("the agent was told again on its next call")
	}
}

// A contract that changes two workflows' verdicts, whose second workflow
// write failed: the quality record, which makes a redelivery a no-op, is
// written last, so the redelivery evaluates again. It publishes the second
// verdict again byte for byte (the stream drops the duplicate) and nothing
// for the first, whose record is current.
func TestCompositionRedeliveryAfterAPartialCommit(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	for i, id := range []string{"a", "b"} {
		d.apply(uint64(i+1), "contract", id, events.TypeContract, contract(id, 0.95, "DETERMINISTIC", "h"))
	}
	for i, w := range []string{"w1", "w2"} {
		d.apply(uint64(i+3), "workflow", w, events.TypeWorkflow, `{"composition_id":"`+w+`","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["a","b"]}}`)
	}
	lower := contract("b", 0.4, "DETERMINISTIC", "h")
	first := d.effects(5, "contract", "b", events.TypeContract, lower)
	if len(first.Verdicts) != 2 || len(first.Writes) != 3 || first.Writes[2].Bucket != Quality {
		t.Fatalf("%d verdicts, writes %+v: want two verdicts, the workflows then the quality record", len(first.Verdicts), first.Writes)
	}
	if err := d.st.Store(first.Writes[:1]); err != nil {
		t.Fatal(err)
	}
	again := d.effects(5, "contract", "b", events.TypeContract, lower)
	if len(again.Verdicts) != 1 || !bytes.Equal(again.Verdicts[0].Data, first.Verdicts[1].Data) {
		t.Fatalf("redelivery: %d verdicts; want the second one again, byte for byte", len(again.Verdicts))
	}
	if len(again.Writes) != 2 || again.Writes[0].Bucket != Workflows || again.Writes[1].Bucket != Quality {
		t.Fatalf("redelivery writes %+v: want the second workflow, then the quality record", again.Writes)
	}
	if err := d.st.Store(again.Writes); err != nil {
		t.Fatal(err)
	}
	if dup := d.apply(5, "contract", "b", events.TypeContract, lower); len(dup.Verdicts)+len(dup.Writes) != 0 {
		t.Errorf("a redelivery after the full commit: %d verdicts, %d writes; want none", len(dup.Verdicts), len(dup.Writes))
	}
}
