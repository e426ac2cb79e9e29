package workflow

import (
	"github.com/toolsentry/toolsentry/guards"

	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var wfRandomToolIDs = []string{"a", "b", "c", "naïve.résumé", `q"uote`, "tab\tid", "𝄞", `back\slash`}

// wfRandomAccuracy is often a boundary, else uniform.
func wfRandomAccuracy(r *rand.Rand) float64 {
	switch r.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return 0.95
	}
	return r.Float64()
}

func wfRandomTools(r *rand.Rand, observed bool) map[string]WorkflowTool {
	hashes := []string{"h", "g"}
	tools := map[string]WorkflowTool{}
	for _, id := range wfRandomToolIDs {
		t := WorkflowTool{
			Determinism:             []string{guards.Deterministic, guards.NonDeterministic}[r.IntN(2)],
			OutputSchemaHash:        hashes[r.IntN(2)],
			ExpectedInputSchemaHash: hashes[r.IntN(2)],
		}
		if !observed || r.IntN(2) == 0 {
			t.Accuracy = wfPtr(wfRandomAccuracy(r))
		}
		if observed && (t.Accuracy == nil || r.IntN(2) == 0) {
			calls := int64(1 + r.IntN(500))
			t.Observed = &Observed{Calls: calls, Successes: calls - r.Int64N(calls/5+1)}
		}
		tools[id] = t
	}
	return tools
}

// wfRandomNode is a valid structure over wfRandomToolIDs, at most 4 deep.
func wfRandomNode(r *rand.Rand, depth int) Node {
	if depth >= 4 || r.IntN(3) == 0 {
		return Tool(wfRandomToolIDs[r.IntN(len(wfRandomToolIDs))])
	}
	of := make([]Node, 1+r.IntN(4))
	for i := range of {
		of[i] = wfRandomNode(r, depth+1)
	}
	switch r.IntN(5) {
	case 0:
		return Chain(of...)
	case 1:
		return ParallelAll(of...)
	case 2:
		return ParallelAny(of...)
	case 3:
		return KOfN(1+r.IntN(len(of)), of...)
	}
	weights := make([]float64, len(of))
	total := 0.0
	for i := range weights {
		switch r.IntN(6) {
		case 0:
			weights[i] = 1e-7 // a probability written in exponent form
		case 1:
			weights[i] = 0
		default:
			weights[i] = r.Float64()
		}
		total += weights[i]
	}
	branches := make([]Branch, len(of))
	for i := range of {
		p := 1 / float64(len(of))
		if total > 0 {
			p = weights[i] / total
		}
		branches[i] = Branch{P: p, Then: of[i]}
	}
	return Conditional(branches...)
}

func wfRandomWorkflow(r *rand.Rand, observed bool) Workflow {
	return Workflow{
		CompositionID:                          fmt.Sprintf("wf-%d", r.IntN(1000)),
		WorkflowQualityRequirement:             []float64{0, 0.5, 0.9, r.Float64()}[r.IntN(4)],
		IntroductionOfNondeterminismAcceptable: r.IntN(2) == 0,
		Policy:                                 guards.CompositionPolicy{RequireSchemaCompatibility: r.IntN(2) == 0},
		Tools:                                  wfRandomTools(r, observed),
		Structure:                              wfRandomNode(r, 1),
	}
}

// wfPointQuality is the structure's composed quality with every gate open.
func wfPointQuality(t *testing.T, structure Node, tools map[string]WorkflowTool) float64 {
	t.Helper()
	m := wfEvaluate(t, wfLenient(structure, tools))
	if m.Verdict != guards.CompositionMeetsQuality && m.Verdict != guards.SingleTool {
		t.Fatalf("verdict %s with every gate open", m.Verdict)
	}
	return m.ComposedQuality
}

// wfChainNodes returns pointers to every chain node of n.
func wfChainNodes(n *Node, into []*Node) []*Node {
	if n.Kind == KindChain {
		into = append(into, n)
	}
	for i := range n.Of {
		into = wfChainNodes(&n.Of[i], into)
	}
	return into
}

func wfCloneNode(n Node) Node {
	c := n
	c.Of = make([]Node, len(n.Of))
	for i, o := range n.Of {
		c.Of[i] = wfCloneNode(o)
	}
	c.P = append([]float64(nil), n.P...)
	return c
}

