package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func wfPtr[T any](v T) *T { return &v }

// wfDeclared is a tool with a declared accuracy and no schemas.
func wfDeclared(acc float64, det string) WorkflowTool {
	return WorkflowTool{Accuracy: wfPtr(acc), Determinism: det}
}

// wfABCD are the accuracies the hand-computed tables use.
func wfABCD() map[string]WorkflowTool {
	return map[string]WorkflowTool{
		"a": wfDeclared(0.9, guards.Deterministic),
		"b": wfDeclared(0.8, guards.Deterministic),
		"c": wfDeclared(0.7, guards.Deterministic),
		"d": wfDeclared(0.99, guards.Deterministic),
	}
}

// wfLenient is a workflow that no gate but quality stops: its composed
// quality is the structure's reliability.
func wfLenient(structure Node, tools map[string]WorkflowTool) Workflow {
	return Workflow{CompositionID: "w", IntroductionOfNondeterminismAcceptable: true, Tools: tools, Structure: structure}
}

func wfEvaluate(t testing.TB, w Workflow) WorkflowManifest {
	t.Helper()
	m, err := EvaluateWorkflow(w)
	if err != nil {
		t.Fatalf("EvaluateWorkflow: %v", err)
	}
	return m
}

// Hand-computed with a = 0.9, b = 0.8, c = 0.7, d = 0.99.
func TestWorkflowQualityByStructure(t *testing.T) {
	a, b, c, d := Tool("a"), Tool("b"), Tool("c"), Tool("d")
	tests := []struct {
		name      string
		structure Node
		want      float64
		verdict   guards.CompositionVerdict
	}{
		{"one tool", a, 0.9, guards.SingleTool},
		{"chain of one is one tool", Chain(a), 0.9, guards.SingleTool},
		{"chain: product", Chain(a, b), 0.72, guards.CompositionMeetsQuality},
		{"chain of three", Chain(a, b, c), 0.504, guards.CompositionMeetsQuality},
		{"parallel all: product", ParallelAll(a, b), 0.72, guards.CompositionMeetsQuality},
		{"parallel any: 1 - 0.1*0.2", ParallelAny(a, b), 0.98, guards.CompositionMeetsQuality},
		{"parallel any of three: 1 - 0.1*0.2*0.3", ParallelAny(a, b, c), 0.994, guards.CompositionMeetsQuality},
		{"k_of_n 1 of 3 is any", KOfN(1, a, b, c), 0.994, guards.CompositionMeetsQuality},
		// .9*.8*.3 + .9*.2*.7 + .1*.8*.7 + .9*.8*.7
		{"k_of_n 2 of 3: Poisson-binomial tail", KOfN(2, a, b, c), 0.902, guards.CompositionMeetsQuality},
		{"k_of_n 3 of 3 is all", KOfN(3, a, b, c), 0.504, guards.CompositionMeetsQuality},
		// 1 - .1^4 - 4*.9*.1^3
		{"k_of_n 2 of 4 equal voters", KOfN(2, a, a, a, a), 0.9963, guards.CompositionMeetsQuality},
		// 3 of 4 with .9 .8 .7 .99: P(all) + Σ P(exactly one fails)
		{"k_of_n 3 of 4", KOfN(3, a, b, c, d), 0.99*(0.504+0.1*0.8*0.7+0.9*0.2*0.7+0.9*0.8*0.3) + 0.01*0.504, guards.CompositionMeetsQuality},
		{"conditional: .3*.9 + .7*.8", Conditional(Branch{0.3, a}, Branch{0.7, b}), 0.83, guards.CompositionMeetsQuality},
		{"conditional with one branch", Conditional(Branch{1, c}), 0.7, guards.SingleTool},
		// .99 * .98 * .902
		{"nested: chain of tool, fallback, vote", Chain(d, ParallelAny(a, b), KOfN(2, a, b, c)), 0.8751204, guards.CompositionMeetsQuality},
		// .5 * .72 + .5 * (1 - .1*.3)
		{"nested: conditional over a chain and a fallback", Conditional(Branch{0.5, Chain(a, b)}, Branch{0.5, ParallelAny(a, c)}), 0.845, guards.CompositionMeetsQuality},
		// 2 of [.72, .8, .7]: .72*.8*.3 + .72*.2*.7 + .28*.8*.7 + .72*.8*.7
		{"nested: vote over a chain and tools", KOfN(2, Chain(a, b), b, c), 0.8336, guards.CompositionMeetsQuality},
		// .99 * (1 - (1 - .72)(1 - .83))
		{"nested: chain of a fallback between a parallel and a router", Chain(d, ParallelAny(ParallelAll(a, b), Conditional(Branch{0.3, a}, Branch{0.7, b}))), 0.99 * (1 - 0.28*0.17), guards.CompositionMeetsQuality},
		{"the same tool twice fails independently", ParallelAny(a, a), 0.99, guards.CompositionMeetsQuality},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := wfEvaluate(t, wfLenient(tt.structure, wfABCD()))
			got := struct {
				Q       float64
				Verdict guards.CompositionVerdict
			}{m.ComposedQuality, m.Verdict}
			want := struct {
				Q       float64
				Verdict guards.CompositionVerdict
			}{tt.want, tt.verdict}
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The seed's example: five tools at 95% compose to 77.38%, below a 95%
// requirement, with exactly the seed's manifest.
func TestWorkflowSeedFiveTimesNinetyFive(t *testing.T) {
	tools := map[string]WorkflowTool{}
	var stages []Node
	for _, id := range []string{"t1", "t2", "t3", "t4", "t5"} {
		tools[id] = WorkflowTool{Accuracy: wfPtr(0.95), Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"}
		stages = append(stages, Tool(id))
	}
	w := Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.95, Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}, Tools: tools, Structure: Chain(stages...)}
	want := guards.CompositionManifest{Verdict: guards.CompositionDegraded, ComposedQuality: 0.7737809374999999, Directive: "HALT: Composed quality 77.38% < requirement 95.00%.", ManifestDigest: "0144c3440813b88ba6d9f65dbe96fc0be5d41a475a0bf68f58f9ddbfb9b6cd02"}
	m := wfEvaluate(t, w)
	if diff := cmp.Diff(want, m.CompositionManifest); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if len(m.FailureModes) != 1 || m.FailureModes[0].Mode != AccuracyMultiplication {
		t.Fatalf("failure modes %+v, want one ACCURACY_MULTIPLICATION", m.FailureModes)
	}
	fm := m.FailureModes[0]
	if diff := cmp.Diff(1-0.7737809375, fm.Loss, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("loss (-want +got):\n%s", diff)
	}
	for _, s := range fm.Stages {
		if diff := cmp.Diff((1-0.7737809375)/5, *s.Contribution, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Errorf("%s: equal stages share the loss equally (-want +got):\n%s", s.At, diff)
		}
	}
}

// Every case of the seed parity corpus (answered by the seed's own Python)
// whose tool ids are distinct is a flat chain workflow; EvaluateWorkflow must
// give the recorded verdict, quality, directive and digest.
func TestWorkflowMatchesSeedParityCorpus(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "testdata", "parity", "composition.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	checked := 0
	for n := 1; sc.Scan(); n++ {
		var line struct {
			Case struct {
				Composition guards.ToolComposition   `json:"composition"`
				Policy      guards.CompositionPolicy `json:"policy"`
			} `json:"case"`
			Want guards.CompositionManifest `json:"want"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		comp := line.Case.Composition
		if comp.Validate() != nil || len(comp.Tools) == 0 {
			continue
		}
		w := Workflow{
			CompositionID:                          comp.CompositionID,
			WorkflowQualityRequirement:             comp.WorkflowQualityRequirement,
			IntroductionOfNondeterminismAcceptable: comp.IntroductionOfNondeterminismAcceptable,
			Policy:                                 line.Case.Policy,
			Tools:                                  map[string]WorkflowTool{},
		}
		var stages []Node
		distinct := true
		for _, tq := range comp.Tools {
			if _, dup := w.Tools[tq.ToolID]; dup {
				distinct = false
			}
			w.Tools[tq.ToolID] = WorkflowTool{Accuracy: wfPtr(tq.Accuracy), Determinism: tq.Determinism, OutputSchemaHash: tq.OutputSchemaHash, ExpectedInputSchemaHash: tq.ExpectedInputSchemaHash}
			stages = append(stages, Tool(tq.ToolID))
		}
		if !distinct {
			continue
		}
		w.Structure = Chain(stages...)
		m, err := EvaluateWorkflow(w)
		if err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if diff := cmp.Diff(line.Want, m.CompositionManifest); diff != "" {
			t.Errorf("line %d (-seed +workflow):\n%s", n, diff)
		}
		checked++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 1000 {
		t.Fatalf("only %d corpus cases were chains of distinct tools", checked)
	}
}

type wfGateCase struct {
	name string
	w    Workflow
	want guards.CompositionManifest
}

// wfGateCases exercise the gates and digests outside the seed's domain. Their
// digests are recomputed with Python by TestWorkflowDigestsMatchPython.
func wfGateCases() []wfGateCase {
	a, b := Tool("a"), Tool("b")
	nondet := wfABCD()
	nondet["b"] = wfDeclared(0.8, guards.NonDeterministic)
	hashes := map[string]WorkflowTool{
		"a": {Accuracy: wfPtr(0.9), Determinism: guards.Deterministic, OutputSchemaHash: "A", ExpectedInputSchemaHash: "in"},
		"b": {Accuracy: wfPtr(0.8), Determinism: guards.Deterministic, OutputSchemaHash: "B", ExpectedInputSchemaHash: "A"},
		"c": {Accuracy: wfPtr(0.7), Determinism: guards.Deterministic, OutputSchemaHash: "C", ExpectedInputSchemaHash: "B"},
	}
	return []wfGateCase{
		{
			name: "single tool under a combinator",
			w:    Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.99, Tools: wfABCD(), Structure: ParallelAny(a)},
			want: guards.CompositionManifest{Verdict: guards.SingleTool, ComposedQuality: 0.9, Directive: "PROCEED: Single tool workflow, quality 0.90.", ManifestDigest: "603352712b332d98e1b3490fbaf09defd6d112aa47fff09862b2d66aec957549"},
		},
		{
			name: "hash mismatch into a parallel branch, first of two in data-flow order",
			w: Workflow{CompositionID: "c", Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}, Tools: hashes,
				Structure: Chain(a, ParallelAny(Tool("c"), b), Tool("c"))},
			want: guards.CompositionManifest{Verdict: guards.SemanticIncompatible, ComposedQuality: 0, Directive: "HALT: a output schema != c input schema (and 1 more incompatible edge).", ManifestDigest: "5d230e5a1db72774deef30d93d6c50b5114471e96ac6a1d8d3ffa0f26b32ceb4"},
		},
		{
			name: "hash mismatches are not a gate without the policy",
			w:    Workflow{CompositionID: "c", Tools: hashes, Structure: Chain(a, ParallelAny(Tool("c"), b), Tool("c"))},
			want: guards.CompositionManifest{Verdict: guards.CompositionMeetsQuality, ComposedQuality: 0.9 * 0.94 * 0.7, Directive: "PROCEED: 4-tool composition, quality 59.22%.", ManifestDigest: "91bc196e2322bb5de7d20d1795fa599d3bbf1b1da5f54378b269ddb5b8dcde1a"},
		},
		{
			name: "non-determinism in a vote, not accepted",
			w:    Workflow{CompositionID: "c", Tools: nondet, Structure: KOfN(2, a, b, Tool("c"))},
			want: guards.NondeterminismManifest(),
		},
		{
			name: "degraded router: the seed's form",
			w:    Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.85, Tools: wfABCD(), Structure: Conditional(Branch{0.3, a}, Branch{0.7, b})},
			want: guards.DegradedManifest(0.83, 0.85),
		},
		{
			name: "meets: the digest covers the structure",
			w:    Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.9, Tools: wfABCD(), Structure: KOfN(2, a, b, Tool("c"))},
			want: guards.CompositionManifest{Verdict: guards.CompositionMeetsQuality, ComposedQuality: 0.902, Directive: "PROCEED: 3-tool composition, quality 90.20%.", ManifestDigest: "f8bbf065104509e227556e962ff0ec727828f4b76bfa3f45e6612b74c8e64a49"},
		},
		{
			name: "meets: another structure with the same quality has another digest",
			w:    Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.9, Tools: wfABCD(), Structure: KOfN(2, b, a, Tool("c"))},
			want: guards.CompositionManifest{Verdict: guards.CompositionMeetsQuality, ComposedQuality: 0.902, Directive: "PROCEED: 3-tool composition, quality 90.20%.", ManifestDigest: "e7d6e4652bd2a8f7539d200bdb327d9be6babd6d68ead0ab96c53102675b4186"},
		},
		{
			name: "flat chain in the seed's domain: the seed's digest",
			w:    Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.7, Tools: wfABCD(), Structure: Chain(a, b)},
			want: guards.CompositionManifest{Verdict: guards.CompositionMeetsQuality, ComposedQuality: 0.9 * 0.8, Directive: "PROCEED: 2-tool composition, quality 72.00%.", ManifestDigest: guards.MeetsQualityDigest("c", []string{"a", "b"}, 0.9*0.8, 0.7)},
		},
	}
}

func TestWorkflowGates(t *testing.T) {
	for _, tt := range wfGateCases() {
		t.Run(tt.name, func(t *testing.T) {
			m := wfEvaluate(t, tt.w)
			if diff := cmp.Diff(tt.want, m.CompositionManifest, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A declared workflow built in Go equals the same workflow parsed.
func TestParseWorkflowEqualsConstructed(t *testing.T) {
	raw := `{"composition_id": "c", "workflow_quality_requirement": 0.5, "introduction_of_nondeterminism_acceptable": true,
	  "policy": {"require_schema_compatibility": false},
	  "tools": {"a": {"accuracy": 0.9, "determinism": "DETERMINISTIC"}, "b": {"determinism": "NON_DETERMINISTIC", "observed": {"calls": 10, "successes": 9}}},
	  "structure": {"chain": ["a", {"parallel": {"mode": "any", "of": ["a", "b"]}}, {"k_of_n": {"k": 1, "of": ["b"]}}, {"conditional": [{"p": 0.25, "then": "a"}, {"p": 0.75, "then": {"parallel": {"mode": "all", "of": ["a", "b"]}}}]}]}}`
	got, err := ParseWorkflow([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := Workflow{
		CompositionID: "c", WorkflowQualityRequirement: 0.5, IntroductionOfNondeterminismAcceptable: true,
		Tools: map[string]WorkflowTool{
			"a": wfDeclared(0.9, guards.Deterministic),
			"b": {Determinism: guards.NonDeterministic, Observed: &Observed{Calls: 10, Successes: 9}},
		},
		Structure: Chain(Tool("a"), ParallelAny(Tool("a"), Tool("b")), KOfN(1, Tool("b")),
			Conditional(Branch{0.25, Tool("a")}, Branch{0.75, ParallelAll(Tool("a"), Tool("b"))})),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// wfNest wraps a tool in depth-1 chains: wfNest(1) is the bare tool.
func wfNest(depth int) string {
	return strings.Repeat(`{"chain": [`, depth-1) + `"a"` + strings.Repeat(`]}`, depth-1)
}

func wfJSONLine(tools, structure string) string {
	return `{"composition_id": "c", "workflow_quality_requirement": 0.5, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "tools": {` + tools + `}, "structure": ` + structure + `}`
}

const wfToolsAB = `"a": {"accuracy": 0.9, "determinism": "DETERMINISTIC"}, "b": {"accuracy": 0.8, "determinism": "DETERMINISTIC"}`

func TestParseWorkflowErrors(t *testing.T) {
	many := `{"parallel": {"mode": "all", "of": [` + strings.TrimSuffix(strings.Repeat(`"a", `, MaxWorkflowNodes), ", ") + `]}}`
	voters := `{"k_of_n": {"k": 1, "of": [` + strings.TrimSuffix(strings.Repeat(`"a", `, MaxVoters+1), ", ") + `]}}`
	tests := []struct {
		name     string
		in       string
		sentinel error
		want     string
	}{
		{"tool without an entry", wfJSONLine(wfToolsAB, `{"chain": ["a", "x"]}`), guards.ErrInvalid,
			`invalid input: structure.chain[1]: tool "x" has no entry in tools`},
		{"probabilities not summing to 1", wfJSONLine(wfToolsAB, `{"conditional": [{"p": 0.5, "then": "a"}, {"p": 0.4, "then": "b"}]}`), guards.ErrInvalid,
			`invalid input: structure: probabilities sum to 0.9, want 1 (within 1e-09)`},
		{"probabilities within the tolerance", wfJSONLine(wfToolsAB, `{"conditional": [{"p": 0.5, "then": "a"}, {"p": 0.5000000001, "then": "b"}]}`), nil, ``},
		{"probability outside [0, 1]", wfJSONLine(wfToolsAB, `{"conditional": [{"p": 1.5, "then": "a"}, {"p": -0.5, "then": "b"}]}`), guards.ErrInvalid,
			`structure[0]: invalid input: p 1.5 is not a number in [0, 1]`},
		{"k above n", wfJSONLine(wfToolsAB, `{"k_of_n": {"k": 3, "of": ["a", "b"]}}`), guards.ErrInvalid,
			`invalid input: structure.k: k 3 is not in [1, n] with n = 2`},
		{"k below 1", wfJSONLine(wfToolsAB, `{"k_of_n": {"k": 0, "of": ["a", "b"]}}`), guards.ErrInvalid,
			`invalid input: structure.k: k 0 is not in [1, n] with n = 2`},
		{"k not an integer", wfJSONLine(wfToolsAB, `{"k_of_n": {"k": 1.5, "of": ["a", "b"]}}`), guards.ErrInvalid,
			`invalid input: structure.k_of_n.k: want an integer, got 1.5`},
		{"empty chain", wfJSONLine(wfToolsAB, `{"chain": ["a", {"chain": []}]}`), guards.ErrInvalid,
			`invalid input: structure.chain[1].chain: empty: want at least one node`},
		{"empty conditional", wfJSONLine(wfToolsAB, `{"conditional": []}`), guards.ErrInvalid,
			`invalid input: structure.conditional: empty: want at least one branch`},
		{"accuracy outside [0, 1]", wfJSONLine(`"a": {"accuracy": 1.01, "determinism": "DETERMINISTIC"}`, `"a"`), guards.ErrInvalid,
			`tools.a: invalid input: accuracy 1.01 is not a number in [0, 1]`},
		{"requirement outside [0, 1]", strings.Replace(wfJSONLine(wfToolsAB, `"a"`), `"workflow_quality_requirement": 0.5`, `"workflow_quality_requirement": -0.1`, 1), guards.ErrInvalid,
			`invalid input: workflow_quality_requirement -0.1 is not a number in [0, 1]`},
		{"nesting of 64 is allowed", wfJSONLine(wfToolsAB, wfNest(64)), nil, ``},
		{"nesting deeper than 64", wfJSONLine(wfToolsAB, wfNest(65)), guards.ErrInvalid,
			`invalid input: structure` + strings.Repeat(".chain[0]", 64) + `: nesting deeper than 64`},
		{"nesting far deeper", wfJSONLine(wfToolsAB, wfNest(100000)), guards.ErrInvalid,
			`invalid input: not valid JSON: invalid character '[' exceeded max depth`},
		{"too many nodes", wfJSONLine(wfToolsAB, many), guards.ErrInvalid,
			`invalid input: structure.parallel.of[1023]: structure has more than 1024 nodes`},
		{"too many voters", wfJSONLine(wfToolsAB, voters), guards.ErrInvalid,
			`invalid input: structure: k_of_n has 65 branches, at most 64`},
		{"unknown parallel mode", wfJSONLine(wfToolsAB, `{"parallel": {"mode": "some", "of": ["a"]}}`), guards.ErrInvalid,
			`invalid input: structure.parallel.mode: want "all" or "any", got "some"`},
		{"unknown field in a parallel", wfJSONLine(wfToolsAB, `{"parallel": {"mode": "all", "of": ["a"], "timeout": 3}}`), guards.ErrInvalid,
			`invalid input: structure.parallel.timeout: unknown field (known: mode, of)`},
		{"unknown node", wfJSONLine(wfToolsAB, `{"chain": ["a", {"loop": ["b"]}]}`), guards.ErrInvalid,
			`invalid input: structure.chain[1].loop: unknown field (want a tool id or an object with one of "chain", "conditional", "k_of_n", "parallel")`},
		{"two kinds in one node", wfJSONLine(wfToolsAB, `{"chain": ["a"], "parallel": {"mode": "all", "of": ["a"]}}`), guards.ErrInvalid,
			`invalid input: structure: want a tool id or an object with one of "chain", "conditional", "k_of_n", "parallel", got an object with 2 fields`},
		{"a number for a node", wfJSONLine(wfToolsAB, `{"chain": ["a", 7]}`), guards.ErrInvalid,
			`invalid input: structure.chain[1]: want a tool id or an object with one of "chain", "conditional", "k_of_n", "parallel", got number`},
		{"branch without p", wfJSONLine(wfToolsAB, `{"conditional": [{"then": "a"}]}`), guards.ErrInvalid,
			`invalid input: structure.conditional[0].p: missing`},
		{"unknown tool field", wfJSONLine(`"a": {"accuracy": 0.9, "determinism": "DETERMINISTIC", "acuracy": 0.8}`, `"a"`), guards.ErrInvalid,
			`invalid input: tools.a.acuracy: unknown field (known: accuracy, determinism, expected_input_schema_hash, input_schema, observed, output_schema, output_schema_hash)`},
		{"unknown top-level field", strings.Replace(wfJSONLine(wfToolsAB, `"a"`), `"policy"`, `"polcy": {}, "policy"`, 1), guards.ErrInvalid,
			`invalid input: polcy: unknown field (known: composition_id, introduction_of_nondeterminism_acceptable, policy, structure, tools, workflow_quality_requirement)`},
		{"missing structure", `{"composition_id": "c", "workflow_quality_requirement": 0.5, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "tools": {}}`, guards.ErrInvalid,
			`invalid input: structure: missing`},
		{"unknown determinism", wfJSONLine(`"a": {"accuracy": 0.9, "determinism": "SOMETIMES"}`, `"a"`), guards.ErrInvalid,
			`tools.a: invalid input: determinism "SOMETIMES", want "DETERMINISTIC" or "NON_DETERMINISTIC"`},
		{"successes above calls", wfJSONLine(`"a": {"determinism": "DETERMINISTIC", "observed": {"calls": 3, "successes": 4}}`, `"a"`), guards.ErrInvalid,
			`tools.a: invalid input: observed: successes 4 exceed calls 3`},
		{"negative calls", wfJSONLine(`"a": {"determinism": "DETERMINISTIC", "observed": {"calls": -1, "successes": 0}}`, `"a"`), guards.ErrInvalid,
			`tools.a: invalid input: observed: calls -1 and successes 0 must not be negative`},
		{"unquantified: no accuracy, no observations", wfJSONLine(`"a": {"accuracy": 0.9, "determinism": "DETERMINISTIC"}, "b": {"determinism": "DETERMINISTIC"}`, `{"chain": ["a", "b"]}`), ErrUnquantified,
			`unquantified composition: structure.chain[1]: tool "b" has neither a declared accuracy nor observed calls`},
		{"unquantified: zero calls is no observation", wfJSONLine(`"a": {"determinism": "DETERMINISTIC", "observed": {"calls": 0, "successes": 0}}`, `"a"`), ErrUnquantified,
			`unquantified composition: structure: tool "a" has neither a declared accuracy nor observed calls`},
		{"an unused unquantified tool is fine", wfJSONLine(`"a": {"accuracy": 0.9, "determinism": "DETERMINISTIC"}, "b": {"determinism": "DETERMINISTIC"}`, `"a"`), nil, ``},
		{"not JSON", `{"composition_id": `, guards.ErrInvalid, `invalid input: not valid JSON: unexpected EOF`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseWorkflow([]byte(tt.in))
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tt.sentinel)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Workflows built in Go are validated by EvaluateWorkflow with the same
// errors, including shapes the JSON grammar cannot express.
func TestEvaluateWorkflowValidatesConstructed(t *testing.T) {
	deep := Tool("a")
	for range MaxWorkflowDepth {
		deep = Chain(deep)
	}
	tests := []struct {
		name string
		w    Workflow
		want string
	}{
		{"zero node", wfLenient(Node{}, wfABCD()), `invalid input: structure: unknown node kind 0`},
		{"tool node with branches", wfLenient(Node{Kind: KindTool, Tool: "a", Of: []Node{Tool("b")}}, wfABCD()), `invalid input: structure: a tool node has no branches, k or p`},
		{"chain with k", wfLenient(Node{Kind: KindChain, K: 2, Of: []Node{Tool("a")}}, wfABCD()), `invalid input: structure: a chain node has only its branches`},
		{"conditional with too few probabilities", wfLenient(Node{Kind: KindConditional, Of: []Node{Tool("a"), Tool("b")}, P: []float64{1}}, wfABCD()), `invalid input: structure: 1 probabilities for 2 branches`},
		{"empty parallel", wfLenient(ParallelAny(), wfABCD()), `invalid input: structure: empty parallel(any)`},
		{"too deep", wfLenient(deep, wfABCD()), `invalid input: structure` + strings.Repeat(".chain[0]", 64) + `: nesting deeper than 64`},
		{"nil tools", wfLenient(Tool("a"), nil), `invalid input: structure: tool "a" has no entry in tools`},
		{"invalid output schema", wfLenient(Chain(Tool("a"), Tool("b")), map[string]WorkflowTool{
			"a": {Accuracy: wfPtr(0.9), Determinism: guards.Deterministic, OutputSchema: json.RawMessage(`{"type": "strin"}`)},
			"b": wfDeclared(0.9, guards.Deterministic),
		}), `tools.a.output_schema: invalid input: schema at #/type: unknown type "strin"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EvaluateWorkflow(tt.w)
			if err == nil || !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("error %v, want one wrapping ErrInvalid", err)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
