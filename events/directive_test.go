package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func TestDirectiveKeysAndFilters(t *testing.T) {
	k, err := events.SchemaDirectiveKey("crm.lookup", "agent 7")
	if err != nil || k != "schema.crm=2Elookup.agent=207" {
		t.Errorf("agent key = %q, %v", k, err)
	}
	k, err = events.SchemaDirectiveKey("crm.lookup", "")
	if err != nil || k != "schema.crm=2Elookup" {
		t.Errorf("tool-wide key = %q, %v", k, err)
	}
	k, err = events.CompositionDirectiveKey("etl.nightly")
	if err != nil || k != "composition.etl=2Enightly" {
		t.Errorf("composition key = %q, %v", k, err)
	}
	f, err := events.SchemaDirectiveFilter("crm.lookup")
	if err != nil || f != "schema.crm=2Elookup.*" {
		t.Errorf("tool filter = %q, %v", f, err)
	}
	fs, err := events.AgentDirectiveFilters("agent 7")
	if diff := cmp.Diff([]string{"schema.*.agent=207", "schema.*", "composition.*"}, fs); err != nil || diff != "" {
		t.Errorf("agent filters (-want +got):\n%s %v", diff, err)
	}
	if _, err := events.AgentDirectiveFilters(""); !errors.Is(err, events.ErrBadKey) {
		t.Errorf("empty agent: %v, want ErrBadKey", err)
	}
	d := events.Directive{Guard: "nonsense"}
	if _, err := d.Key(); !errors.Is(err, events.ErrBadKey) {
		t.Errorf("Key of a directive without guard: %v", err)
	}
}

var (
	digest1 = strings.Repeat("1", 64)
	digest2 = strings.Repeat("2", 64)
)

func decodeMsg(t *testing.T, m events.Message) events.Event {
	t.Helper()
	ev, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestDirectiveOfSchemaVerdict(t *testing.T) {
	var names events.Names
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	plan := toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{{Op: toolschema.OpMove, Path: "user_id", To: "userId", Reason: "renamed"}}, Blocked: []toolschema.MigrationBlocker{}}
	planJSON, _ := json.Marshal(plan)
	m, err := names.NewSchemaVerdict(events.SchemaVerdict{
		Verdict: guards.DriftOnUsedFields, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		ManifestDigest: digest1, ToolID: "crm.lookup", AgentID: "a", Version: "2",
		BaselineFingerprint: "sha256:old", CurrentFingerprint: "sha256:new",
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`["user_id"]`), Migration: planJSON,
		GuardVersion: guards.Version, InputEventID: "in-1", InputSubject: "toolsentry.telemetry.schema.crm=2Elookup", InputSequence: 3,
	}, at)
	if err != nil {
		t.Fatal(err)
	}
	ev := decodeMsg(t, m)
	got, err := events.DirectiveOf(ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	want := events.Directive{
		Guard: "schema", ToolID: "crm.lookup", AgentID: "a", Action: guards.ActionMigrate,
		Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		Reason:    "the migration addresses every affected field",
		Verdict:   events.VerdictRef{Name: "DRIFT_ON_USED_FIELDS", ID: ev.ID, Sequence: 42, ManifestDigest: digest1, GuardVersion: guards.Version, Time: at},
		Migration: plan, Affected: []string{"user_id"},
		FromFingerprint: "sha256:old", ToFingerprint: "sha256:new", Held: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DirectiveOf (-want +got):\n%s", diff)
	}
	if k, _ := got.Key(); k != "schema.crm=2Elookup.a" {
		t.Errorf("key %q", k)
	}

	// The same drift found from an invocation does not hold the baseline.
	m, err = names.NewSchemaVerdict(events.SchemaVerdict{
		Verdict: guards.DriftOnUsedFields, Directive: "HALT", ManifestDigest: digest2, ToolID: "crm.lookup", AgentID: "a",
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`["limit"]`),
		Migration:    json.RawMessage(`{"steps":[],"blocked":[{"path":"limit","when":"present","reason":"removed"}]}`),
		GuardVersion: guards.Version, InputEventID: "in-2", InputSubject: "toolsentry.telemetry.invocation.crm=2Elookup", InputSequence: 4,
	}, at)
	if err != nil {
		t.Fatal(err)
	}
	got, err = events.DirectiveOf(decodeMsg(t, m), 43)
	if err != nil {
		t.Fatal(err)
	}
	if got.Action != guards.ActionHalt || got.Held || len(got.Migration.Blocked) != 1 || got.Reason != "cannot migrate limit: removed" {
		t.Errorf("unmigratable drift: %+v", got)
	}
}

func TestDirectiveOfCompositionVerdict(t *testing.T) {
	var names events.Names
	m, err := names.NewCompositionVerdict(events.CompositionVerdict{
		Verdict: guards.CompositionDegraded, Directive: "HALT: Composed quality 77.38% < requirement 95.00%.",
		ManifestDigest: digest1, CompositionID: "etl", ComposedQuality: 0.7738, GuardVersion: guards.Version,
		InputEventID: "in", InputSubject: "toolsentry.telemetry.workflow.etl", InputSequence: 9,
	}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.DirectiveOf(decodeMsg(t, m), 7)
	if err != nil {
		t.Fatal(err)
	}
	if got.Action != guards.ActionHalt || got.CompositionID != "etl" || got.Verdict.Sequence != 7 || got.Verdict.Name != "COMPOSITION_DEGRADED" {
		t.Errorf("%+v", got)
	}
	if k, _ := got.Key(); k != "composition.etl" {
		t.Errorf("key %q", k)
	}
	if _, err := events.DirectiveOf(events.Event{Kind: events.KindInvocation}, 1); !errors.Is(err, events.ErrBadEvent) {
		t.Errorf("an invocation: %v, want ErrBadEvent", err)
	}
}

// A migration without steps or blockers, in any of the forms that DirectiveOf
// takes without decoding, gives what decoding it gives.
func TestDirectiveOfEmptyMigration(t *testing.T) {
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	var want *events.Directive
	for _, raw := range []string{
		`{ "steps": [], "blocked": [] }`, // decoded
		`{"blocked":null,"steps":[]}`, `{"blocked":[],"steps":[]}`, `{"blocked":null,"steps":null}`, `{"blocked":[],"steps":null}`,
		`null`,
	} {
		ev := events.Event{
			Kind: events.KindSchemaVerdict, ID: "v-1", Time: at,
			SchemaVerdict: &events.SchemaVerdict{
				Verdict: guards.SchemaMatch, Directive: "PROCEED", ManifestDigest: digest1, ToolID: "crm.lookup",
				Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`), Migration: json.RawMessage(raw),
				GuardVersion: guards.Version, InputEventID: "in-1", InputSubject: "toolsentry.telemetry.schema.crm=2Elookup", InputSequence: 3,
			},
		}
		got, err := events.DirectiveOf(ev, 42)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got.Migration.Steps == nil || got.Migration.Blocked == nil || got.Affected == nil {
			t.Errorf("%s: nil where DirectiveOf gives empty lists: %+v", raw, got)
		}
		if want == nil {
			want = &got
			continue
		}
		if diff := cmp.Diff(*want, got); diff != "" {
			t.Errorf("%s (-decoded +taken as is):\n%s", raw, diff)
		}
	}
}
