package workflow_test

import (
	"fmt"
	"testing"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// A pipeline that looks up a customer, asks two models in parallel (either
// answer will do), lets three classifiers vote (two must agree) and routes
// 30% of the cases to a human check. The lookup is measured, not declared:
// .998 × (1 − .1 × .15) × P(2 of 3 at .92) × (.3 × .99 + .7 × .92) = 90.82%.
func ExampleEvaluateWorkflow() {
	acc := func(x float64) *float64 { return &x }
	w := workflow.Workflow{
		CompositionID:                          "support-triage",
		WorkflowQualityRequirement:             0.9,
		IntroductionOfNondeterminismAcceptable: true,
		Tools: map[string]workflow.WorkflowTool{
			"crm.lookup": {Determinism: guards.Deterministic, Observed: &workflow.Observed{Calls: 5000, Successes: 4990}},
			"llm.a":      {Accuracy: acc(0.9), Determinism: guards.NonDeterministic},
			"llm.b":      {Accuracy: acc(0.85), Determinism: guards.NonDeterministic},
			"clf":        {Accuracy: acc(0.92), Determinism: guards.Deterministic},
			"human":      {Accuracy: acc(0.99), Determinism: guards.NonDeterministic},
		},
		Structure: workflow.Chain(
			workflow.Tool("crm.lookup"),
			workflow.ParallelAny(workflow.Tool("llm.a"), workflow.Tool("llm.b")),
			workflow.KOfN(2, workflow.Tool("clf"), workflow.Tool("clf"), workflow.Tool("clf")),
			workflow.Conditional(workflow.Branch{P: 0.3, Then: workflow.Tool("human")}, workflow.Branch{P: 0.7, Then: workflow.Tool("clf")}),
		),
	}
	m, err := workflow.EvaluateWorkflow(w)
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
	declared := map[string]workflow.WorkflowTool{}
	measured := map[string]workflow.WorkflowTool{}
	schemas := map[string]workflow.WorkflowTool{}
	ids := []string{"a", "b", "c", "d", "e"}
	for i, id := range ids {
		declared[id] = workflow.WorkflowTool{Accuracy: acc(0.95), Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"}
		measured[id] = workflow.WorkflowTool{Determinism: guards.Deterministic, Observed: &workflow.Observed{Calls: 1000, Successes: int64(950 + 10*i)}}
		schemas[id] = workflow.WorkflowTool{Accuracy: acc(0.95), Determinism: guards.Deterministic,
			InputSchema:  []byte(`{"type": "object", "properties": {"id": {"type": "string"}, "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}}, "required": ["id", "items"]}`),
			OutputSchema: []byte(`{"type": "object", "properties": {"id": {"type": "string"}, "note": {"type": "string"}, "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["sku", "qty"]}}}, "required": ["id", "items"]}`)}
	}
	t := workflow.Tool
	chain := workflow.Chain(t("a"), t("b"), t("c"), t("d"), t("e"))
	nested := workflow.Chain(t("a"), workflow.ParallelAny(t("b"), workflow.ParallelAll(t("c"), t("d"))),
		workflow.KOfN(2, t("c"), t("d"), t("e")), workflow.Conditional(workflow.Branch{P: 0.4, Then: t("a")}, workflow.Branch{P: 0.6, Then: workflow.Chain(t("b"), t("e"))}))
	cases := []struct {
		name string
		w    workflow.Workflow
	}{
		{"structure=seed_chain/tools=declared", workflow.Workflow{CompositionID: "c", Tools: declared, Structure: chain, Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}}},
		{"structure=nested/tools=declared", workflow.Workflow{CompositionID: "c", Tools: declared, Structure: nested}},
		{"structure=nested/tools=measured", workflow.Workflow{CompositionID: "c", Tools: measured, Structure: nested}},
		{"structure=seed_chain/tools=schemas", workflow.Workflow{CompositionID: "c", Tools: schemas, Structure: chain, Policy: guards.CompositionPolicy{RequireSchemaCompatibility: true}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := workflow.EvaluateWorkflow(c.w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "workflows/s")
		})
	}
}
