package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDiff = flag.Bool("update-diff", false, "rewrite testdata/diff/*.txt and *.json from the diff command's output")

// toolschemaCases is where the guards package keeps its realistic tool
// versions: CASE/old.json, CASE/new.json, CASE/payload.json.
const toolschemaCases = "../../guards/toolschema/testdata/toolschema"

// runToolsentry runs the binary's dispatcher in-process.
func runToolsentry(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	code = exitCode(err, &errb) // writes the message to errb
	return out.String(), errb.String(), code
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *updateDiff {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update-diff to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update-diff rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// diffGoldenCases are the guards package's realistic cases, with what the
// agent reads of the output.
var diffGoldenCases = []struct {
	name       string
	usedOutput string
}{
	{"snake_to_camel", ""},
	{"enum_uppercased", ""},
	{"boolean_to_enum", ""},
	{"optional_with_default", ""},
	{"additional_properties_dropped", ""},
	{"output_array_to_string", "results[].url,results[].title"},
	{"description_rug_pull", ""},
	{"recursive_filter", ""},
	{"default_replaced", ""},
	{"typed_empty_schema", ""},
	{"optional_widened", "issues[].state"},
	{"icons_added", ""},
}

func TestDiffGolden(t *testing.T) {
	for _, tc := range diffGoldenCases {
		for _, format := range []string{"txt", "json"} {
			t.Run(tc.name+"/"+format, func(t *testing.T) {
				dir := filepath.Join(toolschemaCases, tc.name)
				args := []string{"diff", filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json"), "--args", filepath.Join(dir, "payload.json")}
				if tc.usedOutput != "" {
					args = append(args, "--used-output", tc.usedOutput)
				}
				if format == "json" {
					args = append(args, "--json")
				}
				out, errOut, code := runToolsentry(t, "", args...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				if format == "json" {
					var v map[string]any
					if err := json.Unmarshal([]byte(out), &v); err != nil {
						t.Fatalf("--json output is not JSON: %v", err)
					}
					var keys []string
					for k := range v {
						keys = append(keys, k)
					}
					if len(keys) != 8 {
						t.Errorf("--json keys %v, want old_fingerprint, new_fingerprint, changes, verdict, directive, manifest_digest, affected, migration", keys)
					}
				}
				checkGolden(t, filepath.Join("testdata", "diff", tc.name+"."+format), out)
			})
		}
	}
}

func TestDiffFlagsInAnyPosition(t *testing.T) {
	dir := filepath.Join(toolschemaCases, "snake_to_camel")
	old, new := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	orders := [][]string{
		{"diff", "--used", "per_page,owner", "--json", old, new},
		{"diff", old, new, "--used=per_page", "--used", "owner", "--json"},
		{"diff", old, "--json", new, "--used", "owner,per_page"},
		{"diff", "--json", "--used", "owner", "--", old, new, "--used", "per_page"},
	}
	var first string
	for i, args := range orders {
		out, errOut, code := runToolsentry(t, "", args...)
		if i == 3 {
			// After "--" everything is a file: three files is a usage error.
			if code != 2 {
				t.Errorf("%v: exit %d, want 2", args, code)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if i == 0 {
			first = out
			if !strings.Contains(out, `"verdict": "DRIFT_ON_USED_FIELDS"`) || !strings.Contains(out, `"per_page"`) {
				t.Fatalf("unexpected output:\n%s", out)
			}
		} else if out != first {
			t.Errorf("%v gives different output:\n%s", args, out)
		}
	}
}

func TestDiffUsageErrors(t *testing.T) {
	dir := filepath.Join(toolschemaCases, "snake_to_camel")
	old := filepath.Join(dir, "old.json")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"one file", []string{"diff", old}, 2, "needs two files"},
		{"unknown flag", []string{"diff", "--verbose", old, old}, 2, "flag provided but not defined"},
		{"missing file", []string{"diff", old, "nope.json"}, 1, "nope.json"},
		{"not a tool", []string{"diff", old, "testdata/diff/not_json.txt"}, 1, "not valid JSON"},
		{"several tools need --tool", []string{"diff", "testdata/diff/tools_list_v1.json", "testdata/diff/tools_list_v2.json"}, 2, `pick one with --tool ("read_file", "write_file")`},
		{"unknown tool", []string{"diff", "--tool", "delete_file", "testdata/diff/tools_list_v1.json", "testdata/diff/tools_list_v2.json"}, 1, `no tool named "delete_file"`},
		{"bad used path", []string{"diff", "--used", "a..b", old, old}, 2, `--used or --used-output: path "a..b": a dot needs a name on both sides`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runToolsentry(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestDiffToolFromToolsList(t *testing.T) {
	out, errOut, code := runToolsentry(t, "", "diff", "--tool", "write_file", "testdata/diff/tools_list_v1.json", "testdata/diff/tools_list_v2.json", "--used", "path,content")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"encoding", "field_added", "DRIFT_ON_UNUSED_FIELDS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDiffHelp(t *testing.T) {
	out, _, code := runToolsentry(t, "", "diff", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Usage: toolsentry diff", "tools/list", "--used PATHS", "(default: none)", "--json", "Example:"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	list, _, _ := runToolsentry(t, "", "help")
	for _, name := range []string{"diff", "migrate", "fingerprint"} {
		if !strings.Contains(list, "  "+name) {
			t.Errorf("toolsentry help does not list %s", name)
		}
	}
}
