package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"errors"
	"math"
	"strings"
	"testing"
)

func TestPredictedQuality(t *testing.T) {
	acc := func(x float64) *float64 { return &x }
	obs := func(s, n int64) *Observed { return &Observed{Calls: n, Successes: s} }
	base := func(s Node, tools map[string]WorkflowTool) Workflow {
		return Workflow{CompositionID: "c", WorkflowQualityRequirement: 0.5, Tools: tools, Structure: s}
	}
	cases := []struct {
		name string
		w    Workflow
		want float64
	}{
		{"measured rate wins over the declared accuracy", base(Chain(Tool("a"), Tool("b")), map[string]WorkflowTool{
			"a": {Accuracy: acc(0.99), Determinism: guards.Deterministic, Observed: obs(9, 10)},
			"b": {Determinism: guards.Deterministic, Observed: obs(8, 10)},
		}), 0.9 * 0.8},
		{"declared accuracy without calls", base(Chain(Tool("a"), Tool("b")), map[string]WorkflowTool{
			"a": {Accuracy: acc(0.5), Determinism: guards.Deterministic, Observed: obs(0, 0)},
			"b": {Determinism: guards.Deterministic, Observed: obs(3, 4)},
		}), 0.5 * 0.75},
		{"parallel any", base(ParallelAny(Tool("a"), Tool("b")), map[string]WorkflowTool{
			"a": {Determinism: guards.Deterministic, Observed: obs(1, 2)},
			"b": {Determinism: guards.Deterministic, Observed: obs(1, 2)},
		}), 0.75},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PredictedQuality(tc.w)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("PredictedQuality = %v, want %v", got, tc.want)
			}
		})
	}
	_, err := PredictedQuality(base(Tool("a"), map[string]WorkflowTool{"a": {Determinism: guards.Deterministic}}))
	if !errors.Is(err, ErrUnquantified) {
		t.Errorf("a tool with neither accuracy nor calls: %v, want ErrUnquantified", err)
	}
}

func TestCompareObserved(t *testing.T) {
	cases := []struct {
		name                string
		predicted           float64
		runs, successes     int64
		wantCorrelated      bool
		wantLowerBelowUpper bool
	}{
		{"prediction inside the interval", 0.72, 100, 72, false, true},
		{"runs far better than predicted", 0.72, 100, 95, true, true},
		{"runs far worse than predicted", 0.72, 100, 40, true, true},
		{"small sample: a wide interval", 0.72, 30, 18, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := CompareObserved(tc.predicted, tc.runs, tc.successes)
			if err != nil {
				t.Fatal(err)
			}
			rate := float64(tc.successes) / float64(tc.runs)
			if o.SuccessRate != rate || o.Runs != tc.runs || o.Successes != tc.successes || o.PredictedQuality != tc.predicted {
				t.Errorf("got %+v", o)
			}
			lo, hi := wilsonBounds(tc.successes, tc.runs)
			if o.SuccessRateLower != lo || o.SuccessRateUpper != hi || !(lo < rate && rate < hi) {
				t.Errorf("bounds %v %v, want the Wilson bounds %v %v around %v", o.SuccessRateLower, o.SuccessRateUpper, lo, hi, rate)
			}
			if o.CorrelatedErrors != tc.wantCorrelated {
				t.Errorf("CorrelatedErrors = %v, want %v (interval %v..%v, predicted %v)", o.CorrelatedErrors, tc.wantCorrelated, lo, hi, tc.predicted)
			}
		})
	}
	for _, bad := range []struct {
		p    float64
		n, s int64
	}{{0.5, 0, 0}, {0.5, 10, 11}, {0.5, 10, -1}, {1.5, 10, 5}, {math.NaN(), 10, 5}} {
		if _, err := CompareObserved(bad.p, bad.n, bad.s); !errors.Is(err, guards.ErrInvalid) {
			t.Errorf("CompareObserved(%v, %d, %d): %v, want ErrInvalid", bad.p, bad.n, bad.s, err)
		}
	}
}

func TestApplyObserved(t *testing.T) {
	acc := func(x float64) *float64 { return &x }
	w := Workflow{
		CompositionID: "support", WorkflowQualityRequirement: 0.8,
		Tools: map[string]WorkflowTool{
			"a": {Accuracy: acc(0.95), Determinism: guards.Deterministic},
			"b": {Accuracy: acc(0.95), Determinism: guards.Deterministic},
		},
		Structure: Chain(Tool("a"), Tool("b")),
	}
	meets, err := EvaluateWorkflow(w)
	if err != nil || meets.Verdict != guards.CompositionMeetsQuality {
		t.Fatalf("setup: %v %v", meets.Verdict, err)
	}
	correlatedLow, _ := CompareObserved(0.9025, 100, 60)
	correlatedHigh, _ := CompareObserved(0.81, 100, 97)
	independentLow, _ := CompareObserved(0.62, 100, 60)

	got := ApplyObserved(meets, w, correlatedLow)
	if got.Verdict != guards.CompositionDegraded || !strings.HasPrefix(got.Directive, "HALT: Observed quality 60.00% < requirement 80.00% over 100 runs; errors are correlated: per-tool accuracy predicts 90.25%") {
		t.Errorf("correlated and below the requirement: %s %q", got.Verdict, got.Directive)
	}
	if got.ComposedQuality != 0.6 || got.Confidence != ConfidenceConfirmed || got.ComposedQualityLower != nil || len(got.ManifestDigest) != 64 {
		t.Errorf("degraded manifest: %+v", got.CompositionManifest)
	}
	if again := ApplyObserved(meets, w, correlatedLow); again.ManifestDigest != got.ManifestDigest {
		t.Error("the digest is not deterministic")
	}
	more, _ := CompareObserved(0.9025, 130, 78)
	if ApplyObserved(meets, w, more).ManifestDigest == got.ManifestDigest {
		t.Error("the digest does not cover the runs")
	}
	if got := ApplyObserved(meets, w, correlatedHigh); got.Verdict != guards.CompositionMeetsQuality || got.ManifestDigest != meets.ManifestDigest {
		t.Errorf("correlated but above the requirement: %s, want the manifest unchanged", got.Verdict)
	}
	if got := ApplyObserved(meets, w, independentLow); got.Verdict != guards.CompositionMeetsQuality {
		t.Errorf("below the requirement but as predicted: %s, want the manifest unchanged", got.Verdict)
	}
	halt := guards.DegradedManifest(0.5, 0.8)
	if got := ApplyObserved(WorkflowManifest{CompositionManifest: halt}, w, correlatedLow); got.CompositionManifest != halt {
		t.Errorf("a HALT must stay as it is: %+v", got.CompositionManifest)
	}
}
