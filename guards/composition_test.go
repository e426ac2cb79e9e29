package guards

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func tq(id string, acc float64, det, out, in string) ToolQuality {
	return ToolQuality{ToolID: id, Accuracy: acc, Determinism: det, OutputSchemaHash: out, ExpectedInputSchemaHash: in}
}

// The digests below were computed with the seed's own Python (hashlib.sha256
// over json.dumps(..., sort_keys=True) or the gate's literal string).
func TestEvaluateCompositionGates(t *testing.T) {
	five := make([]ToolQuality, 5)
	for i := range five {
		five[i] = tq(string(rune('a'+i)), 0.95, Deterministic, "h", "h")
	}
	tests := []struct {
		name   string
		comp   ToolComposition
		policy CompositionPolicy
		want   CompositionManifest
	}{
		{
			name: "gate 1: no tools is a single-tool workflow of quality 1",
			comp: ToolComposition{CompositionID: "c"},
			want: CompositionManifest{SingleTool, 1, "PROCEED: Single tool workflow, quality 1.00.", "b274a6cf0c95baa9d72503d7edf888d08ef6e3b9722024d245e6408432265b27"},
		},
		{
			name: "gate 1: one tool",
			comp: ToolComposition{CompositionID: "c", Tools: []ToolQuality{tq("a", 0.9, NonDeterministic, "x", "y")}},
			want: CompositionManifest{SingleTool, 0.9, "PROCEED: Single tool workflow, quality 0.90.", "603352712b332d98e1b3490fbaf09defd6d112aa47fff09862b2d66aec957549"},
		},
		{
			name:   "gate 2: schema mismatch at the second edge",
			comp:   ToolComposition{CompositionID: "c", Tools: []ToolQuality{tq("a", 1, Deterministic, "h", "h"), tq("b", 1, Deterministic, "h2", "h"), tq("c", 1, Deterministic, "h", "h")}},
			policy: CompositionPolicy{RequireSchemaCompatibility: true},
			want:   CompositionManifest{SemanticIncompatible, 0, "HALT: b output schema != c input schema.", "0250d052e9203aaed351dc953197a2b81b0cb6b237de8e619fe6b226ed3d72b7"},
		},
		{
			name: "gate 2 skipped without the policy; gate 3 mixed determinism",
			comp: ToolComposition{CompositionID: "c", Tools: []ToolQuality{tq("a", 1, Deterministic, "h", "x"), tq("b", 1, NonDeterministic, "h", "y")}},
			want: CompositionManifest{CompositionDegraded, 0, "HALT: Mixing deterministic and non-deterministic tools without explicit acceptance.", "926b38601122e636c3e050e07c5a93db2a1f711ba74e23c8da28737c0f7d2f87"},
		},
		{
			name: "gate 4: the seed's 5 x 95% = 77.38% below a 95% requirement",
			comp: ToolComposition{CompositionID: "c", Tools: five, WorkflowQualityRequirement: 0.95},
			want: CompositionManifest{CompositionDegraded, 0.7737809374999999, "HALT: Composed quality 77.38% < requirement 95.00%.", "0144c3440813b88ba6d9f65dbe96fc0be5d41a475a0bf68f58f9ddbfb9b6cd02"},
		},
		{
			name: "gate 5: mixed determinism accepted, requirement equal to the composed quality",
			comp: ToolComposition{CompositionID: "c", Tools: []ToolQuality{tq("a", 0.5, Deterministic, "h", "h"), tq("b", 0.5, NonDeterministic, "h", "h")}, WorkflowQualityRequirement: 0.25, IntroductionOfNondeterminismAcceptable: true},
			want: CompositionManifest{CompositionMeetsQuality, 0.25, "PROCEED: 2-tool composition, quality 25.00%.", "c58686af86978f528d8af07b09d46cd013c8d326435453547058c5f12f0463ae"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EvaluateComposition(tt.comp, tt.policy)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EvaluateComposition (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolCompositionValidate(t *testing.T) {
	ok := tq("a", 0.5, Deterministic, "", "")
	tests := []struct {
		name string
		comp ToolComposition
		want string // substring of the error; "" = valid
	}{
		{"valid", ToolComposition{Tools: []ToolQuality{ok}, WorkflowQualityRequirement: 1}, ""},
		{"requirement above 1", ToolComposition{WorkflowQualityRequirement: 1.01}, "workflow_quality_requirement 1.01 is not a number in [0, 1]"},
		{"requirement negative", ToolComposition{WorkflowQualityRequirement: -0.1}, "workflow_quality_requirement -0.1"},
		{"requirement NaN", ToolComposition{WorkflowQualityRequirement: math.NaN()}, "workflow_quality_requirement NaN"},
		{"accuracy infinite", ToolComposition{Tools: []ToolQuality{ok, tq("b", math.Inf(1), Deterministic, "", "")}}, "tools[1]: invalid input: accuracy +Inf"},
		{"determinism misspelt", ToolComposition{Tools: []ToolQuality{tq("a", 0.5, "deterministic", "", "")}}, `tools[0]: invalid input: determinism "deterministic", want "DETERMINISTIC" or "NON_DETERMINISTIC"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.comp.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want one containing %q and wrapping ErrInvalid", err, tt.want)
			}
		})
	}
}