// A stage added to any chain of the structure, at any position, never raises
// the composed quality (every combinator is monotone in its branches).
func TestWorkflowPropertyAddedStageNeverRaisesQuality(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		tools := wfRandomTools(r, false)
		s := wfRandomNode(r, 1)
		before := wfPointQuality(t, s, tools)
		grown := wfCloneNode(s)
		stage := Tool(wfRandomToolIDs[r.IntN(len(wfRandomToolIDs))])
		if chains := wfChainNodes(&grown, nil); len(chains) > 0 {
			c := chains[r.IntN(len(chains))]
			at := r.IntN(len(c.Of) + 1)
			c.Of = append(c.Of[:at], append([]Node{stage}, c.Of[at:]...)...)
		} else {
			grown = Chain(grown, stage)
		}
		if after := wfPointQuality(t, grown, tools); after > before {
			t.Fatalf("adding %q raised quality %v -> %v\nbefore %s\nafter  %s", stage.Tool, before, after, wfJSON(t, s), wfJSON(t, grown))
		}
	}
}

// Parallel any is at least as good as its best branch; k_of_n with k = 1 is
// parallel any and with k = n parallel all.
func TestWorkflowPropertyParallelAndVoting(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		tools := wfRandomTools(r, false)
		branches := make([]Node, 1+r.IntN(5))
		best := 0.0
		for i := range branches {
			branches[i] = wfRandomNode(r, 2)
			best = max(best, wfPointQuality(t, branches[i], tools))
		}
		anyQ := wfPointQuality(t, ParallelAny(branches...), tools)
		if anyQ < best {
			t.Fatalf("parallel any %v below its best branch %v: %s", anyQ, best, wfJSON(t, ParallelAny(branches...)))
		}
		allQ := wfPointQuality(t, ParallelAll(branches...), tools)
		if got := wfPointQuality(t, KOfN(1, branches...), tools); got != anyQ {
			t.Fatalf("1 of n %v != parallel any %v", got, anyQ)
		}
		if got := wfPointQuality(t, KOfN(len(branches), branches...), tools); got != allQ {
			t.Fatalf("n of n %v != parallel all %v", got, allQ)
		}
	}
}

// wfBruteTail enumerates every outcome of the independent trials.
func wfBruteTail(k int, rs []float64) float64 {
	total := 0.0
	for mask := 0; mask < 1<<len(rs); mask++ {
		p, successes := 1.0, 0
		for i, r := range rs {
			if mask&(1<<i) != 0 {
				p *= r
				successes++
			} else {
				p *= 1 - r
			}
		}
		if successes >= k {
			total += p
		}
	}
	return total
}

// The Poisson-binomial dynamic programme equals enumeration for every k,
// and the closed forms at k = 1 and k = n.
func TestPoissonBinomialTail(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		rs := make([]float64, 1+r.IntN(10))
		for i := range rs {
			rs[i] = wfRandomAccuracy(r)
		}
		dp := make([]float64, len(rs)+1)
		for k := 0; k <= len(rs); k++ {
			if diff := cmp.Diff(wfBruteTail(k, rs), poissonBinomialTail(k, rs, dp), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Fatalf("k=%d rs=%v (-enumeration +dp):\n%s", k, rs, diff)
			}
		}
		miss := 1.0
		for _, x := range rs {
			miss *= 1 - x
		}
		if diff := cmp.Diff(1-miss, poissonBinomialTail(1, rs, dp), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Fatalf("k=1 rs=%v (-any +dp):\n%s", rs, diff)
		}
		if diff := cmp.Diff(allSucceed(rs), poissonBinomialTail(len(rs), rs, dp), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
			t.Fatalf("k=n rs=%v (-all +dp):\n%s", rs, diff)
		}
	}
}

// Contributions are non-negative and sum to the loss; the accuracy
// multiplication mode appears exactly when the composition is worse than
// its worst tool.
func TestWorkflowPropertyLossContributions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	seen := 0
	for range 500 {
		w := wfLenient(wfRandomNode(r, 1), wfRandomTools(r, false))
		m := wfEvaluate(t, w)
		worst := 1.0
		walkLeaves(w.Structure, "", func(n Node, _ string) { worst = min(worst, *w.Tools[n.Tool].Accuracy) })
		var mode *FailureMode
		for i := range m.FailureModes {
			if m.FailureModes[i].Mode == AccuracyMultiplication {
				mode = &m.FailureModes[i]
			}
		}
		if (mode != nil) != (worst-m.ComposedQuality > ProbabilityTolerance) {
			t.Fatalf("mode present %v, worst tool %v, composed %v: %s", mode != nil, worst, m.ComposedQuality, wfJSON(t, w.Structure))
		}
		if mode == nil {
			continue
		}
		seen++
		sum := 0.0
		for _, s := range mode.Stages {
			if *s.Contribution < 0 {
				t.Fatalf("negative contribution %v at %s", *s.Contribution, s.At)
			}
			sum += *s.Contribution
		}
		if diff := cmp.Diff(1-m.ComposedQuality, sum, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
			t.Fatalf("contributions do not sum to the loss (-loss +sum):\n%s", diff)
		}
	}
	if seen < 50 {
		t.Fatalf("only %d workflows showed accuracy multiplication", seen)
	}
}

