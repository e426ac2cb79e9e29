package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command answers the guards' golden workflow cases byte for byte.
func TestCheckWorkflowMatchesGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "guards", "workflow", "testdata", "workflow")
	cases, err := os.ReadFile(filepath.Join(dir, "cases.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join(dir, "cases.golden"))
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCmd(t, string(cases), "check", "workflow")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	got, want := strings.Split(out, "\n"), strings.Split(string(golden), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d answer lines for %d golden lines", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}

func TestCheckWorkflowErrors(t *testing.T) {
	line := func(tools, structure string) string {
		return `{"composition_id": "c", "workflow_quality_requirement": 0.9, "introduction_of_nondeterminism_acceptable": false, "policy": {"require_schema_compatibility": true}, "tools": {` + tools + `}, "structure": ` + structure + `}`
	}
	ab := `"a": {"accuracy": 0.95, "determinism": "DETERMINISTIC"}, "b": {"accuracy": 0.95, "determinism": "DETERMINISTIC"}`
	in := strings.Join([]string{
		line(ab, `{"chain": ["a", "b"]}`),
		line(ab, `{"chain": ["a", "x"]}`),
		``,
		line(ab, `{"conditional": [{"p": 0.5, "then": "a"}, {"p": 0.6, "then": "b"}]}`),
		line(`"a": {"determinism": "DETERMINISTIC"}`, `"a"`),
		line(ab, `{"k_of_n": {"k": 3, "of": ["a", "b"]}}`),
		line(`"a": {"accuracy": 0.95, "determinism": "DETERMINISTIC", "output_schema": {"type": 7}}, "b": {"accuracy": 0.95, "determinism": "DETERMINISTIC"}`, `{"chain": ["a", "b"]}`),
		`{"composition_id": "c"`,
	}, "\n")
	out, _, code := runCmd(t, in, "check", "workflow")
	if code != 1 {
		t.Errorf("exit %d, want 1 (lines failed)", code)
	}
	// The digest is the seed's: sha256 of json.dumps({"composition": "c",
	// "tools": ("a", "b"), "composed_quality": "0.902", "requirement":
	// "0.900"}, sort_keys=True), computed with Python.
	want := []string{
		`{"verdict":"COMPOSITION_MEETS_QUALITY","composed_quality":0.9025,"directive":"PROCEED: 2-tool composition, quality 90.25%.","manifest_digest":"` + "384be699015327aab493b58b3c7fdec0aadab8c10a02aa740fadb2c18ab2d2eb" + `","failure_modes":[{"mode":"ACCURACY_MULTIPLICATION","detail":"composed quality 90.25% is below the worst tool's 95.00%: 2 tool calls compound their errors","loss":0.09750000000000003,"excess_loss":0.04749999999999999,"stages":[{"at":"structure.chain[0]","tool_id":"a","accuracy":0.95,"contribution":0.048750000000000016},{"at":"structure.chain[1]","tool_id":"b","accuracy":0.95,"contribution":0.048750000000000016}]}]}`,
		`{"error":"line 2: structure.chain[1]: tool \"x\" has no entry in tools"}`,
		`{"error":"line 4: structure: probabilities sum to 1.1, want 1 (within 1e-09)"}`,
		`{"error":"line 5: unquantified composition: structure: tool \"a\" has neither a declared accuracy nor observed calls"}`,
		`{"error":"line 6: structure.k: k 3 is not in [1, n] with n = 2"}`,
		`{"error":"line 7: tools.a.output_schema: invalid input: `, // the schema normaliser's words follow
		`{"error":"line 8: not valid JSON: unexpected EOF"}`,
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] && !(strings.HasSuffix(want[i], ": ") && strings.HasPrefix(got[i], want[i])) {
			t.Errorf("answer %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}

func TestCheckWorkflowListedInHelp(t *testing.T) {
	out, _, code := runCmd(t, "", "check", "--help")
	if code != 0 || !strings.Contains(out, "\n  workflow\n") || !strings.Contains(out, `{"k_of_n": {"k", "of": [NODE, ...]}}`) {
		t.Errorf("exit %d; help does not describe the workflow kind:\n%s", code, out)
	}
}
