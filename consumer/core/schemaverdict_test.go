package core

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// TestNewSchemaVerdict holds the one builder of the core's schema verdicts
// to what every verdict records: the manifest, the tool, agent and
// fingerprints it is about, its input, and the report's changes, affected
// fields and migration, or none of them without a report.
func TestNewSchemaVerdict(t *testing.T) {
	in := Input{Event: events.Event{ID: "ev-1"}, Subject: "toolsentry.telemetry.schema.0.crm=2Elookup", Seq: 42}
	m := guards.SchemaManifest{Verdict: guards.DriftOnUsedFields, Directive: "HALT", ManifestDigest: "sha256:abc"}
	cur := ToolVersion{Version: "2", Fingerprint: "fp-new"}
	rep := toolschema.DriftReport{
		Changes:   []toolschema.Change{},
		Affected:  []string{"user_id"},
		Migration: toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{}},
	}
	want := events.SchemaVerdict{
		Verdict: m.Verdict, Directive: m.Directive, ManifestDigest: m.ManifestDigest,
		ToolID: "crm.lookup", AgentID: "agent-a", Version: "2",
		BaselineFingerprint: "fp-old", CurrentFingerprint: "fp-new",
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`), Migration: noMigration,
		GuardVersion: guards.Version,
		InputEventID: "ev-1", InputSubject: in.Subject, InputSequence: 42,
	}
	if diff := cmp.Diff(want, newSchemaVerdict(in, m, "crm.lookup", "agent-a", "fp-old", cur, nil)); diff != "" {
		t.Errorf("without a report (-want +got):\n%s", diff)
	}
	want.Changes, want.Affected, want.Migration = rawJSON(rep.Changes), rawJSON(rep.Affected), rawJSON(rep.Migration)
	if diff := cmp.Diff(want, newSchemaVerdict(in, m, "crm.lookup", "agent-a", "fp-old", cur, &rep)); diff != "" {
		t.Errorf("with a report (-want +got):\n%s", diff)
	}
	if string(want.Affected) != `["user_id"]` {
		t.Errorf("affected of the report = %s, want [\"user_id\"]", want.Affected)
	}
}
