package workflow

// Composed quality. A validated structure is compiled once into a postfix
// program over the used tools; the program is evaluated with the tools'
// effective accuracies (the point estimate), with one stage made perfect (a
// stage's contribution to the loss), and MonteCarloSamples times with
// sampled accuracies (the lower bound).
//
// Every node's reliability is a function of its children's R:
//
//	chain, parallel all  ∏ R                    (in order, as the seed multiplies)
//	parallel any         1 − ∏ (1 − R)          (never below the best branch)
//	k_of_n               P(at least k successes), the Poisson-binomial tail
//	conditional          Σ p·R, clamped to [0, 1]
//
// Branches fail independently, as the seed's product assumes. A node with a
// single child has the child's R exactly. Products that Go may fuse into an
// FMA on some architectures are rounded explicitly (float64(a*b)), so the
// point estimate is the same bits everywhere.

import "sort"

// structOp is one instruction of a compiled structure.
type structOp struct {
	kind NodeKind
	leaf int // KindTool: index into program.leaves
	n    int // combinators: number of children on the stack
	k    int
	p    []float64
}

// leafInfo is one tool call of the structure, in structure order.
type leafInfo struct {
	path string
	tool int // index into program.tools
}

type structProgram struct {
	ops    []structOp
	leaves []leafInfo
	tools  []string // the used tool ids, sorted
	maxN   int      // the widest node, for the evaluator's scratch space
}

// compileStructure turns a validated structure into a structProgram.
func compileStructure(root Node) *structProgram {
	p := &structProgram{}
	index := map[string]int{}
	walkLeaves(root, "structure", func(n Node, _ string) {
		if _, ok := index[n.Tool]; !ok {
			index[n.Tool] = 0
			p.tools = append(p.tools, n.Tool)
		}
	})
	sort.Strings(p.tools)
	for i, id := range p.tools {
		index[id] = i
	}
	p.emit(root, "structure", index)
	return p
}

func (p *structProgram) emit(n Node, path string, index map[string]int) {
	if n.Kind == KindTool {
		p.ops = append(p.ops, structOp{kind: KindTool, leaf: len(p.leaves)})
		p.leaves = append(p.leaves, leafInfo{path: path, tool: index[n.Tool]})
		return
	}
	for i, c := range n.Of {
		p.emit(c, childPath(path, n, i), index)
	}
	p.ops = append(p.ops, structOp{kind: n.Kind, n: len(n.Of), k: n.K, p: n.P})
	p.maxN = max(p.maxN, len(n.Of))
}

// structEvaluator holds scratch space; one per goroutine.
type structEvaluator struct {
	stack []float64
	dp    []float64
}

func (p *structProgram) newEvaluator() *structEvaluator {
	return &structEvaluator{stack: make([]float64, 0, len(p.ops)), dp: make([]float64, p.maxN+1)}
}

// eval computes the structure's reliability with acc[i] the accuracy of
// p.tools[i]; the leaf with index perfect (if any, else -1) counts as 1.
func (p *structProgram) eval(acc []float64, perfect int, e *structEvaluator) float64 {
	st := e.stack[:0]
	for _, o := range p.ops {
		if o.kind == KindTool {
			r := acc[p.leaves[o.leaf].tool]
			if o.leaf == perfect {
				r = 1
			}
			st = append(st, r)
			continue
		}
		rs := st[len(st)-o.n:]
		var r float64
		switch o.kind {
		case KindChain, KindParallelAll:
			r = allSucceed(rs)
		case KindParallelAny:
			r = anySucceeds(rs)
		case KindKOfN:
			r = atLeastK(o.k, rs, e.dp)
		case KindConditional:
			r = conditionalOf(o.p, rs)
		}
		st = append(st[:len(st)-o.n], r)
	}
	e.stack = st
	return st[0]
}

// allSucceed is the product of rs in order (chain and parallel all).
func allSucceed(rs []float64) float64 {
	q := 1.0
	for _, r := range rs {
		q *= r
	}
	return q
}

// anySucceeds is 1 − ∏(1 − r): at least one branch succeeds. It is never below
// the best branch, also after rounding.
func anySucceeds(rs []float64) float64 {
	if len(rs) == 1 {
		return rs[0]
	}
	miss, best := 1.0, 0.0
	for _, r := range rs {
		miss *= 1 - r
		best = max(best, r)
	}
	return max(1-miss, best)
}

// atLeastK is the probability that at least k of the independent branches with
// success probabilities rs succeed: the upper tail of the Poisson-binomial
// distribution. k = 1 is anySucceeds and k = n is allSucceed; between, an exact
// dynamic programme over the number of successes (dp has len(rs)+1 slots).
func atLeastK(k int, rs []float64, dp []float64) float64 {
	n := len(rs)
	switch k {
	case 1:
		return anySucceeds(rs)
	case n:
		return allSucceed(rs)
	}
	return poissonBinomialTail(k, rs, dp)
}

// poissonBinomialTail is P(X ≥ k) for X the number of successes among
// independent trials with probabilities rs, for any 0 ≤ k ≤ len(rs). It sums
// the shorter side of the distribution.
func poissonBinomialTail(k int, rs []float64, dp []float64) float64 {
	n := len(rs)
	dp = dp[:n+1]
	clear(dp)
	dp[0] = 1
	for i, r := range rs {
		for j := i + 1; j >= 1; j-- {
			dp[j] = float64(dp[j]*(1-r)) + float64(dp[j-1]*r)
		}
		dp[0] *= 1 - r
	}
	var t float64
	if k <= n-k+1 {
		below := 0.0
		for j := 0; j < k; j++ {
			below += dp[j]
		}
		t = 1 - below
	} else {
		for j := k; j <= n; j++ {
			t += dp[j]
		}
	}
	return min(max(t, 0), 1)
}

// conditionalOf is Σ p·r over the branches, clamped to [0, 1] (the
// probabilities may sum to 1 ± ProbabilityTolerance).
func conditionalOf(ps, rs []float64) float64 {
	if len(rs) == 1 && ps[0] == 1 {
		return rs[0]
	}
	q := 0.0
	for i, r := range rs {
		q += float64(ps[i] * r)
	}
	return min(max(q, 0), 1)
}

// contributions splits the loss 1 − q over the leaves: leaf i's share is
// proportional to the quality gained if that stage alone were perfect,
// g_i = q(r_i = 1) − q. For a chain g_i = q(1 − r_i)/r_i. When no single
// stage would gain anything (several stages at 0), the loss is split evenly
// over the imperfect stages. The shares sum to 1 − q.
func (p *structProgram) contributions(acc []float64, q float64, e *structEvaluator) []float64 {
	out := make([]float64, len(p.leaves))
	loss := 1 - q
	if loss <= 0 {
		return out
	}
	total := 0.0
	for i := range p.leaves {
		out[i] = max(p.eval(acc, i, e)-q, 0)
		total += out[i]
	}
	if total == 0 {
		imperfect := 0
		for i, l := range p.leaves {
			if acc[l.tool] < 1 {
				out[i] = 1
				imperfect++
			}
		}
		if imperfect == 0 { // the loss is the probabilities' rounding
			return make([]float64, len(p.leaves))
		}
		total = float64(imperfect)
	}
	for i := range out {
		out[i] = loss * out[i] / total
	}
	return out
}