// The composed lower bound never exceeds the point estimate, nor the point
// estimate the upper bound; the evaluation is deterministic.
func TestWorkflowPropertyBoundsAroundPoint(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	bounded := 0
	for range 30 {
		w := wfRandomWorkflow(r, true)
		w.Policy.RequireSchemaCompatibility = false
		w.IntroductionOfNondeterminismAcceptable = true
		m := wfEvaluate(t, w)
		measured := false
		walkLeaves(w.Structure, "", func(n Node, _ string) { measured = measured || w.Tools[n.Tool].Observed != nil })
		if (m.ComposedQualityLower != nil) != measured || (m.ComposedQualityUpper != nil) != measured {
			t.Fatalf("bounds %v, %v; a used tool observed: %v: %s", m.ComposedQualityLower, m.ComposedQualityUpper, measured, wfJSON(t, w))
		}
		if !measured {
			continue
		}
		bounded++
		lo, q, hi := *m.ComposedQualityLower, m.ComposedQuality, *m.ComposedQualityUpper
		if !(0 <= lo && lo <= q && q <= hi && hi <= 1) {
			t.Fatalf("bounds %v <= %v <= %v violated: %s", lo, q, hi, wfJSON(t, w))
		}
		again := wfEvaluate(t, w)
		if diff := cmp.Diff(m, again); diff != "" {
			t.Fatalf("not deterministic (-first +second):\n%s", diff)
		}
	}
	if bounded < 15 {
		t.Fatalf("only %d workflows had bounds", bounded)
	}
}

// Marshalling a workflow and parsing it back gives the same workflow.
func TestWorkflowJSONRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 300 {
		w := wfRandomWorkflow(r, r.IntN(2) == 0)
		raw := wfJSON(t, w)
		got, err := ParseWorkflow([]byte(raw))
		if err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	}
}

func wfJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func FuzzParseWorkflow(f *testing.F) {
	for _, c := range readWorkflowCases(f) {
		f.Add([]byte(c))
	}
	r := rand.New(rand.NewPCG(13, 14))
	for range 20 {
		f.Add([]byte(wfJSON(f, wfRandomWorkflow(r, false))))
	}
	for _, s := range []string{wfNest(65), `{"chain": []}`, `{"k_of_n": {"k": 0, "of": ["a"]}}`, `{"conditional": [{"p": 0.5, "then": "a"}]}`} {
		f.Add([]byte(wfJSONLine(wfToolsAB, s)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ParseWorkflow(data)
		if err != nil {
			if !errors.Is(err, guards.ErrInvalid) && !errors.Is(err, ErrUnquantified) {
				t.Fatalf("error %v wraps neither ErrInvalid nor ErrUnquantified", err)
			}
			return
		}
		raw, err := json.Marshal(w)
		if err != nil {
			t.Fatalf("a parsed workflow does not marshal: %v", err)
		}
		again, err := ParseWorkflow(raw)
		if err != nil {
			t.Fatalf("a marshalled workflow does not parse: %v\n%s", err, raw)
		}
		if raw2, _ := json.Marshal(again); string(raw2) != string(raw) {
			t.Fatalf("round trip changed the workflow:\n%s\n%s", raw, raw2)
		}
		m, err := EvaluateWorkflow(w)
		if err != nil {
			if !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("evaluation error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if math.IsNaN(m.ComposedQuality) || m.ComposedQuality < 0 || m.ComposedQuality > 1 {
			t.Fatalf("composed quality %v", m.ComposedQuality)
		}
		if m.ComposedQualityLower != nil && *m.ComposedQualityLower > m.ComposedQuality {
			t.Fatalf("lower bound %v above quality %v", *m.ComposedQualityLower, m.ComposedQuality)
		}
	})
}
