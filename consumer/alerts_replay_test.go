package consumer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// TestReplayOfAnEarlierGuardsRepeats: a verdict stream recorded by guard
// version 1 holds a SCHEMA_MATCH for every repeated observation, without
// action or summary. This version derives none for the repeat: the replay
// calls that a policy change (exit 3), not tampering, and matches the rest.
func TestReplayOfAnEarlierGuardsRepeats(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1)) // 1, its checkpoint 2
	repeat := observation(t, "crm.lookup", crmV1)
	publishHandled(t, w.js, repeat) // 3: counted, no verdict
	first := recordedVerdicts(t, w.js)
	if len(first) != 1 || first[0].ev.SchemaVerdict.Verdict != guards.NoBaseline {
		t.Fatalf("recorded %+v, want the NO_BASELINE alone", first)
	}

	// What guard 1 published for the repeat.
	fp := first[0].ev.SchemaVerdict.CurrentFingerprint
	m := guards.EvaluateSchema(guards.ToolSchema{ToolID: "crm.lookup", Version: "1", SchemaFingerprint: fp}, &guards.SchemaBaseline{BaselineFingerprint: fp})
	old, err := names.NewSchemaVerdict(events.SchemaVerdict{
		Verdict: m.Verdict, Directive: m.Directive, ManifestDigest: m.ManifestDigest, ToolID: "crm.lookup", Version: "1",
		BaselineFingerprint: fp, CurrentFingerprint: fp, Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`),
		Migration: json.RawMessage(`{"steps":[],"blocked":null}`), GuardVersion: "1",
		InputEventID: repeat.ID, InputSubject: repeat.Subject, InputSequence: 3,
	}, time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, w.js, old)

	rep := replay(t, w.js, consumer.ReplayOptions{})
	if rep.Tampered() != 0 || rep.PolicyChanged != 1 || rep.Matched != 1 {
		t.Errorf("tampered %d, policy changed %d, matched %d; want 0, 1 and 1: %s", rep.Tampered(), rep.PolicyChanged, rep.Matched, diffsText(rep.Differences))
	}
}
