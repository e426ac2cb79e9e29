package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func wfObserved(calls, successes int64) *Observed {
	return &Observed{Calls: calls, Successes: successes}
}

// Wilson score bounds, one-sided 95%, computed by hand from the formula.
func TestWilsonBounds(t *testing.T) {
	tests := []struct {
		s, n   int64
		lo, hi float64
	}{
		{90, 100, 0.8396444903889079, 0.9392813329845527},
		{95, 100, 0.9008389147209472, 0.9754526365741958},
		{0, 10, 0, 0.21294197008340698},
		{10, 10, 0.7870580299165931, 1},
	}
	for _, tt := range tests {
		lo, hi := wilsonBounds(tt.s, tt.n)
		if diff := cmp.Diff([]float64{tt.lo, tt.hi}, []float64{lo, hi}, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
			t.Errorf("%d/%d (-want +got):\n%s", tt.s, tt.n, diff)
		}
	}
}

// The Monte Carlo bounds agree with quantiles known in closed form:
// Beta(11, 1) has 5th percentile 0.05^(1/11); Beta(2, 2) solves
// 3x² − 2x³ = 0.05; the product of two Beta(11, 1) is exp(−G/11) with G
// Gamma(2, 1), whose 5th percentile solves e^(−y)(1 + y) = 0.05.
func TestComposedBoundsMatchClosedForms(t *testing.T) {
	tests := []struct {
		name      string
		structure Node
		tools     map[string]WorkflowTool
		lo, hi    float64
	}{
		{"10 of 10", Tool("a"), map[string]WorkflowTool{"a": {Determinism: guards.Deterministic, Observed: wfObserved(10, 10)}}, 0.7615958096191473, 1},
		{"1 of 2", Tool("a"), map[string]WorkflowTool{"a": {Determinism: guards.Deterministic, Observed: wfObserved(2, 1)}}, 0.13535036217158378, 0.8646496378284162},
		{"chain of two 10 of 10", Chain(Tool("a"), Tool("b")), map[string]WorkflowTool{
			"a": {Determinism: guards.Deterministic, Observed: wfObserved(10, 10)},
			"b": {Determinism: guards.Deterministic, Observed: wfObserved(10, 10)},
		}, 0.6496897025528727, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := wfEvaluate(t, wfLenient(tt.structure, tt.tools))
			got := []float64{*m.ComposedQualityLower, *m.ComposedQualityUpper}
			// Monte Carlo error at 20,000 draws is about 0.002 here.
			if diff := cmp.Diff([]float64{tt.lo, tt.hi}, got, cmpopts.EquateApprox(0, 0.006)); diff != "" {
				t.Errorf("(-closed form +Monte Carlo):\n%s", diff)
			}
		})
	}
}

