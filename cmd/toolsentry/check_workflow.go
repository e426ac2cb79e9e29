package main

import "github.com/toolsentry/toolsentry/guards/workflow"

// `toolsentry check workflow`: one workflow per input line (issue 4), one
// workflow.WorkflowManifest per output line.
func init() {
	registerCheck(checkKind{
		name: "workflow",
		summary: `{"composition_id", "workflow_quality_requirement", "introduction_of_nondeterminism_acceptable", "policy": {"require_schema_compatibility"}, ` +
			`"tools": {"<id>": {"accuracy"?, "determinism", "input_schema"?, "output_schema"?, "output_schema_hash"?, "expected_input_schema_hash"?, "observed"?: {"calls", "successes"}}}, "structure": NODE}
      NODE is "<tool id>" | {"chain": [NODE, ...]} | {"parallel": {"mode": "all"|"any", "of": [NODE, ...]}}
        | {"k_of_n": {"k", "of": [NODE, ...]}} | {"conditional": [{"p", "then": NODE}, ...]}
      answers {"verdict", "composed_quality", "composed_quality_lower"?, "composed_quality_upper"?, "confidence"?,
        "directive", "manifest_digest", "failure_modes", "incompatibilities"?, "measurements"?}`,
		evaluate: evaluateWorkflowCase,
	})
}

func evaluateWorkflowCase(line []byte) (any, error) {
	w, err := workflow.ParseWorkflow(line)
	if err != nil {
		return nil, err
	}
	return workflow.EvaluateWorkflow(w)
}
