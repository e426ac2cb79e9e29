package guards_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func mustTool(t *testing.T, doc string) toolschema.ToolDefinition {
	t.Helper()
	defs, err := toolschema.ParseToolDocument([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return defs[0]
}

// TestSchemaActionFromDrift derives the action from real drift reports: a
// rename migrates, a removed field the agent sends halts, a changed output
// the agent reads halts, drift elsewhere proceeds.
func TestSchemaActionFromDrift(t *testing.T) {
	const v1 = `{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"},"debug":{"type":"boolean"}},"required":["user_id"]},
		"outputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`
	cases := []struct {
		name      string
		v2        string
		args      string
		output    []string
		want      guards.Action
		reasonHas string
	}{
		{
			name: "rename",
			v2: `{"name":"lookup","inputSchema":{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"},"debug":{"type":"boolean"}},"required":["userId"]},
				"outputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`,
			args: `{"user_id":"u","limit":5}`,
			want: guards.ActionMigrate,
		},
		{
			name: "rename with an unused field removed",
			v2: `{"name":"lookup","inputSchema":{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]},
				"outputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`,
			args: `{"user_id":"u"}`,
			want: guards.ActionMigrate,
		},
		{
			name: "removed field sent",
			v2: `{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"debug":{"type":"boolean"}},"required":["user_id"]},
				"outputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`,
			args:      `{"user_id":"u","limit":5}`,
			want:      guards.ActionHalt,
			reasonHas: "limit",
		},
		{
			name: "output read changed",
			v2: `{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"},"debug":{"type":"boolean"}},"required":["user_id"]},
				"outputSchema":{"type":"object","properties":{"name":{"type":"integer"}}}}`,
			args:      `{"user_id":"u"}`,
			output:    []string{"name"},
			want:      guards.ActionHalt,
			reasonHas: "output:name",
		},
		{
			name: "drift on unused field",
			v2: `{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]},
				"outputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`,
			args: `{"user_id":"u"}`,
			want: guards.ActionProceed,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var args any
			if err := json.Unmarshal([]byte(c.args), &args); err != nil {
				t.Fatal(err)
			}
			rep, err := toolschema.EvaluateDrift(mustTool(t, v1), mustTool(t, c.v2), toolschema.UsedSurface{Input: toolschema.SurfaceFromArguments(args), Output: c.output})
			if err != nil {
				t.Fatal(err)
			}
			got, reason := toolschema.SchemaAction(rep.Manifest.Verdict, rep.Affected, rep.Migration)
			if got != c.want || !strings.Contains(reason, c.reasonHas) {
				t.Errorf("SchemaAction(%s, %q, %+v) = %s (%s), want %s with %q", rep.Manifest.Verdict, rep.Affected, rep.Migration, got, reason, c.want, c.reasonHas)
			}
		})
	}
}

func TestSchemaActionTable(t *testing.T) {
	move := toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{{Op: toolschema.OpMove, Path: "a", To: "b"}}}
	cases := []struct {
		verdict  guards.SchemaVerdict
		affected []string
		plan     toolschema.MigrationPlan
		want     guards.Action
	}{
		{guards.SchemaMatch, nil, toolschema.MigrationPlan{}, guards.ActionProceed},
		{guards.NoBaseline, nil, toolschema.MigrationPlan{}, guards.ActionProceed},
		{guards.DriftOnUnusedFields, nil, toolschema.MigrationPlan{}, guards.ActionProceed},
		{guards.DriftOnUsedFields, []string{"a"}, move, guards.ActionMigrate},
		{guards.DriftOnUsedFields, []string{"b"}, move, guards.ActionMigrate},
		{guards.DriftOnUsedFields, []string{"a.x"}, move, guards.ActionMigrate},
		{guards.DriftOnUsedFields, []string{"a", "c"}, move, guards.ActionHalt},
		{guards.DriftOnUsedFields, nil, move, guards.ActionHalt},
		{guards.DriftOnUsedFields, []string{"tool:description"}, move, guards.ActionHalt},
		{guards.DriftOnUsedFields, []string{"a"}, toolschema.MigrationPlan{Steps: move.Steps, Blocked: []toolschema.MigrationBlocker{{Path: "a", When: toolschema.BlockWhenPresent}}}, guards.ActionHalt},
		{guards.DriftOnUsedFields, []string{"a"}, toolschema.MigrationPlan{Steps: move.Steps, Blocked: []toolschema.MigrationBlocker{{Path: "z", When: toolschema.BlockWhenPresent}}}, guards.ActionMigrate},
		{"SOMETHING_NEW", nil, toolschema.MigrationPlan{}, guards.ActionHalt},
	}
	for _, c := range cases {
		if got, reason := toolschema.SchemaAction(c.verdict, c.affected, c.plan); got != c.want {
			t.Errorf("SchemaAction(%s, %q) = %s (%s), want %s", c.verdict, c.affected, got, reason, c.want)
		}
	}
	for v, want := range map[guards.CompositionVerdict]guards.Action{
		guards.SingleTool:              guards.ActionProceed,
		guards.CompositionMeetsQuality: guards.ActionProceed,
		guards.CompositionDegraded:     guards.ActionHalt,
		guards.SemanticIncompatible:    guards.ActionHalt,
		"SOMETHING_NEW":                guards.ActionHalt,
	} {
		if got := guards.CompositionAction(v); got != want {
			t.Errorf("CompositionAction(%s) = %s, want %s", v, got, want)
		}
	}
	for _, a := range []guards.Action{guards.ActionProceed, guards.ActionMigrate, guards.ActionHalt} {
		if !a.Valid() {
			t.Errorf("%s not valid", a)
		}
	}
	if guards.Action("GO").Valid() {
		t.Error("GO is valid")
	}
}
