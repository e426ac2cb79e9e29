package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// TestCheckpointsCarryOutcomesToTheCompositionLane: every QualityEvery
// outcomes the tool's lane publishes its counts; a redelivered invocation
// republishes the same checkpoint (same id: the stream drops it), and a
// checkpoint applied twice changes nothing.
func TestCheckpointsCarryOutcomesToTheCompositionLane(t *testing.T) {
	c := New(Options{QualityEvery: 4})
	st := NewMemState()
	var checkpoints []events.Message
	for seq := uint64(1); seq <= 8; seq++ {
		status := "ok"
		if seq == 3 {
			status = "error"
		}
		in := invocationInput(t, seq, status)
		eff, err := c.Apply(st, in)
		if err != nil {
			t.Fatal(err)
		}
		// Redelivered before its state was written: the same checkpoint,
		// byte for byte, so the stream's duplicate window drops it.
		again, err := c.Apply(st, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Telemetry) != len(eff.Telemetry) {
			t.Fatalf("redelivery published %d checkpoints, first delivery %d", len(again.Telemetry), len(eff.Telemetry))
		}
		for i := range eff.Telemetry {
			if again.Telemetry[i].ID != eff.Telemetry[i].ID || string(again.Telemetry[i].Data) != string(eff.Telemetry[i].Data) {
				t.Errorf("redelivery published another checkpoint: %s vs %s", again.Telemetry[i].Data, eff.Telemetry[i].Data)
			}
		}
		if err := st.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		checkpoints = append(checkpoints, eff.Telemetry...)
	}
	if len(checkpoints) != 2 {
		t.Fatalf("%d checkpoints, want 2 (after outcomes 4 and 8)", len(checkpoints))
	}
	var got []events.QualityCheckpoint
	for _, m := range checkpoints {
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID != events.CheckpointID("x", ev.QualityCheckpoint.ThroughSequence) || m.ID != ev.ID {
			t.Errorf("checkpoint id %q is not derived from its tool and sequence", m.ID)
		}
		got = append(got, *ev.QualityCheckpoint)
	}
	want := []events.QualityCheckpoint{
		{ToolID: "x", Calls: 4, Successes: 3, ThroughSequence: 4},
		{ToolID: "x", Calls: 8, Successes: 7, ThroughSequence: 8},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checkpoints (-want +got):\n%s", diff)
	}
	// The composition lane applies them in order; a republished one (beyond
	// the duplicate window, at a later sequence) changes nothing.
	for i, m := range append(checkpoints, checkpoints[0]) {
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		eff, err := c.Apply(st, Input{Event: ev, Subject: m.Subject, Seq: uint64(100 + i)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 && len(eff.Writes) != 0 {
			t.Errorf("an old checkpoint applied again wrote %+v", eff.Writes)
		}
		if err := st.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
	}
	q, ok := st.Quality("x")
	if !ok || q.Calls != 8 || q.Successes != 7 || q.Through != 8 {
		t.Errorf("quality %+v, want 8 calls, 7 successes through 8", q)
	}
}

func invocationInput(t *testing.T, seq uint64, status string) Input {
	t.Helper()
	msg, err := events.Names{}.NewInvocation(events.Meta{ID: events.NewID(), Source: "test"},
		events.Invocation{AgentID: "a", ToolID: "x", UsedFields: []string{"q"}, Outcome: &events.Outcome{Status: status}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return Input{Event: ev, Subject: msg.Subject, Seq: seq}
}

// TestLanesOwnTheirRecords: a tool's lane never writes what the composition
// lane reads for composition verdicts, nor publishes composition verdicts,
// and the composition lane never writes a tool lane's records. That is what
// keeps one writer per verdict key and makes a replay in stream order read
// what the live worker read.
func TestLanesOwnTheirRecords(t *testing.T) {
	h := newHarness(t) // QualityEvery: 4
	h.send("contract", "x", events.TypeContract, contract("x", 0.99, "DETERMINISTIC", ""))
	h.send("contract", "y", events.TypeContract, contract("y", 0.99, "DETERMINISTIC", ""))
	wf := `{"composition_id":"w","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"tools":{"x":{"determinism":"DETERMINISTIC"},"y":{"accuracy":0.99,"determinism":"DETERMINISTIC"}},"structure":{"chain":["x","y"]}}`
	h.send("workflow", "w", events.TypeWorkflow, wf)
	h.observe("x", "1", crmV1)

	toolLane := map[Bucket]bool{Baselines: true, Usage: true, Outcomes: true}
	for i := range 12 {
		status := "ok"
		if i%3 == 0 {
			status = "error"
		}
		in := invocationInput(t, h.seq+1, status)
		h.seq++
		eff, err := h.core.Apply(h.state, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range eff.Writes {
			if !toolLane[w.Bucket] {
				t.Fatalf("an invocation wrote the composition lane's %s record %v", w.Bucket, w.IDs)
			}
		}
		for _, v := range eff.Verdicts {
			if ev, _ := events.Decode(v.Subject, v.Header, v.Data); ev.CompositionVerdict != nil {
				t.Fatalf("an invocation published a composition verdict")
			}
		}
		if err := h.state.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		for _, m := range eff.Telemetry {
			h.seq++
			ev, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			tok := OrderingKey("quality", "x")
			if tok != CompositionLane {
				t.Fatalf("checkpoints ordered by %q", tok)
			}
			ceff, err := h.core.Apply(h.state, Input{Event: ev, Subject: m.Subject, Seq: h.seq})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ceff.Writes {
				if toolLane[w.Bucket] {
					t.Fatalf("a checkpoint wrote the tool lane's %s record %v", w.Bucket, w.IDs)
				}
			}
			if err := h.state.Store(ceff.Writes); err != nil {
				t.Fatal(err)
			}
		}
	}
	if q, ok := h.state.Quality("x"); !ok || q.Calls != 12 {
		t.Errorf("quality after 12 outcomes: %+v", q)
	}
}

// TestToolsListFansOutToToolLanes: a tools/list result, applied in its
// server's lane, writes nothing and publishes nothing but one observation
// per tool, which each tool's lane applies (the harness appends published
// telemetry to the stream, as the live worker does).
func TestToolsListFansOutToToolLanes(t *testing.T) {
	c := New(Options{})
	list := `{"server":"crm","tools":{"tools":[` + crmV1 + `,{"name":"search","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}]}}`
	msg := fmt.Sprintf(`{"specversion":"1.0","id":"list-1","source":"test","type":%q,"data":%s}`, events.TypeSchemaObserved, list)
	ev, err := events.Decode("toolsentry.telemetry.schema.crm", nil, []byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := c.Apply(NewMemState(), Input{Event: ev, Subject: "toolsentry.telemetry.schema.crm", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Writes) != 0 || len(eff.Verdicts) != 0 || len(eff.Telemetry) != 2 {
		t.Fatalf("writes %d, verdicts %d, telemetry %d; want 0, 0, 2", len(eff.Writes), len(eff.Verdicts), len(eff.Telemetry))
	}
	again, err := c.Apply(NewMemState(), Input{Event: ev, Subject: "toolsentry.telemetry.schema.crm", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range eff.Telemetry {
		if again.Telemetry[i].ID != m.ID {
			t.Errorf("a redelivered list derives another id for tool %d", i)
		}
	}
	want := []string{"toolsentry.telemetry.schema.crm/lookup", "toolsentry.telemetry.schema.crm/search"}
	for i, m := range eff.Telemetry {
		if m.Subject != want[i] {
			t.Errorf("observation %d on %s, want %s", i, m.Subject, want[i])
		}
		d, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if d.SchemaObserved.Server != "crm" || d.SchemaObserved.IsList() {
			t.Errorf("observation %d: %+v", i, d.SchemaObserved)
		}
		if OrderingKey("schema", strings.TrimPrefix(m.Subject, "toolsentry.telemetry.schema.")) == OrderingKey("schema", "crm") {
			t.Errorf("observation %d stays in the server's lane", i)
		}
	}

	h := newHarness(t)
	got := h.apply(1, "toolsentry.telemetry.schema.crm", nil, []byte(msg))
	if len(got) != 2 || got[0].SchemaVerdict.Verdict != guards.NoBaseline || got[1].SchemaVerdict.ToolID != "crm/search" {
		t.Fatalf("verdicts %+v", got)
	}
}

// TestStageCompatibilityUsesCheckpointedSchemas: where contracts name no
// schema hashes, stage compatibility compares the tools' observed schemas,
// as checkpointed into the composition lane when a new version is observed.
func TestStageCompatibilityUsesCheckpointedSchemas(t *testing.T) {
	h := newHarness(t)
	h.send("contract", "producer", events.TypeContract, contract("producer", 0.99, "DETERMINISTIC", ""))
	h.send("contract", "consumer", events.TypeContract, contract("consumer", 0.99, "DETERMINISTIC", ""))
	h.observe("producer", "1", `{"name":"producer","inputSchema":{"type":"object"},"outputSchema":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}`)
	h.observe("consumer", "1", `{"name":"consumer","inputSchema":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}}`)
	q, ok := h.state.Quality("producer")
	if !ok || q.Fingerprint == "" || len(q.OutputSchema) == 0 {
		t.Fatalf("the producer's schemas did not reach the composition lane: %+v", q)
	}
	wf := `{"composition_id":"pc","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":true,"policy":{"require_schema_compatibility":true},"structure":{"chain":["producer","consumer"]}}`
	got := h.send("workflow", "pc", events.TypeWorkflow, wf)
	if len(got) != 1 || got[0].CompositionVerdict.Verdict != guards.SemanticIncompatible {
		t.Fatalf("string id into an integer id: %+v", got)
	}
	// The consumer's next version takes a string: the checkpoint of the new
	// version makes the composition lane evaluate the workflow again.
	got = h.observe("consumer", "2", `{"name":"consumer","inputSchema":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}`)
	var verdict guards.CompositionVerdict
	for _, e := range got {
		if e.CompositionVerdict != nil {
			verdict = e.CompositionVerdict.Verdict
		}
	}
	if verdict == "" || verdict == guards.SemanticIncompatible {
		t.Fatalf("after the compatible version: %q (%+v)", verdict, got)
	}
}
