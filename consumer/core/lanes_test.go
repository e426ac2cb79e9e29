package core

import (
	"testing"

	"github.com/toolsentry/toolsentry/events"
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
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("checkpoint %d: %+v, want %+v", i, got[i], want[i])
		}
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
