package workflow

// Golden manifests: every case of testdata/workflow/cases.jsonl with its
// full manifest (bounds, failure modes, incompatibilities, measurements) in
// testdata/workflow/cases.golden. The Monte Carlo bounds are pinned here bit
// for bit. Regenerate after an intended change with:
//
//	go test ./guards -run WorkflowGolden -update-workflow

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateWorkflow = flag.Bool("update-workflow", false, "rewrite testdata/workflow/cases.golden")

// readWorkflowCases returns the non-blank lines of testdata/workflow/cases.jsonl.
func readWorkflowCases(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "workflow", "cases.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			cases = append(cases, l)
		}
	}
	return cases
}

// answerWorkflow is one golden line: the manifest, or {"error": ...}.
func answerWorkflow(t *testing.T, line string) string {
	t.Helper()
	var v any
	w, err := ParseWorkflow([]byte(line))
	if err == nil {
		v, err = EvaluateWorkflow(w)
	}
	if err != nil {
		v = map[string]string{"error": err.Error()}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWorkflowGolden(t *testing.T) {
	path := filepath.Join("testdata", "workflow", "cases.golden")
	var got strings.Builder
	for _, c := range readWorkflowCases(t) {
		got.WriteString(answerWorkflow(t, c))
	}
	if *updateWorkflow {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with -update-workflow)", err)
	}
	wantLines, gotLines := wfSplitLines(string(want)), wfSplitLines(got.String())
	if diff := cmp.Diff(wantLines, gotLines); diff != "" {
		t.Errorf("manifests differ from %s (-want +got):\n%s", path, diff)
	}
}

func wfSplitLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
