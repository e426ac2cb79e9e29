package schemas

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDocumentsCompile(t *testing.T) {
	for _, name := range Names() {
		doc, err := Document(name)
		if err != nil {
			t.Fatalf("Document(%q): %v", name, err)
		}
		var head struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if head.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %q, want draft 2020-12", name, head.Schema)
		}
		if head.ID != ID(name) {
			t.Errorf("%s: $id %q, want %q", name, head.ID, ID(name))
		}
		if head.Title != "io.toolsentry."+name {
			t.Errorf("%s: title %q, want the CloudEvents type", name, head.Title)
		}
		s, err := Lookup(name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", name, err)
		}
		if s.Name() != name {
			t.Errorf("Name() = %q, want %q", s.Name(), name)
		}
	}
}

func TestUnknown(t *testing.T) {
	if _, err := Lookup("tool.invocation.v9"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Lookup: got %v, want ErrUnknown", err)
	}
	if _, err := Document("../go.mod"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Document: got %v, want ErrUnknown", err)
	}
	if err := Validate("nope", map[string]any{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("Validate: got %v, want ErrUnknown", err)
	}
}

const (
	digest = `"6ddca7a2c0a7e1f5b4d6a1e8c2f3b4a5d6e7f8091a2b3c4d5e6f708192a3b4c5"`
	tool   = `{"name": "lookup", "inputSchema": {"type": "object", "properties": {"user_id": {"type": "string"}}}}`
)

// validationCases: each payload valid and invalid. wantErr is a part of the
// message that must name the offending place ("" for valid cases).
var validationCases = []struct {
	schema, name, doc, wantErr string
}{
	// tool.schema.observed.v1
	{ToolSchemaObservedV1, "one tool", `{"tool_id": "crm.lookup", "version": "2", "tool": ` + tool + `}`, ""},
	{ToolSchemaObservedV1, "one tool with server", `{"tool_id": "crm.lookup", "version": "2", "server": "crm", "tool": {"name": "lookup", "title": "Lookup", "description": "d", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}, "_meta": {}, "icons": []}}`, ""},
	{ToolSchemaObservedV1, "tools/list result", `{"server": "crm", "tools": {"tools": [` + tool + `], "nextCursor": "x"}}`, ""},
	{ToolSchemaObservedV1, "empty tools/list result", `{"server": "crm", "tools": {"tools": []}}`, ""},
	{ToolSchemaObservedV1, "missing version", `{"tool_id": "crm.lookup", "tool": ` + tool + `}`, "missing property 'version'"},
	{ToolSchemaObservedV1, "misspelt field", `{"tool_id": "crm.lookup", "version": "2", "tool": ` + tool + `, "servr": "x"}`, "'servr' not allowed"},
	{ToolSchemaObservedV1, "input schema without type", `{"tool_id": "t", "version": "2", "tool": {"name": "t", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#"}, "outputSchema": {}}}`, ""},
	{ToolSchemaObservedV1, "input schema not an object schema", `{"tool_id": "t", "version": "2", "tool": {"name": "t", "inputSchema": {"type": "string"}}}`, "at /tool/inputSchema/type"},
	{ToolSchemaObservedV1, "tool without name", `{"tool_id": "t", "version": "2", "tool": {"inputSchema": {"type": "object"}}}`, "at /tool: missing property 'name'"},
	{ToolSchemaObservedV1, "list without server", `{"tools": {"tools": []}}`, "missing property 'server'"},
	{ToolSchemaObservedV1, "list with tool_id", `{"server": "s", "tool_id": "x", "tools": {"tools": []}}`, "'tool_id' not allowed"},
	{ToolSchemaObservedV1, "list of a bad tool", `{"server": "s", "tools": {"tools": [{"name": ""}]}}`, "at /tools/tools/0"},
	{ToolSchemaObservedV1, "empty tool id", `{"tool_id": "", "version": "2", "tool": ` + tool + `}`, "at /tool_id"},
	{ToolSchemaObservedV1, "not an object", `[]`, "at /: got array, want object"},

	// tool.invocation.v1
	{ToolInvocationV1, "minimal", `{"agent_id": "a", "tool_id": "t"}`, ""},
	{ToolInvocationV1, "full", `{"agent_id": "a", "tool_id": "t", "tool_version": "2", "schema_fingerprint": "sha256:ab", "arguments": {"user_id": "u", "n": [1]}, "argument_types": {"user_id": "string", "n[]": ["integer", "string"]}, "used_fields": ["user_id"], "output_fields_read": ["name"], "outcome": {"status": "error", "error_type": "Timeout", "correct": false}, "trace_id": "t", "span_id": "s", "parent_span_id": "p", "workflow_id": "w", "latency_ms": 12.5}`, ""},
	{ToolInvocationV1, "missing agent", `{"tool_id": "t"}`, "missing property 'agent_id'"},
	{ToolInvocationV1, "bad outcome status", `{"agent_id": "a", "tool_id": "t", "outcome": {"status": "fine"}}`, "at /outcome/status"},
	{ToolInvocationV1, "outcome without status", `{"agent_id": "a", "tool_id": "t", "outcome": {"correct": true}}`, "at /outcome: missing property 'status'"},
	{ToolInvocationV1, "arguments not an object", `{"agent_id": "a", "tool_id": "t", "arguments": [1]}`, "at /arguments"},
	{ToolInvocationV1, "unknown argument type", `{"agent_id": "a", "tool_id": "t", "argument_types": {"x": "text"}}`, "at /argument_types/x"},
	{ToolInvocationV1, "repeated argument types", `{"agent_id": "a", "tool_id": "t", "argument_types": {"x": ["string", "string"]}}`, "at /argument_types/x"},
	{ToolInvocationV1, "empty used field", `{"agent_id": "a", "tool_id": "t", "used_fields": [""]}`, "at /used_fields/0"},
	{ToolInvocationV1, "negative latency", `{"agent_id": "a", "tool_id": "t", "latency_ms": -1}`, "at /latency_ms"},
	{ToolInvocationV1, "latency as string", `{"agent_id": "a", "tool_id": "t", "latency_ms": "5"}`, "at /latency_ms: got string, want number"},
	{ToolInvocationV1, "misspelt field", `{"agent_id": "a", "tool_id": "t", "usedFields": []}`, "'usedFields' not allowed"},

	// tool.contract.v1
	{ToolContractV1, "valid", `{"tool_id": "t", "accuracy": 0.95, "determinism": "DETERMINISTIC", "output_schema_hash": "h1", "expected_input_schema_hash": "h0"}`, ""},
	{ToolContractV1, "accuracy above 1", `{"tool_id": "t", "accuracy": 1.5, "determinism": "DETERMINISTIC"}`, "at /accuracy"},
	{ToolContractV1, "unknown determinism", `{"tool_id": "t", "accuracy": 1, "determinism": "deterministic"}`, "at /determinism"},
	{ToolContractV1, "missing accuracy", `{"tool_id": "t", "determinism": "NON_DETERMINISTIC"}`, "missing property 'accuracy'"},

	// workflow.declared.v1
	{WorkflowDeclaredV1, "chain of two", `{"composition_id": "etl", "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "tools": {"a": {"accuracy": 0.95, "determinism": "DETERMINISTIC", "output_schema_hash": "h"}, "b": {"determinism": "NON_DETERMINISTIC", "input_schema": {"type": "object"}, "output_schema": true, "observed": {"calls": 10, "successes": 9}}}, "structure": {"chain": ["a", "b"]}}`, ""},
	{WorkflowDeclaredV1, "nested structures without tools", `{"composition_id": "w", "workflow_quality_requirement": 0.5, "introduction_of_nondeterminism_acceptable": true, "policy": {"require_schema_compatibility": false}, "structure": {"chain": ["a", {"parallel": {"mode": "any", "of": ["b", "c"]}}, {"k_of_n": {"k": 2, "of": ["d", "e", "f"]}}, {"conditional": [{"p": 0.3, "then": "g"}, {"p": 0.7, "then": {"chain": ["h"]}}]}]}}`, ""},
	{WorkflowDeclaredV1, "single tool", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "structure": "a"}`, ""},
	{WorkflowDeclaredV1, "missing policy", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": "a"}`, "missing property 'policy'"},
	{WorkflowDeclaredV1, "empty chain", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"chain": []}}`, "at /structure/chain"},
	{WorkflowDeclaredV1, "two structures in one node", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"chain": ["a"], "parallel": {"mode": "all", "of": ["b"]}}}`, "at /structure"},
	{WorkflowDeclaredV1, "unknown structure", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"loop": ["a"]}}`, "'loop' not allowed"},
	{WorkflowDeclaredV1, "bad parallel mode deep", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"chain": ["a", {"parallel": {"mode": "some", "of": ["b"]}}]}}`, "at /structure/chain/1/parallel/mode"},
	{WorkflowDeclaredV1, "k below 1", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"k_of_n": {"k": 0, "of": ["a"]}}}`, "at /structure/k_of_n/k"},
	{WorkflowDeclaredV1, "k not an integer", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"k_of_n": {"k": 1.5, "of": ["a"]}}}`, "at /structure/k_of_n/k"},
	{WorkflowDeclaredV1, "probability above 1", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": {"conditional": [{"p": 2, "then": "a"}]}}`, "at /structure/conditional/0/p"},
	{WorkflowDeclaredV1, "empty tool id leaf", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "structure": ""}`, "at /structure"},
	{WorkflowDeclaredV1, "tool without determinism", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "tools": {"a": {"accuracy": 1}}, "structure": "a"}`, "at /tools/a: missing property 'determinism'"},
	{WorkflowDeclaredV1, "observed without successes", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "tools": {"a": {"determinism": "DETERMINISTIC", "observed": {"calls": 3}}}, "structure": "a"}`, "at /tools/a/observed"},
	{WorkflowDeclaredV1, "policy misspelt", `{"composition_id": "w", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compat": true}, "structure": "a"}`, "at /policy"},
	{WorkflowDeclaredV1, "missing requirement", `{"composition_id": "w", "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "structure": "a"}`, "missing property 'workflow_quality_requirement'"},

	// verdict.schema.v1
	{VerdictSchemaV1, "drift on used fields", `{"verdict": "DRIFT_ON_USED_FIELDS", "directive": "HALT: Drift on used fields ['user_id']. Apply migration.", "manifest_digest": ` + digest + `, "tool_id": "crm.lookup", "agent_id": "a", "version": "2", "baseline_fingerprint": "sha256:a", "current_fingerprint": "sha256:b", "changes": [{"path": "user_id", "kind": "field_renamed"}], "affected": ["user_id"], "migration": {"steps": []}, "guard_version": "1", "input_event_id": "e1", "input_subject": "toolsentry.telemetry.schema.crm=2Elookup", "input_sequence": 7}`, ""},
	{VerdictSchemaV1, "with action and summary", `{"verdict": "NO_BASELINE", "directive": "HALT", "action": "PROCEED", "summary": "new tool t, baselined", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "sha256:b", "changes": null, "affected": null, "migration": null, "guard_version": "2", "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, ""},
	{VerdictSchemaV1, "an unknown action", `{"verdict": "NO_BASELINE", "directive": "HALT", "action": "GO", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "sha256:b", "changes": null, "affected": null, "migration": null, "guard_version": "2", "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, "at /action"},
	{VerdictSchemaV1, "an empty summary", `{"verdict": "NO_BASELINE", "directive": "HALT", "summary": "", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "sha256:b", "changes": null, "affected": null, "migration": null, "guard_version": "2", "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, "at /summary"},
	{VerdictCompositionV1, "with action and summary", `{"verdict": "SINGLE_TOOL", "directive": "PROCEED", "action": "PROCEED", "summary": "workflow etl may run", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 1, "guard_version": "2", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3}`, ""},
	{VerdictSchemaV1, "no baseline, nulls", `{"verdict": "NO_BASELINE", "directive": "HALT", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "sha256:b", "changes": null, "affected": null, "migration": null, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 18446744073709551615}`, ""},
	{VerdictSchemaV1, "lower-case verdict", `{"verdict": "no_baseline", "directive": "HALT", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "", "changes": null, "affected": null, "migration": null, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, "at /verdict"},
	{VerdictSchemaV1, "digest not hex", `{"verdict": "NO_BASELINE", "directive": "HALT", "manifest_digest": "xyz", "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "", "changes": null, "affected": null, "migration": null, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, "at /manifest_digest"},
	{VerdictSchemaV1, "missing guard version", `{"verdict": "NO_BASELINE", "directive": "HALT", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "", "changes": null, "affected": null, "migration": null, "input_event_id": "e1", "input_subject": "s", "input_sequence": 1}`, "missing property 'guard_version'"},
	{VerdictSchemaV1, "sequence beyond uint64", `{"verdict": "NO_BASELINE", "directive": "HALT", "manifest_digest": ` + digest + `, "tool_id": "t", "version": "", "baseline_fingerprint": "", "current_fingerprint": "", "changes": null, "affected": null, "migration": null, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 18446744073709551616}`, "at /input_sequence"},

	// verdict.composition.v1
	{VerdictCompositionV1, "degraded", `{"verdict": "COMPOSITION_DEGRADED", "directive": "HALT: Composed quality 77.38% < requirement 95.00%.", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 0.7737809375, "composed_quality_lower": 0.7, "composed_quality_upper": 0.8, "confidence": "CONFIRMED", "failure_modes": [{"kind": "accuracy_multiplication"}], "guard_version": "1", "input_event_id": "e1", "input_subject": "toolsentry.telemetry.workflow.etl", "input_sequence": 3}`, ""},
	{VerdictCompositionV1, "quality above 1", `{"verdict": "SINGLE_TOOL", "directive": "PROCEED", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 1.01, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3}`, "at /composed_quality"},
	{VerdictCompositionV1, "confidence a number", `{"verdict": "SINGLE_TOOL", "directive": "PROCEED", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 1, "confidence": 0.95, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3}`, "at /confidence"},
	{VerdictCompositionV1, "failure modes not an array", `{"verdict": "SINGLE_TOOL", "directive": "PROCEED", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 1, "failure_modes": "none", "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3}`, "at /failure_modes"},
	{VerdictCompositionV1, "extra field", `{"verdict": "SINGLE_TOOL", "directive": "PROCEED", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 1, "tool_id": "x", "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3}`, "'tool_id' not allowed"},
	{VerdictCompositionV1, "with observed runs", `{"verdict": "COMPOSITION_DEGRADED", "directive": "HALT", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 0.4, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3, "observed": {"runs": 30, "successes": 12, "success_rate": 0.4, "success_rate_lower": 0.27, "success_rate_upper": 0.55, "predicted_quality": 0.9, "correlated_errors": true}}`, ""},
	{VerdictCompositionV1, "observed without runs", `{"verdict": "COMPOSITION_DEGRADED", "directive": "HALT", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 0.4, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3, "observed": {"successes": 1}}`, "missing properties 'runs'"},
	{VerdictCompositionV1, "observed with an extra field", `{"verdict": "COMPOSITION_DEGRADED", "directive": "HALT", "manifest_digest": ` + digest + `, "composition_id": "etl", "composed_quality": 0.4, "guard_version": "1", "input_event_id": "e1", "input_subject": "s", "input_sequence": 3, "observed": {"runs": 30, "successes": 12, "success_rate": 0.4, "success_rate_lower": 0.27, "success_rate_upper": 0.55, "predicted_quality": 0.9, "correlated_errors": true, "gap": 1}}`, "'gap' not allowed"},

	// workflow.observed.v1
	{WorkflowObservedV1, "chain with a parallel block", `{"composition_id": "support", "agent_id": "support-bot", "trace_id": "t1", "span_id": "s0", "structure": {"chain": ["a", {"parallel": {"mode": "all", "of": ["b", "c"]}}]}, "calls": [{"tool_id": "a", "span_id": "s1", "status": "ok"}, {"tool_id": "b", "span_id": "s2", "status": "error", "error_type": "timeout"}, {"tool_id": "c", "span_id": "s3", "status": "ok", "correct": false}], "success": false}`, ""},
	{WorkflowObservedV1, "one tool", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": "lookup", "calls": [{"tool_id": "lookup", "span_id": "s1", "status": "ok"}], "success": true}`, ""},
	{WorkflowObservedV1, "no calls", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": "lookup", "calls": [], "success": true}`, "at /calls"},
	{WorkflowObservedV1, "any-mode block", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": {"parallel": {"mode": "any", "of": ["x"]}}, "calls": [{"tool_id": "x", "span_id": "s1", "status": "ok"}], "success": true}`, "at /structure/parallel/mode"},
	{WorkflowObservedV1, "a vote is not observed", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": {"k_of_n": {"k": 1, "of": ["x"]}}, "calls": [{"tool_id": "x", "span_id": "s1", "status": "ok"}], "success": true}`, "'k_of_n' not allowed"},
	{WorkflowObservedV1, "bad status", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": "x", "calls": [{"tool_id": "x", "span_id": "s1", "status": "failed"}], "success": false}`, "at /calls/0/status"},
	{WorkflowObservedV1, "missing success", `{"composition_id": "c", "agent_id": "a", "trace_id": "t", "span_id": "s", "structure": "x", "calls": [{"tool_id": "x", "span_id": "s1", "status": "ok"}]}`, "missing property 'success'"},
	{WorkflowObservedV1, "extra field", `{"composition_id": "support", "agent_id": "support-bot", "trace_id": "t1", "span_id": "s0", "structure": {"chain": ["a", {"parallel": {"mode": "all", "of": ["b", "c"]}}]}, "calls": [{"tool_id": "a", "span_id": "s1", "status": "ok"}, {"tool_id": "b", "span_id": "s2", "status": "error", "error_type": "timeout"}, {"tool_id": "c", "span_id": "s3", "status": "ok", "correct": false}], "success": false, "arguments": {}}`, "'arguments' not allowed"},
	{OperatorBaselineAcceptedV1, "accept", `{"tool_id": "github/search_issues", "fingerprint": "sha256:ab", "operator": "ana@ops", "reason": "rollout 42"}`, ""},
	{OperatorBaselineAcceptedV1, "accept without the fingerprint seen", `{"tool_id": "t", "operator": "ana"}`, "missing property 'fingerprint'"},
	{OperatorBaselineAcceptedV1, "accept names no agent", `{"tool_id": "t", "fingerprint": "sha256:ab", "operator": "ana", "agent_id": "bot"}`, "'agent_id' not allowed"},
	{OperatorBaselineResetV1, "reset", `{"tool_id": "t", "operator": "ana"}`, ""},
	{OperatorBaselineResetV1, "reset without operator", `{"tool_id": "t"}`, "missing property 'operator'"},
	{OperatorAgentMigratedV1, "migrated", `{"tool_id": "t", "agent_id": "bot", "fingerprint": "sha256:ab", "operator": "ana"}`, ""},
	{OperatorAgentMigratedV1, "migrated without agent", `{"tool_id": "t", "operator": "ana"}`, "missing property 'agent_id'"},
	{OperatorAgentForgottenV1, "forgotten", `{"tool_id": "t", "agent_id": "bot", "operator": "ana", "reason": "retired"}`, ""},
	{OperatorAgentForgottenV1, "forgotten takes no fingerprint", `{"tool_id": "t", "agent_id": "bot", "operator": "ana", "fingerprint": "sha256:ab"}`, "'fingerprint' not allowed"},
	{OperatorAgentForgottenV1, "reason too long", `{"tool_id": "t", "agent_id": "bot", "operator": "ana", "reason": "` + strings.Repeat("x", 1025) + `"}`, "at /reason"},
}

func TestValidate(t *testing.T) {
	for _, tc := range validationCases {
		t.Run(tc.schema+"/"+tc.name, func(t *testing.T) {
			s, err := Lookup(tc.schema)
			if err != nil {
				t.Fatal(err)
			}
			err = s.ValidateJSON([]byte(tc.doc))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid document rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.schema+": ") {
				t.Errorf("error %q does not name the schema and %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateJSONRejectsNonJSON(t *testing.T) {
	s, err := Lookup(ToolContractV1)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{``, `{`, `{} {}`, `{"tool_id": "t"} x`} {
		if err := s.ValidateJSON([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateJSON(%q) = %v, want ErrInvalid", doc, err)
		}
	}
}

func TestErrorReportsAtMostThreePlaces(t *testing.T) {
	err := Validate(ToolInvocationV1, map[string]any{
		"agent_id": 1.0, "tool_id": 2.0, "tool_version": 3.0, "trace_id": 4.0, "span_id": 5.0,
	})
	if err == nil {
		t.Fatal("no error")
	}
	if got := strings.Count(err.Error(), "at /"); got != 3 {
		t.Errorf("error names %d places, want 3: %v", got, err)
	}
	if !strings.Contains(err.Error(), "and 2 more") {
		t.Errorf("error does not count the rest: %v", err)
	}
}

func BenchmarkValidateInvocation(b *testing.B) {
	s, err := Lookup(ToolInvocationV1)
	if err != nil {
		b.Fatal(err)
	}
	var v any
	doc := `{"agent_id": "agent-7", "tool_id": "crm.lookup", "tool_version": "2.1.0", "schema_fingerprint": "sha256:9f2c", "arguments": {"user_id": "u-123", "options": {"limit": 10, "fields": ["name", "email"]}}, "outcome": {"status": "ok", "correct": true}, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "latency_ms": 41.5}`
	v, err = unmarshalForTest(doc)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(v); err != nil {
			b.Fatal(err)
		}
	}
}

func unmarshalForTest(doc string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v any
	return v, dec.Decode(&v)
}
