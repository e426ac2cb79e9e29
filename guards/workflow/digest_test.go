package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPyFloatRepr(t *testing.T) {
	tenth, fifth := 0.1, 0.2
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{0.3, "0.3"},
		{tenth + fifth, "0.30000000000000004"},
		{1e-4, "0.0001"},
		{1e-5, "1e-05"},
		{1.5e-7, "1.5e-07"},
		{123456789012345.6, "123456789012345.6"},
		{1e16, "1e+16"},
		{2.5e-300, "2.5e-300"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
	}
	for _, tt := range tests {
		if got := guards.PyFloatRepr(tt.in); got != tt.want {
			t.Errorf("PyFloatRepr(%v) = %q, want %q (Python's repr)", tt.in, got, tt.want)
		}
	}
}

// Every digest EvaluateWorkflow writes is recomputed by
// testdata/workflow/digest.py from the documented rules with Python's
// json.dumps and hashlib: the golden cases, the gate and compatibility
// tables and random workflows over awkward tool ids and probabilities.
func TestWorkflowDigestsMatchPython(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	var lines []string
	var wants []string
	add := func(raw string, m WorkflowManifest) {
		lines = append(lines, `{"workflow": `+raw+`, "manifest": `+wfJSON(t, m)+`}`)
		wants = append(wants, m.ManifestDigest)
	}
	for _, c := range readWorkflowCases(t) {
		w, err := ParseWorkflow([]byte(c))
		if err != nil {
			continue
		}
		add(c, wfEvaluate(t, w))
	}
	for _, c := range wfGateCases() {
		add(wfJSON(t, c.w), wfEvaluate(t, c.w))
	}
	for _, c := range wfCompatCases() {
		add(wfJSON(t, c.workflow()), wfEvaluate(t, c.workflow()))
	}
	policy := incompatibilityPolicyWorkflow()
	policy.Policy.RequireSchemaCompatibility = true
	add(wfJSON(t, policy), wfEvaluate(t, policy))
	verdicts := map[guards.CompositionVerdict]int{}
	r := rand.New(rand.NewPCG(15, 16))
	for range 600 {
		w := wfRandomWorkflow(r, false)
		m := wfEvaluate(t, w)
		verdicts[m.Verdict]++
		add(wfJSON(t, w), m)
	}
	for _, v := range []guards.CompositionVerdict{guards.SingleTool, guards.SemanticIncompatible, guards.CompositionDegraded, guards.CompositionMeetsQuality} {
		if verdicts[v] < 20 {
			t.Fatalf("random workflows gave %d %s verdicts (%v)", verdicts[v], v, verdicts)
		}
	}

	cmd := exec.Command("python3", filepath.Join("testdata", "workflow", "digest.py"))
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("digest.py: %v\n%s", err, stderr.String())
	}
	got := strings.Fields(string(out))
	if len(got) != len(wants) {
		t.Fatalf("digest.py answered %d lines for %d", len(got), len(wants))
	}
	for i := range wants {
		if got[i] != wants[i] {
			var c struct{ Workflow, Manifest json.RawMessage }
			_ = json.Unmarshal([]byte(lines[i]), &c)
			t.Errorf("case %d: Go digest %s, Python %s\nworkflow %s\nmanifest %s", i, wants[i], got[i], c.Workflow, c.Manifest)
		}
	}
	if diff := cmp.Diff(wants, got); diff != "" && !t.Failed() {
		t.Errorf("(-go +python):\n%s", diff)
	}
}
