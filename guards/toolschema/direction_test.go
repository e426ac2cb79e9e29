package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDriftDirection: an agent is affected by what breaks on its side of
// a field it uses (issue rule 3): a widening of what it sends or a
// narrowing of what it reads leaves it alone, the reverse halts it; a
// description of the field that changed in meaning affects it too.
func TestDriftDirection(t *testing.T) {
	optInt := `{"anyOf":[{"type":"integer"},{"type":"null"}],"default":null}`
	optIntStr := `{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}],"default":null}`
	tests := []struct {
		name     string
		side     ChangeSide
		old, new string
		affected []string
	}{
		{"input: Optional[int] widened to Optional[int|str]", SideInput, field(optInt), field(optIntStr), []string{}},
		{"input: Optional[int|str] narrowed to Optional[int]", SideInput, field(optIntStr), field(optInt), []string{"v"}},
		{"input: an optional field added under a sent object", SideInput, field(obj(`"a":{"type":"string"}`)), field(obj(`"a":{"type":"string"},"b":{"type":"string"}`)), []string{}},
		{"input: a bound loosened", SideInput, field(`{"type":"string","maxLength":10}`), field(`{"type":"string","maxLength":20}`), []string{}},
		{"input: a bound tightened", SideInput, field(`{"type":"string","maxLength":20}`), field(`{"type":"string","maxLength":10}`), []string{"v"}},
		{"output: a union loses a member", SideOutput, field(`{"anyOf":[{"type":"integer"},{"type":"string"}]}`), field(`{"type":"integer"}`), []string{}},
		{"output: a union gains a member", SideOutput, field(`{"type":"integer"}`), field(`{"anyOf":[{"type":"integer"},{"type":"string"}]}`), []string{"output:v"}},
		{"input: the field's description changes in meaning", SideInput, field(`{"type":"integer","description":"timeout in seconds"}`),
			field(`{"type":"integer","description":"timeout in milliseconds"}`), []string{"v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			surface := UsedSurface{Input: []string{"v"}}
			if tt.side == SideOutput {
				surface = UsedSurface{Output: []string{"v"}}
			}
			rep, err := EvaluateDrift(schemaTool(t, tt.side, tt.old), schemaTool(t, tt.side, tt.new), surface)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Changes) == 0 {
				t.Fatal("no change")
			}
			if diff := cmp.Diff(tt.affected, rep.Affected); diff != "" {
				t.Errorf("affected (-want +got):\n%s\nchanges %+v", diff, rep.Changes)
			}
			want := guards.DriftOnUnusedFields
			if len(tt.affected) > 0 {
				want = guards.DriftOnUsedFields
			}
			if rep.Manifest.Verdict != want {
				t.Errorf("verdict %s, want %s", rep.Manifest.Verdict, want)
			}
		})
	}
}
