package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

func TestCheckAnswersEveryLineInOrder(t *testing.T) {
	in := strings.Join([]string{
		`{"current": {"tool_id": "crm.lookup", "version": "2", "schema_fingerprint": "b", "used_fields": ["user_id"]}, "baseline": {"baseline_fingerprint": "a", "baseline_used_fields": ["user_id"], "changed_fields": ["user_id", "userId"]}}`,
		`{"current": {"tool_id": "crm.lookup", "version": "2", "schema_fingerprint": "b", "used_fields": ["user_id"]}, "basline": null}`,
		``,
		`not json`,
		`{"current": {"tool_id": "crm.lookup", "version": "2", "schema_fingerprint": "b", "used_fields": []}, "baseline": null}`,
	}, "\n")
	out, _, code := runCmd(t, in, "check", "schema")
	if code != 1 {
		t.Errorf("exit %d, want 1 (a line failed)", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`{"verdict":"DRIFT_ON_USED_FIELDS","directive":"HALT: Drift on used fields ['user_id']. Apply migration.","manifest_digest":"` + "eaec3577303ffd2bfbe429f516d677b862947489a03ce1f1a8d2beb6b9014ccd" + `"}`,
		`{"error":"line 2: basline: unknown field (known: baseline, current)"}`,
		`{"error":"line 4: not valid JSON: invalid character 'o' in literal null (expecting 'u')"}`,
		`{"verdict":"NO_BASELINE","directive":"HALT: No baseline schema. Capture current fingerprint as baseline.","manifest_digest":"69132ee180d97168b9820e9709f8278402a6de4d08c0c614648b36a7ae7f37bc"}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, lines[i], want[i])
		}
	}
}

func TestCheckExitZeroWhenAllLinesPass(t *testing.T) {
	in := `{"policy": {"require_schema_compatibility": false}, "composition": {"tools": [], "composition_id": "c", "workflow_quality_requirement": 1, "introduction_of_nondeterminism_acceptable": true}}` + "\n"
	out, _, code := runCmd(t, in, "check", "composition")
	if code != 0 {
		t.Fatalf("exit %d, want 0; out %s", code, out)
	}
	if !strings.Contains(out, `"verdict":"SINGLE_TOOL"`) {
		t.Errorf("out %s", out)
	}
}

func TestCheckValidationErrors(t *testing.T) {
	tool := func(acc, det string) string {
		return `{"tool_id": "a", "accuracy": ` + acc + `, "determinism": "` + det + `", "output_schema_hash": "h", "expected_input_schema_hash": "h"}`
	}
	line := func(tools, req string) string {
		return `{"composition": {"composition_id": "c", "tools": [` + tools + `], "workflow_quality_requirement": ` + req + `, "introduction_of_nondeterminism_acceptable": false}, "policy": {"require_schema_compatibility": true}}`
	}
	tests := []struct{ in, want string }{
		{line(tool("1.5", "DETERMINISTIC"), "0.5"), `{"error":"line 1: composition: tools[0]: invalid input: accuracy 1.5 is not a number in [0, 1]"}`},
		{line(tool("0.5", "MAYBE"), "0.5"), `{"error":"line 1: composition: tools[0]: invalid input: determinism \"MAYBE\", want \"DETERMINISTIC\" or \"NON_DETERMINISTIC\""}`},
		{line(tool("0.5", "DETERMINISTIC"), "-1"), `{"error":"line 1: composition: invalid input: workflow_quality_requirement -1 is not a number in [0, 1]"}`},
	}
	for _, tt := range tests {
		out, _, code := runCmd(t, tt.in, "check", "composition")
		if code != 1 || strings.TrimSpace(out) != tt.want {
			t.Errorf("exit %d, out %s\nwant exit 1, %s", code, out, tt.want)
		}
	}
}

func TestCheckUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"check"}, {"check", "nope"}, {"check", "schema", "extra"}} {
		_, stderr, code := runCmd(t, "", args...)
		if code != 2 || !strings.Contains(stderr, "check") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and a hint", args, code, stderr)
		}
	}
	out, _, code := runCmd(t, "", "check", "--help")
	if code != 0 || !strings.Contains(out, "Usage: toolsentry check KIND") {
		t.Errorf("--help: exit %d, out %q", code, out)
	}
}

// The check command answers the parity corpus exactly as the seeds' Python did.
func TestCheckMatchesParityCorpus(t *testing.T) {
	for _, kind := range []string{"composition", "schema"} {
		f, err := os.Open(filepath.Join("..", "..", "guards", "testdata", "parity", kind+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var cases, wants []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() && len(cases) < 500 {
			var l struct{ Case, Want json.RawMessage }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			cases = append(cases, string(l.Case))
			wants = append(wants, string(l.Want))
		}
		f.Close()
		out, _, code := runCmd(t, strings.Join(cases, "\n"), "check", kind)
		if code != 0 {
			t.Fatalf("%s: exit %d", kind, code)
		}
		got := strings.Split(strings.TrimSpace(out), "\n")
		if len(got) != len(wants) {
			t.Fatalf("%s: %d answers for %d cases", kind, len(got), len(wants))
		}
		for i := range got {
			var g, w map[string]any
			if err := errors.Join(json.Unmarshal([]byte(got[i]), &g), json.Unmarshal([]byte(wants[i]), &w)); err != nil {
				t.Fatal(err)
			}
			for k, v := range w {
				if g[k] != v {
					t.Errorf("%s case %d: %s = %v, want %v", kind, i+1, k, g[k], v)
				}
			}
			if len(g) != len(w) {
				t.Errorf("%s case %d: fields %v, want %v", kind, i+1, g, w)
			}
		}
	}
}
