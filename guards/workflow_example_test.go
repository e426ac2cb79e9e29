package guards_test

import (
	"fmt"
	"testing"

	"github.com/toolsentry/toolsentry/guards"
)

// A pipeline that looks up a customer, asks two models in parallel (either
// answer will do), lets three classifiers vote (two must agree) and routes
// 30% of the cases to a human check. The lookup is measured, not declared:
// .998 × (1 − .1 × .15) × P(2 of 3 at .92) × (.3 × .99 + .7 × .92) = 90.82%.
func ExampleEvaluateWorkflow() {
	acc := func(x float64) *float64 { return &x }
	w := guards.Workflow{
		CompositionID:                          "support-triage",
		WorkflowQualityRequirement:             0.9,
		IntroductionOfNondeterminismAcceptable: true,
		Tools: map[string]guards.WorkflowTool{
			"crm.lookup": {Determinism: guards.Deterministic, Observed: &guards.Observed{Calls: 5000, Successes: 4990}},
			"llm.a":      {Accuracy: acc(0.9), Determinism: guards.NonDeterministic},
			"llm.b":      {Accuracy: acc(0.85), Determinism: guards.NonDeterministic},
			"clf":        {Accuracy: acc(0.92), Determinism: guards.Deterministic},
			"human":      {Accuracy: acc(0.99), Determinism: guards.NonDeterministic},
		},
		Structure: guards.Chain(
			guards.Tool("crm.lookup"),
			guards.ParallelAny(guards.Tool("llm.a"), guards.Tool("llm.b")),
			guards.KOfN(2, guards.Tool("clf"), guards.Tool("clf"), guards.Tool("clf")),
			guards.Conditional(guards.Branch{P: 0.3, Then: guards.Tool("human")}, guards.Branch{P: 0.7, Then: guards.Tool("clf")}),
		),
	}
	m, err := guards.EvaluateWorkflow(w)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Verdict, m.Directive)
	fmt.Printf("lower bound %.4f: %s\n", *m.ComposedQualityLower, m.Confidence)
	for _, fm := range m.FailureModes {
		fmt.Println(fm.Mode)
	}
	// Output:
	// COMPOSITION_MEETS_QUALITY PROCEED: 8-tool composition, quality 90.82%.
	// lower bound 0.9069: CONFIRMED
	// NONDETERMINISM_INTRODUCED
}

// BenchmarkEvaluateWorkflow reports whole evaluations per second: a seed
// chain, a nested structure with declared accuracies, the same with
// measured tools (Monte Carlo bounds), and a chain of JSON Schema stages.
func BenchmarkEvaluateWorkflow(b *testing.B) {
	acc := func(x float64) *float64 { return &x }
	declared := map[string]guards.WorkflowTool{}
	measured := map[string]guards.WorkflowTool{}
	schemas := map[string]guards.WorkflowTool{}
	ids := []string{"a", "b", "c", "d", "e"}
	for i, id := range ids {
		declared[id] = guards.WorkflowTool{Accuracy: acc(0.95), Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"}
		measured[id] = guards.WorkflowTool{Determinism: guards.Deterministic, Observed: &guards.Observed{Calls: 1000, Successes: int64(950 + 10*i)}}
		schemas[id] = guards.WorkflowTool{Accuracy: acc(0.95), Determinism: guards.Deterministic,
			InputSchema:  []byte(`{"type": "object", "properties": {"id": {"type": "string"}, "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}}, "required": ["id", "items"]}`),
			OutputSchema: []byte(`{"type": "object", "properties": {"id": {"type": "string"}, "note": {"type": "string"}, "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}}, "required": ["id", "items"]}`)}
	}
	t := guards.Tool
	chain := guards.Chain(t("a"), t("b"), t("c"), t("d"), t("e"))
	nested := guards.Chain(t("a"), guards.ParallelAny(t("b"), guards.ParallelAll(t("c"), t("d"))),
		guards.KOfN(2, t("c"), t("d"), t("e")), guards.Conditional(guards.Branch{P: 0.4, Then: t("a")}, guards.Branch{P: 0.6, Then: guards.Chain(t("b"), t("e"))}))
	cases := []struct {
		name string
		w    guards.Workflow
	}{
		{"structure=seed_chain/tools=declared", guards.Workflow{CompositionID: "c", Tools: declared, Structure: chain, Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}}},
		{"structure=nested/tools=declared", guards.Workflow{CompositionID: "c", Tools: declared, Structure: nested}},
		{"structure=nested/tools=measured", guards.Workflow{CompositionID: "c", Tools: measured, Structure: nested}},
		{"structure=seed_chain/tools=schemas", guards.Workflow{CompositionID: "c", Tools: schemas, Structure: chain, Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := guards.EvaluateWorkflow(c.w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "workflows/s")
		})
	}
}
