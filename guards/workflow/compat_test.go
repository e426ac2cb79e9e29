package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wfSchemaTool is a deterministic tool of accuracy 0.99 with the given JSON
// Schemas ("" for none).
func wfSchemaTool(in, out string) WorkflowTool {
	t := WorkflowTool{Accuracy: wfPtr(0.99), Determinism: guards.Deterministic}
	if in != "" {
		t.InputSchema = json.RawMessage(in)
	}
	if out != "" {
		t.OutputSchema = json.RawMessage(out)
	}
	return t
}

const wfUserOut = `{"type": "object", "properties": {"user_id": {"type": "integer"}, "email": {"type": "string"}, "plan": {"type": "string"}}, "required": ["user_id", "email"]}`

type wfCompatCase struct {
	name      string
	tools     map[string]WorkflowTool
	structure Node
	want      []EdgeIncompatibility
}

// workflow is the case with the compatibility policy on.
func (c wfCompatCase) workflow() Workflow {
	w := wfLenient(c.structure, c.tools)
	w.Policy.RequireSchemaCompatibility = true
	return w
}

func wfCompatCases() []wfCompatCase {
	src, x, y, p1, p2, r := Tool("src"), Tool("x"), Tool("y"), Tool("p1"), Tool("p2"), Tool("r")
	return []wfCompatCase{
		{
			name: "fits: required fields present, integer into number, extra output ignored",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", wfUserOut),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"user_id": {"type": "number"}, "email": {"type": "string"}, "cc": {"type": "string"}}, "required": ["user_id"]}`, ""),
			},
			structure: Chain(src, x),
		},
		{
			name: "a renamed field is missing, an optional one not guaranteed",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", wfUserOut),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"userId": {"type": "integer"}}, "required": ["userId", "plan"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "plan", Problem: FieldOptional, Want: "required", Got: "optional"},
				{Field: "userId", Problem: FieldMissing},
			}}},
		},
		{
			name: "number into integer, null into string, wrong type of an optional input field",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "object", "properties": {"n": {"type": "number"}, "s": {"type": ["string", "null"]}, "o": {"type": "boolean"}}, "required": ["n", "s"]}`),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}, "o": {"type": "string"}}, "required": ["n", "s"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "n", Problem: FieldType, Want: "integer", Got: "number"},
				{Field: "o", Problem: FieldType, Want: "string", Got: "boolean"},
				{Field: "s", Problem: FieldType, Want: "string", Got: "null|string"},
			}}},
		},
		{
			name: "nested objects, array items, enums, through local $refs",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "object", "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string"}, "currency": {"enum": ["EUR", "usd"]}}, "required": ["sku", "currency"]}},
					"properties": {"user": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}, "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}}}, "required": ["user", "lines"]}`),
				"x": wfSchemaTool(`{"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}, "required": ["id", "name"]},
					"lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "integer"}, "currency": {"enum": ["EUR", "USD"]}}, "required": ["sku", "currency"]}}}, "required": ["user", "lines"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "lines[].currency", Problem: FieldEnum, Want: "one of the input's enum", Got: `"usd"`},
				{Field: "lines[].sku", Problem: FieldType, Want: "integer", Got: "string"},
				{Field: "user.id", Problem: FieldMissing},
			}}},
		},
		{
			name: "each parallel branch receives the predecessor's output",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", wfUserOut),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}`, ""),
				"y":   wfSchemaTool(`{"type": "object", "properties": {"phone": {"type": "string"}}, "required": ["phone"]}`, ""),
			},
			structure: Chain(src, ParallelAll(x, y)),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "y", At: "structure.chain[1].parallel.of[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "phone", Problem: FieldMissing},
			}}},
		},
		{
			name: "the successor of a parallel block receives the union of the outputs",
			tools: map[string]WorkflowTool{
				"p1": wfSchemaTool("", `{"type": "object", "properties": {"a": {"type": "string"}, "id": {"type": "string"}}, "required": ["a", "id"]}`),
				"p2": wfSchemaTool("", `{"type": "object", "properties": {"b": {"type": "integer"}, "id": {"type": "integer"}}, "required": ["b"]}`),
				"r":  wfSchemaTool(`{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}, "id": {"type": "string"}, "c": {}}, "required": ["a", "b", "id", "c"]}`, ""),
			},
			structure: Chain(ParallelAny(p1, p2), r),
			want: []EdgeIncompatibility{{From: []string{"p1", "p2"}, To: "r", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "c", Problem: FieldMissing},
				// p1 guarantees id, but p2's integer id may be the one merged
				{Field: "id", Problem: FieldType, Want: "string", Got: "integer|string"},
			}}},
		},
		{
			name: "the successor of a conditional must fit every alternative",
			tools: map[string]WorkflowTool{
				"p1": wfSchemaTool("", `{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}`),
				"p2": wfSchemaTool("", `{"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}`),
				"r":  wfSchemaTool(`{"type": "object", "required": ["a"]}`, ""),
			},
			structure: Chain(Conditional(Branch{0.5, p1}, Branch{0.5, p2}), r),
			want: []EdgeIncompatibility{{From: []string{"p1", "p2"}, To: "r", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "a", Problem: FieldOptional, Want: "required", Got: "optional"},
			}}},
		},
		{
			name: "a recursive schema is checked once per pair of nodes",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "object", "properties": {"value": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}, "required": ["value", "children"]}`),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#"}}}, "required": ["value", "children"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "value", Problem: FieldType, Want: "integer", Got: "string"},
			}}},
		},
		{
			name: "anyOf in an output: every alternative must provide; allOf members add up",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
					"anyOf": [{"properties": {"id": {"type": "string"}}, "required": ["id"]}, {"properties": {"error": {"type": "string"}}, "required": ["error"]}]}`),
				"x": wfSchemaTool(`{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "id": {"type": "string"}}, "required": ["a", "b", "id"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "id", Problem: FieldOptional, Want: "required", Got: "optional"},
			}}},
		},
		{
			name: "anyOf in an input: one alternative must fit",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}`),
				"x":   wfSchemaTool(`{"anyOf": [{"type": "object", "required": ["id"]}, {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}]}`, ""),
				"y":   wfSchemaTool(`{"anyOf": [{"type": "object", "required": ["id", "key"]}, {"type": "object", "properties": {"name": {"type": "integer"}}, "required": ["name"]}]}`, ""),
			},
			structure: ParallelAll(Chain(src, x), Chain(src, y)),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "y", At: "structure.parallel.of[1].chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "name", Problem: FieldType, Want: "integer", Got: "string"},
			}}},
		},
		{
			name: "a schema on one side only: the seed's hash equality",
			tools: map[string]WorkflowTool{
				"src": {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, OutputSchema: json.RawMessage(wfUserOut), OutputSchemaHash: "h"},
				"x":   {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, ExpectedInputSchemaHash: "h"},
				"y":   {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, ExpectedInputSchemaHash: "g"},
			},
			structure: Chain(src, ParallelAll(x, y)),
			want:      []EdgeIncompatibility{{From: []string{"src"}, To: "y", At: "structure.chain[1].parallel.of[1]", Check: CheckHash, OutputSchemaHash: "h", ExpectedInputSchemaHash: "g"}},
		},
		{
			name: "hashes: one edge per producer of a union",
			tools: map[string]WorkflowTool{
				"p1": {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, OutputSchemaHash: "h"},
				"p2": {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, OutputSchemaHash: "g"},
				"r":  {Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, ExpectedInputSchemaHash: "h"},
			},
			structure: Chain(KOfN(1, p1, p2), r),
			want:      []EdgeIncompatibility{{From: []string{"p2"}, To: "r", At: "structure.chain[1]", Check: CheckHash, OutputSchemaHash: "g", ExpectedInputSchemaHash: "h"}},
		},
		{
			name: "an enum without a type sends its values' types",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "object", "properties": {"currency": {"enum": ["EUR", "USD"]}, "level": {"enum": [1, 2]}, "ratio": {"const": 0.5}}, "required": ["currency", "level", "ratio"]}`),
				"x":   wfSchemaTool(`{"type": "object", "properties": {"currency": {"type": "string"}, "level": {"type": "integer"}, "ratio": {"type": "integer"}}, "required": ["currency", "level", "ratio"]}`, ""),
			},
			structure: Chain(src, x),
			want: []EdgeIncompatibility{{From: []string{"src"}, To: "x", At: "structure.chain[1]", Check: CheckSchema, Fields: []FieldIssue{
				{Field: "ratio", Problem: FieldType, Want: "integer", Got: "number"},
			}}},
		},
		{
			name: "the value itself of another type; names with path characters escaped",
			tools: map[string]WorkflowTool{
				"src": wfSchemaTool("", `{"type": "array"}`),
				"x":   wfSchemaTool(`{"type": "object", "required": ["a.b"]}`, ""),
				"p1":  wfSchemaTool("", `{"type": "object", "properties": {"a.b": {"type": "string"}}}`),
			},
			structure: ParallelAll(Chain(src, x), Chain(p1, x)),
			want: []EdgeIncompatibility{
				{From: []string{"src"}, To: "x", At: "structure.parallel.of[0].chain[1]", Check: CheckSchema, Fields: []FieldIssue{
					{Field: "", Problem: FieldType, Want: "object", Got: "array"},
				}},
				{From: []string{"p1"}, To: "x", At: "structure.parallel.of[1].chain[1]", Check: CheckSchema, Fields: []FieldIssue{
					{Field: `a\.b`, Problem: FieldOptional, Want: "required", Got: "optional"},
				}},
			},
		},
	}
}

func TestWorkflowStageCompatibility(t *testing.T) {
	for _, tt := range wfCompatCases() {
		t.Run(tt.name, func(t *testing.T) {
			m := wfEvaluate(t, tt.workflow())
			if diff := cmp.Diff(tt.want, m.Incompatibilities); diff != "" {
				t.Errorf("incompatibilities (-want +got):\n%s", diff)
			}
			if wantVerdict := map[bool]guards.CompositionVerdict{true: guards.SemanticIncompatible, false: guards.CompositionMeetsQuality}[len(tt.want) > 0]; m.Verdict != wantVerdict {
				t.Errorf("verdict %s, want %s", m.Verdict, wantVerdict)
			}
			var contaminated []EdgeIncompatibility
			for _, fm := range m.FailureModes {
				if fm.Mode == SemanticContamination {
					contaminated = append(contaminated, *fm.Edge)
				}
			}
			if diff := cmp.Diff(tt.want, contaminated); diff != "" {
				t.Errorf("failure modes (-want +got):\n%s", diff)
			}
		})
	}
}

func incompatibilityPolicyWorkflow() Workflow {
	tools := map[string]WorkflowTool{
		"lookup": wfSchemaTool("", wfUserOut),
		"notify": wfSchemaTool(`{"type": "object", "required": ["user_id", "phone"]}`, ""),
	}
	return Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.9, Tools: tools, Structure: Chain(Tool("lookup"), Tool("notify"))}
}

// Without the policy an incompatible edge is no gate, but it is still a
// failure mode; with it, the directive names the edge and its fields (the
// digest is recomputed with Python by TestWorkflowDigestsMatchPython).
func TestWorkflowIncompatibilityPolicy(t *testing.T) {
	w := incompatibilityPolicyWorkflow()
	m := wfEvaluate(t, w)
	if m.Verdict != guards.CompositionMeetsQuality || len(m.Incompatibilities) != 1 {
		t.Fatalf("without the policy: verdict %s, %d incompatibilities; want MEETS and 1", m.Verdict, len(m.Incompatibilities))
	}
	w.Policy.RequireSchemaCompatibility = true
	m = wfEvaluate(t, w)
	want := guards.CompositionManifest{
		Verdict:        guards.SemanticIncompatible,
		Directive:      "HALT: lookup output schema != notify input schema: phone missing.",
		ManifestDigest: "fdcac660c301e638ad746ad9d6b6cf5735ce702c989f9975d688c3f37b01df49",
	}
	if diff := cmp.Diff(want, m.CompositionManifest); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A verdict lists at most MaxReportedIncompatibilities edges and counts
// them all.
func TestWorkflowIncompatibilitiesAreCapped(t *testing.T) {
	tools := map[string]WorkflowTool{}
	var left, right []Node
	for i := range 40 {
		l, r := fmt.Sprintf("l%02d", i), fmt.Sprintf("r%02d", i)
		tools[l] = WorkflowTool{Accuracy: wfPtr(1.0), Determinism: guards.Deterministic, OutputSchemaHash: "out"}
		tools[r] = WorkflowTool{Accuracy: wfPtr(1.0), Determinism: guards.Deterministic, ExpectedInputSchemaHash: "in"}
		left, right = append(left, Tool(l)), append(right, Tool(r))
	}
	w := Workflow{CompositionID: "c", Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}, Tools: tools,
		Structure: Chain(ParallelAll(left...), ParallelAll(right...))}
	m := wfEvaluate(t, w)
	contaminated := 0
	for _, fm := range m.FailureModes {
		if fm.Mode == SemanticContamination {
			contaminated++
		}
	}
	if len(m.Incompatibilities) != MaxReportedIncompatibilities || contaminated != MaxReportedIncompatibilities || m.IncompatibleEdges != 1600 {
		t.Errorf("%d listed, %d failure modes, %d counted; want %d, %d, 1600", len(m.Incompatibilities), contaminated, m.IncompatibleEdges, MaxReportedIncompatibilities, MaxReportedIncompatibilities)
	}
	if want := "HALT: l00 output schema != r00 input schema (and 1599 more incompatible edges)."; m.Directive != want {
		t.Errorf("directive %q, want %q", m.Directive, want)
	}
}

// Inputs whose nested anyOfs multiply beyond MaxCompatibilitySteps are
// rejected, not checked in part.
func TestWorkflowCompatibilityBudget(t *testing.T) {
	const levels, alternatives = 8, 10
	defs := map[string]any{}
	for i := range levels {
		var alts []any
		for k := range alternatives {
			next := map[string]any{"$ref": fmt.Sprintf("#/$defs/L%d", i+1)}
			if i == levels-1 {
				next = map[string]any{"type": "object", "required": []string{"never"}}
			}
			alts = append(alts, map[string]any{"type": "object", "description": fmt.Sprint(k), "properties": map[string]any{"x": next}, "required": []string{"x"}})
		}
		defs[fmt.Sprintf("L%d", i)] = map[string]any{"anyOf": alts}
	}
	in := wfJSON(t, map[string]any{"$defs": defs, "$ref": "#/$defs/L0"})
	tools := map[string]WorkflowTool{
		"src": wfSchemaTool("", `{"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}`),
		"x":   wfSchemaTool(in, ""),
	}
	_, err := EvaluateWorkflow(wfLenient(Chain(Tool("src"), Tool("x")), tools))
	want := "invalid input: structure.chain[1]: the schemas need more than 1000000 comparisons to check"
	if err == nil || !errors.Is(err, guards.ErrInvalid) || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