func TestMeasuredAgainstDeclared(t *testing.T) {
	tests := []struct {
		name  string
		tool  WorkflowTool
		want  []ToolMeasurement
		bound bool
	}{
		{
			name:  "declared 99% refuted by 90 of 100",
			tool:  WorkflowTool{Accuracy: wfPtr(0.99), Determinism: guards.Deterministic, Observed: wfObserved(100, 90)},
			want:  []ToolMeasurement{{ToolID: "a", Calls: 100, Successes: 90, Measured: 0.9, MeasuredLower: 0.8396444903889079, MeasuredUpper: 0.9392813329845527, Declared: wfPtr(0.99), BelowDeclared: true}},
			bound: true,
		},
		{
			name:  "declared 93% consistent with 90 of 100",
			tool:  WorkflowTool{Accuracy: wfPtr(0.93), Determinism: guards.Deterministic, Observed: wfObserved(100, 90)},
			want:  []ToolMeasurement{{ToolID: "a", Calls: 100, Successes: 90, Measured: 0.9, MeasuredLower: 0.8396444903889079, MeasuredUpper: 0.9392813329845527, Declared: wfPtr(0.93)}},
			bound: true,
		},
		{
			name: "no calls is no measurement",
			tool: WorkflowTool{Accuracy: wfPtr(0.93), Determinism: guards.Deterministic, Observed: wfObserved(0, 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tools := wfABCD()
			tools["a"] = tt.tool
			m := wfEvaluate(t, wfLenient(Chain(Tool("a"), Tool("b")), tools))
			if diff := cmp.Diff(tt.want, m.Measurements, cmpopts.EquateApprox(0, 1e-15)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if (m.ComposedQualityLower != nil) != tt.bound {
				t.Errorf("lower bound %v, want one: %v", m.ComposedQualityLower, tt.bound)
			}
			if want := *tt.tool.Accuracy * 0.8; m.ComposedQuality != want {
				t.Errorf("composed quality %v, want the declared %v", m.ComposedQuality, want)
			}
		})
	}
}

func TestWorkflowConfidence(t *testing.T) {
	det := func(acc float64) WorkflowTool { return wfDeclared(acc, guards.Deterministic) }
	obs := func(calls, successes int64) WorkflowTool {
		return WorkflowTool{Determinism: guards.Deterministic, Observed: wfObserved(calls, successes)}
	}
	tests := []struct {
		name       string
		tools      map[string]WorkflowTool
		req        float64
		verdict    guards.CompositionVerdict
		confidence Confidence
		lowerIsQ   bool
	}{
		{"meets, and at the lower bound", map[string]WorkflowTool{"a": obs(10000, 9900), "b": det(0.95)}, 0.9, guards.CompositionMeetsQuality, ConfidenceConfirmed, false},
		{"meets, not at the lower bound", map[string]WorkflowTool{"a": obs(20, 19), "b": det(1)}, 0.9, guards.CompositionMeetsQuality, ConfidenceInconclusive, false},
		{"degraded, also at the upper bound", map[string]WorkflowTool{"a": obs(1000, 800), "b": det(1)}, 0.9, guards.CompositionDegraded, ConfidenceConfirmed, false},
		{"degraded, not at the upper bound", map[string]WorkflowTool{"a": obs(10, 8), "b": det(1)}, 0.9, guards.CompositionDegraded, ConfidenceInconclusive, false},
		{"a measurement never inflates a contract", map[string]WorkflowTool{"a": {Accuracy: wfPtr(0.9), Determinism: guards.Deterministic, Observed: wfObserved(1000, 1000)}, "b": det(0.9)}, 0.81, guards.CompositionMeetsQuality, ConfidenceConfirmed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := wfLenient(Chain(Tool("a"), Tool("b")), tt.tools)
			w.WorkflowQualityRequirement = tt.req
			m := wfEvaluate(t, w)
			if m.Verdict != tt.verdict || m.Confidence != tt.confidence {
				t.Errorf("%s %s, want %s %s (bounds %v..%v, q %v)", m.Verdict, m.Confidence, tt.verdict, tt.confidence, *m.ComposedQualityLower, *m.ComposedQualityUpper, m.ComposedQuality)
			}
			if got := *m.ComposedQualityLower == m.ComposedQuality; got != tt.lowerIsQ {
				t.Errorf("lower bound %v equals quality %v: %v, want %v", *m.ComposedQualityLower, m.ComposedQuality, got, tt.lowerIsQ)
			}
		})
	}
}

// Bounds come with quality verdicts and SINGLE_TOOL only; confidence with
// quality verdicts only.
func TestWorkflowBoundsOnlyWhereQualityDecides(t *testing.T) {
	tools := map[string]WorkflowTool{
		"a": {Determinism: guards.Deterministic, Observed: wfObserved(100, 95)},
		"b": {Determinism: guards.NonDeterministic, Observed: wfObserved(100, 95)},
	}
	single := wfEvaluate(t, Workflow{Tools: tools, Structure: Tool("a")})
	if single.Verdict != guards.SingleTool || single.ComposedQualityLower == nil || single.Confidence != "" {
		t.Errorf("single tool: %s, lower %v, confidence %q; want SINGLE_TOOL with bounds and no confidence", single.Verdict, single.ComposedQualityLower, single.Confidence)
	}
	mixed := wfEvaluate(t, Workflow{Tools: tools, Structure: Chain(Tool("a"), Tool("b"))})
	if mixed.Verdict != guards.CompositionDegraded || mixed.ComposedQuality != 0 || mixed.ComposedQualityLower != nil || mixed.Confidence != "" {
		t.Errorf("mixed determinism: %s %v, lower %v, confidence %q; want the seed's DEGRADED 0 without bounds", mixed.Verdict, mixed.ComposedQuality, mixed.ComposedQualityLower, mixed.Confidence)
	}
}

func TestOutwardBounds(t *testing.T) {
	tests := []struct{ lo, hi, q, wantLo, wantHi float64 }{
		{0.123456, 0.765432, 0.5, 0.1234, 0.7655},
		{0.6, 0.7, 0.5, 0.5, 0.7}, // a lower draw above the point is the point
		{0.1, 0.4, 0.5, 0.1, 0.5}, // an upper draw below the point is the point
		{0.5, 0.5, 0.5, 0.5, 0.5}, // no uncertainty: exactly the point
		{0, 0.99999, 0.2, 0, 1},   // clamped to [0, 1]
		{0.20001, 0.3, 0.3, 0.2, 0.3},
	}
	for _, tt := range tests {
		lo, hi := outwardBounds(tt.lo, tt.hi, tt.q)
		if lo != tt.wantLo || hi != tt.wantHi || math.IsNaN(lo) {
			t.Errorf("outwardBounds(%v, %v, %v) = %v, %v; want %v, %v", tt.lo, tt.hi, tt.q, lo, hi, tt.wantLo, tt.wantHi)
		}
	}
}

// selectRank agrees with sorting, duplicates included, and partitions.
func TestSelectRank(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for range 500 {
		a := make([]float64, 1+r.IntN(200))
		for i := range a {
			a[i] = float64(r.IntN(20)) / 19 // many ties
		}
		sorted := slices.Sorted(slices.Values(a))
		k := r.IntN(len(a))
		got := selectRank(a, k)
		if got != sorted[k] {
			t.Fatalf("rank %d of %v: got %v, want %v", k, sorted, got, sorted[k])
		}
		for i := range a {
			if i < k && a[i] > got || i > k && a[i] < got {
				t.Fatalf("not partitioned around rank %d: %v", k, a)
			}
		}
	}
}

// The percentile memo never changes a result: each of these workflows
// differs from the first in one thing the sampling reads, and evaluating
// it after all the others (memo warm) gives the bits of evaluating it
// alone (memo empty). Two that shared a memo key would get each other's
// bounds.
func TestComposedBoundsMemoNeverChangesAResult(t *testing.T) {
	obs := func(calls, successes int64) WorkflowTool {
		return WorkflowTool{Determinism: guards.Deterministic, Observed: wfObserved(calls, successes)}
	}
	capped := obs(100, 90)
	capped.Accuracy = wfPtr(0.88)
	tools := func(a, b WorkflowTool) map[string]WorkflowTool {
		return map[string]WorkflowTool{"a": a, "b": b, "c": obs(50, 45)}
	}
	base := tools(obs(100, 90), wfDeclared(0.95, guards.Deterministic))
	variants := []struct {
		name string
		w    Workflow
	}{
		{"base", wfLenient(Chain(Tool("a"), Tool("b"), Tool("c")), base)},
		{"one more success", wfLenient(Chain(Tool("a"), Tool("b"), Tool("c")), tools(obs(100, 91), wfDeclared(0.95, guards.Deterministic)))},
		{"one more call", wfLenient(Chain(Tool("a"), Tool("b"), Tool("c")), tools(obs(101, 90), wfDeclared(0.95, guards.Deterministic)))},
		{"a declared cap", wfLenient(Chain(Tool("a"), Tool("b"), Tool("c")), tools(capped, wfDeclared(0.95, guards.Deterministic)))},
		{"another declared accuracy", wfLenient(Chain(Tool("a"), Tool("b"), Tool("c")), tools(obs(100, 90), wfDeclared(0.96, guards.Deterministic)))},
		{"parallel any", wfLenient(ParallelAny(Tool("a"), Tool("b"), Tool("c")), base)},
		{"parallel any in another order", wfLenient(ParallelAny(Tool("c"), Tool("a"), Tool("b")), base)},
		{"1 of 3", wfLenient(KOfN(1, Tool("a"), Tool("b"), Tool("c")), base)},
		{"2 of 3", wfLenient(KOfN(2, Tool("a"), Tool("b"), Tool("c")), base)},
		{"nested", wfLenient(Chain(Tool("a"), ParallelAny(Tool("b"), Tool("c"))), base)},
		{"conditional", wfLenient(Conditional(Branch{P: 0.3, Then: Tool("a")}, Branch{P: 0.7, Then: Chain(Tool("b"), Tool("c"))}), base)},
		{"conditional, other odds", wfLenient(Conditional(Branch{P: 0.4, Then: Tool("a")}, Branch{P: 0.6, Then: Chain(Tool("b"), Tool("c"))}), base)},
	}
	bounds := func(w Workflow) []float64 {
		m := wfEvaluate(t, w)
		if m.ComposedQualityLower == nil {
			t.Fatalf("%s: no bounds", w.CompositionID)
		}
		return []float64{*m.ComposedQualityLower, *m.ComposedQualityUpper}
	}
	alone := make([][]float64, len(variants))
	for i, v := range variants {
		percentiles.reset()
		alone[i] = bounds(v.w)
	}
	for i, v := range variants {
		if got := bounds(v.w); !slices.Equal(got, alone[i]) {
			t.Errorf("%s: memo warm gives %v, alone %v", v.name, got, alone[i])
		}
	}
	distinct := map[[2]float64]bool{}
	for _, b := range alone {
		distinct[[2]float64{b[0], b[1]}] = true
	}
	if len(distinct) < len(variants)/2 {
		t.Errorf("only %d distinct bounds among %d variants: the test no longer tells them apart", len(distinct), len(variants))
	}
}
