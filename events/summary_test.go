package events

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/schemas"
)

func TestSchemaVerdictDescribe(t *testing.T) {
	base := func(v guards.SchemaVerdict, agent, changes, affected, migration string) SchemaVerdict {
		return SchemaVerdict{Verdict: v, ToolID: "github/search_issues", AgentID: agent,
			Changes: json.RawMessage(changes), Affected: json.RawMessage(affected), Migration: json.RawMessage(migration)}
	}
	const none = `{"steps":[],"blocked":null}`
	tests := []struct {
		name    string
		sv      SchemaVerdict
		action  guards.Action
		summary string
	}{
		{"new tool", base(guards.NoBaseline, "", `[]`, `[]`, none), guards.ActionProceed, "new tool github/search_issues, baselined"},
		{"back to the baseline", base(guards.SchemaMatch, "", `[]`, `[]`, none), guards.ActionProceed, "github/search_issues matches its baseline"},
		{"an agent integrated", base(guards.SchemaMatch, "triage-bot", `[]`, `[]`, none), guards.ActionProceed,
			"triage-bot integrated github/search_issues's current version; its directive clears"},
		{"unused, an agent", base(guards.DriftOnUnusedFields, "triage-bot", `[{"path":"sort"},{"path":"order"}]`, `[]`, none), guards.ActionProceed,
			"github/search_issues changed (2 changes), on nothing triage-bot uses"},
		{"unused, no usage known", base(guards.DriftOnUnusedFields, "", `[{"path":"sort"}]`, `[]`, none), guards.ActionProceed,
			"github/search_issues changed (1 change); no agent's usage is known"},
		{"rename", base(guards.DriftOnUsedFields, "triage-bot", `[{"path":"per_page"}]`, `["per_page"]`,
			`{"steps":[{"op":"move","path":"per_page","to":"perPage","reason":"renamed"}],"blocked":[]}`), guards.ActionMigrate,
			"triage-bot must send perPage instead of per_page; migration available"},
		{"rename and convert; a step on an unused field left out", base(guards.DriftOnUsedFields, "triage-bot", `[]`, `["per_page","issue_number"]`,
			`{"steps":[{"op":"move","path":"per_page","to":"perPage","reason":"r"},{"op":"convert","path":"issue_number","type":"integer","reason":"r"},{"op":"move","path":"sort","to":"sortBy","reason":"r"}],"blocked":[]}`),
			guards.ActionMigrate, "triage-bot must send perPage instead of per_page, send issue_number as integer; migration available"},
		{"a default pinned: no value named", base(guards.DriftOnUsedFields, "triage-bot", `[]`, `["include_closed"]`,
			`{"steps":[{"op":"add_if_absent","path":"include_closed","value":"secret-default","reason":"r"}],"blocked":[]}`),
			guards.ActionMigrate, "triage-bot must send include_closed explicitly (its default changed); migration available"},
		{"removed: a halt with the reason", base(guards.DriftOnUsedFields, "triage-bot", `[]`, `["per_page"]`,
			`{"steps":[],"blocked":[{"path":"per_page","when":"present","reason":"field per_page was removed without a counterpart"}]}`),
			guards.ActionHalt, "triage-bot must not call github/search_issues: cannot migrate per_page: field per_page was removed without a counterpart"},
		{"an output field: a halt", base(guards.DriftOnUsedFields, "report-bot", `[]`, `["output:total"]`, none), guards.ActionHalt,
			"report-bot must not call github/search_issues: drift on output:total: no rewrite of the payload can migrate it"},
		{"an unknown verdict", base("SOMETHING_NEW", "", `[]`, `[]`, none), guards.ActionHalt,
			"github/search_issues: unknown verdict SOMETHING_NEW, unknown schema verdict SOMETHING_NEW"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			action, summary, err := tt.sv.Describe()
			if err != nil {
				t.Fatal(err)
			}
			if action != tt.action || summary != tt.summary {
				t.Errorf("Describe = %q, %q\nwant       %q, %q", action, summary, tt.action, tt.summary)
			}
			if strings.Contains(summary, "secret") {
				t.Errorf("summary %q names a value", summary)
			}
			// The directive in force takes the same action.
			d, err := DirectiveOf(Event{Kind: KindSchemaVerdict, ID: "v", SchemaVerdict: &tt.sv}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != action {
				t.Errorf("directive action %s, verdict action %s", d.Action, action)
			}
		})
	}

	bad := base(guards.DriftOnUsedFields, "a", `[]`, `"per_page"`, none)
	if _, _, err := bad.Describe(); err == nil {
		t.Error("affected fields that are no array described")
	}
}

func TestCompositionVerdictDescribe(t *testing.T) {
	tests := []struct {
		verdict   guards.CompositionVerdict
		directive string
		action    guards.Action
		summary   string
	}{
		{guards.CompositionDegraded, "HALT: Composed quality 77.38% < requirement 95.00%.", guards.ActionHalt,
			"workflow etl must not run: composed quality 77.38% < requirement 95.00%"},
		{guards.CompositionMeetsQuality, "PROCEED: 2-tool composition, quality 90.25%.", guards.ActionProceed,
			"workflow etl may run: 2-tool composition, quality 90.25%"},
		{guards.SingleTool, "PROCEED: Single tool workflow, quality 0.90.", guards.ActionProceed,
			"workflow etl may run: single tool workflow, quality 0.90"},
		{guards.SemanticIncompatible, "HALT: a output schema != b input schema.", guards.ActionHalt,
			"workflow etl must not run: a output schema != b input schema"},
	}
	for _, tt := range tests {
		v := CompositionVerdict{Verdict: tt.verdict, Directive: tt.directive, CompositionID: "etl"}
		if action, summary := v.Describe(); action != tt.action || summary != tt.summary {
			t.Errorf("%s: Describe = %q, %q\nwant %q, %q", tt.verdict, action, summary, tt.action, tt.summary)
		}
	}
}

// A summary is one line within the verdict schemas' maxLength.
func TestSummaryIsOneShortLine(t *testing.T) {
	long := SchemaVerdict{Verdict: guards.NoBaseline, ToolID: strings.Repeat("é", 128) + "\n" + strings.Repeat("t", 400)}
	_, s, err := long.Describe()
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(s); n != MaxSummaryLen || strings.ContainsAny(s, "\n\t") || !strings.HasSuffix(s, "…") {
		t.Errorf("summary of %d characters: %q", n, s)
	}
	for _, name := range []string{"verdict.schema.v1", "verdict.composition.v1"} {
		doc, err := schemas.Document(name)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Properties struct {
				Summary struct {
					MaxLength int `json:"maxLength"`
				} `json:"summary"`
				Action struct {
					Enum []guards.Action `json:"enum"`
				} `json:"action"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(doc, &s); err != nil {
			t.Fatal(err)
		}
		if s.Properties.Summary.MaxLength != MaxSummaryLen {
			t.Errorf("%s: summary maxLength %d, MaxSummaryLen %d", name, s.Properties.Summary.MaxLength, MaxSummaryLen)
		}
		for _, a := range s.Properties.Action.Enum {
			if !a.Valid() {
				t.Errorf("%s: action %q is no action", name, a)
			}
		}
		if len(s.Properties.Action.Enum) != 3 {
			t.Errorf("%s: actions %v", name, s.Properties.Action.Enum)
		}
	}
}
