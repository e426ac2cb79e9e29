package guards

import (
	"errors"
	"strings"
	"testing"
)

type strictCase struct {
	Composition ToolComposition   `json:"composition"`
	Policy      CompositionPolicy `json:"policy"`
}

func TestDecodeStrictErrors(t *testing.T) {
	const tool = `{"tool_id": "a", "accuracy": 0.5, "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`
	comp := func(tools string) string {
		return `{"composition": {"composition_id": "c", "tools": [` + tools + `], "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false}, "policy": {"require_schema_compatibility": true}}`
	}
	tests := []struct {
		name, in, want string
	}{
		{"not JSON", `{"composition": `, "invalid input: not valid JSON: unexpected EOF"},
		{"trailing data", comp(tool) + ` {}`, "invalid input: not valid JSON: data after the value"},
		{"top level not an object", `[1]`, "invalid input: the value: want object, got array"},
		{"unknown top-level field", `{"composition": {}, "policy": {}, "polcy": {}}`, "invalid input: polcy: unknown field (known: composition, policy)"},
		{"misspelt field", comp(`{"tool_id": "a", "acuracy": 0.5, "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "invalid input: composition.tools[0].acuracy: unknown field (known: accuracy, determinism, expected_input_schema_hash, output_schema_hash, tool_id)"},
		{"case differs", comp(`{"Tool_ID": "a", "tool_id": "a", "accuracy": 0.5, "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "composition.tools[0].Tool_ID: unknown field"},
		{"missing field", comp(`{"tool_id": "a", "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "invalid input: composition.tools[0].accuracy: missing"},
		{"id not a string", comp(`{"tool_id": 7, "accuracy": 0.5, "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "invalid input: composition.tools[0].tool_id: want string, got number"},
		{"hash null", comp(`{"tool_id": "a", "accuracy": 0.5, "determinism": "DETERMINISTIC", "output_schema_hash": null, "expected_input_schema_hash": "h"}`), "composition.tools[0].output_schema_hash: want string, got null"},
		{"accuracy a string", comp(`{"tool_id": "a", "accuracy": "0.5", "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "composition.tools[0].accuracy: want number, got string"},
		{"accuracy overflows", comp(`{"tool_id": "a", "accuracy": 1e400, "determinism": "DETERMINISTIC", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`), "composition.tools[0].accuracy: number 1e400 is out of range"},
		{"bool as string", `{"composition": {"composition_id": "c", "tools": [], "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": "false"}, "policy": {"require_schema_compatibility": true}}`, "composition.introduction_of_nondeterminism_acceptable: want boolean, got string"},
		{"tools not an array", `{"composition": {"composition_id": "c", "tools": {}, "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false}, "policy": {"require_schema_compatibility": true}}`, "composition.tools: want array, got object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c strictCase
			err := DecodeStrict([]byte(tt.in), &c)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Errorf("error %q, want it to contain %q", got, tt.want)
			}
		})
	}

	var ok strictCase
	if err := DecodeStrict([]byte(comp(tool+", "+tool)), &ok); err != nil {
		t.Fatalf("valid case rejected: %v", err)
	}
	if len(ok.Composition.Tools) != 2 || ok.Composition.Tools[1].Accuracy != 0.5 || !ok.Policy.RequireSchemaCompatibility {
		t.Errorf("decoded %+v", ok)
	}
}

func FuzzDecodeStrict(f *testing.F) {
	f.Add([]byte(`{"composition": {"composition_id": "c", "tools": [], "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false}, "policy": {"require_schema_compatibility": true}}`))
	f.Add([]byte(`{"current": {"tool_id": "t", "version": "1", "schema_fingerprint": "f", "used_fields": ["a"]}, "baseline": null}`))
	f.Add([]byte(`[[[[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c strictCase
		if err := DecodeStrict(data, &c); err == nil {
			_ = c.Composition.Validate()
			_ = EvaluateComposition(c.Composition, c.Policy)
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
		var s struct {
			Current  ToolSchema      `json:"current"`
			Baseline *SchemaBaseline `json:"baseline,omitempty"`
		}
		if err := DecodeStrict(data, &s); err == nil {
			_ = EvaluateSchema(s.Current, s.Baseline)
		}
	})
}
