package workflow

// Measured quality. A tool with observed counts gets its success rate and a
// one-sided 95% Wilson score interval. The composed bounds come from a Monte
// Carlo over the tools' posteriors, on a fixed-seed generator, so the same
// workflow always yields the same bits.
//
// Rules:
//
//   - Per tool: measured = successes/calls; measured_lower and
//     measured_upper are the one-sided 95% Wilson score bounds
//     (z = Φ⁻¹(0.95)). calls = 0 is no measurement.
//   - below_declared: the declared accuracy exceeds measured_upper, i.e. a
//     one-sided score test rejects "the true accuracy is at least the
//     declared one" at the 5% level.
//   - Composed bounds: MonteCarloSamples joint draws. A measured tool's
//     accuracy is drawn from Beta(successes+1, failures+1) (uniform prior);
//     if it also declares an accuracy, the draw is capped at the declared one
//     (a measurement can refute a contract, never inflate it); other tools
//     keep their declared accuracy. Each draw is evaluated through the
//     structure. composed_quality_lower is the 5th percentile (the 1,000th of
//     20,000 draws in ascending order), composed_quality_upper the 95th (the
//     19,000th); they are rounded outwards to 4 decimals (far below the Monte
//     Carlo error, and it keeps the value identical on every architecture
//     although Go's math.Log differs in the last place between some) and
//     clamped so that lower ≤ composed_quality ≤ upper.
//   - Gamma draws use Marsaglia and Tsang's method (shape ≥ 1 here) on
//     math/rand/v2's PCG seeded with monteCarloSeed; draws are taken sample by
//     sample, tools in sorted id order.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// MonteCarloSamples is the number of joint draws behind the composed bounds.
const MonteCarloSamples = 20000

// The generator's fixed seed: "toolsent" and "ry/workf" in ASCII.
const (
	monteCarloSeed1 = 0x746f6f6c73656e74
	monteCarloSeed2 = 0x72792f776f726b66
)

// z95 is Φ⁻¹(0.95), the one-sided 95% normal quantile.
const z95 = 1.6448536269514722

// The ranks (0-based, ascending) of the 5th and 95th percentiles: the
// smallest draw with empirical CDF ≥ 0.05, resp. ≥ 0.95.
const (
	lowerRank = MonteCarloSamples*5/100 - 1
	upperRank = MonteCarloSamples*95/100 - 1
)

// ToolMeasurement is one tool's observed quality beside its contract.
type ToolMeasurement struct {
	ToolID    string `json:"tool_id"`
	Calls     int64  `json:"calls"`
	Successes int64  `json:"successes"`
	// Measured is successes/calls; MeasuredLower and MeasuredUpper are the
	// one-sided 95% Wilson score bounds.
	Measured      float64 `json:"measured"`
	MeasuredLower float64 `json:"measured_lower"`
	MeasuredUpper float64 `json:"measured_upper"`
	// Declared is the contract's accuracy, when there is one.
	Declared *float64 `json:"declared,omitempty"`
	// BelowDeclared flags a declared accuracy above MeasuredUpper: the
	// measurements refute the contract at the 5% level.
	BelowDeclared bool `json:"below_declared"`
}

// measureTool reports a measured tool (t.measured() must hold).
func measureTool(id string, t WorkflowTool) ToolMeasurement {
	s, n := t.Observed.Successes, t.Observed.Calls
	lo, hi := wilsonBounds(s, n)
	m := ToolMeasurement{
		ToolID:        id,
		Calls:         n,
		Successes:     s,
		Measured:      float64(s) / float64(n),
		MeasuredLower: lo,
		MeasuredUpper: hi,
	}
	if t.Accuracy != nil {
		d := *t.Accuracy
		m.Declared = &d
		m.BelowDeclared = d > hi
	}
	return m
}

// wilsonBounds is the one-sided 95% Wilson score interval of s successes in
// n > 0 trials, clamped to [0, 1] and around s/n.
func wilsonBounds(s, n int64) (lower, upper float64) {
	nf := float64(n)
	p := float64(s) / nf
	z2 := z95 * z95
	denom := 1 + z2/nf
	center := p + z2/(2*nf)
	half := float64(z95 * math.Sqrt(float64(p*(1-p))/nf+z2/(4*nf*nf)))
	lower = min(max((center-half)/denom, 0), p)
	upper = max(min((center+half)/denom, 1), p)
	return lower, upper
}

// gammaDraw samples Gamma(shape, 1) for shape ≥ 1 (Marsaglia and Tsang, "A
// simple method for generating gamma variables", 2000).
type gammaDraw struct{ d, c float64 }

func newGammaDraw(shape float64) gammaDraw {
	d := shape - 1.0/3
	return gammaDraw{d: d, c: 1 / math.Sqrt(9*d)}
}

func (g gammaDraw) sample(r *rand.Rand) float64 {
	for {
		x := r.NormFloat64()
		v := 1 + float64(g.c*x)
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		x2 := x * x
		if u < 1-float64(0.0331*float64(x2*x2)) {
			return g.d * v
		}
		if math.Log(u) < float64(0.5*x2)+float64(g.d*(1-v+math.Log(v))) {
			return g.d * v
		}
	}
}

// betaDraw samples a measured tool's accuracy: Beta(s+1, f+1), capped.
type betaDraw struct {
	tool int
	a, b gammaDraw
	cap  float64
}

// composedBounds returns the Monte Carlo 5th and 95th percentiles of the
// composed quality (see the rules above), given the point estimate q
// computed from acc.
func (p *structProgram) composedBounds(w Workflow, acc []float64, q float64) (lower, upper float64) {
	var draws []betaDraw
	for i, id := range p.tools {
		t := w.Tools[id]
		if !t.measured() {
			continue
		}
		d := betaDraw{
			tool: i,
			a:    newGammaDraw(float64(t.Observed.Successes) + 1),
			b:    newGammaDraw(float64(t.Observed.Calls-t.Observed.Successes) + 1),
			cap:  1,
		}
		if t.Accuracy != nil {
			d.cap = *t.Accuracy
		}
		draws = append(draws, d)
	}
	key := p.boundsKey(acc, draws)
	lo, hi, ok := percentiles.get(key)
	if !ok {
		lo, hi = p.samplePercentiles(acc, draws)
		percentiles.put(key, lo, hi)
	}
	return outwardBounds(lo, hi, q)
}

// samplePercentiles draws the MonteCarloSamples joint samples and returns
// their 5th and 95th percentiles.
func (p *structProgram) samplePercentiles(acc []float64, draws []betaDraw) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(monteCarloSeed1, monteCarloSeed2))
	sampled := slices.Clone(acc)
	samples := make([]float64, MonteCarloSamples)
	e := p.newEvaluator()
	for s := range samples {
		for _, d := range draws {
			x, y := d.a.sample(rng), d.b.sample(rng)
			sampled[d.tool] = min(x/(x+y), d.cap)
		}
		samples[s] = p.eval(sampled, -1, e)
	}
	lo = selectRank(samples, lowerRank)
	hi = selectRank(samples[lowerRank+1:], upperRank-lowerRank-1)
	return lo, hi
}

// boundsKey is everything samplePercentiles reads, in bytes: the program
// (its instructions and which tool each leaf calls), the accuracy of every
// tool that is not drawn, and the shapes and cap of every draw. Equal keys
// give equal percentiles, to the bit.
func (p *structProgram) boundsKey(acc []float64, draws []betaDraw) string {
	b := make([]byte, 0, 16*(len(p.ops)+len(p.tools)+len(draws)))
	for _, o := range p.ops {
		b = append(b, byte(o.kind))
		b = binary.AppendVarint(b, int64(o.leaf))
		b = binary.AppendVarint(b, int64(o.n))
		b = binary.AppendVarint(b, int64(o.k))
		b = binary.AppendUvarint(b, uint64(len(o.p)))
		for _, x := range o.p {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	for _, l := range p.leaves {
		b = binary.AppendUvarint(b, uint64(l.tool))
	}
	next := 0
	for i, a := range acc {
		if next < len(draws) && draws[next].tool == i {
			d := draws[next]
			b = append(b, 'd')
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d.a.d))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d.b.d))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d.cap))
			next++
			continue
		}
		b = append(b, 'a')
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a))
	}
	return string(b)
}

// percentiles remembers the percentiles of recent draws. A workflow is
// evaluated again with the same inputs often (its contract or declaration
// repeated, a checkpoint of a tool it uses landing between two others'),
// and one sampling costs about a millisecond.
var percentiles = percentileMemo{m: map[string][2]float64{}}

// percentileMemoSize bounds the memo; past it, the memo starts afresh.
const percentileMemoSize = 4096

type percentileMemo struct {
	mu sync.Mutex
	m  map[string][2]float64
}

func (c *percentileMemo) get(key string) (lo, hi float64, ok bool) {
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	return v[0], v[1], ok
}

func (c *percentileMemo) reset() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

func (c *percentileMemo) put(key string, lo, hi float64) {
	c.mu.Lock()
	if len(c.m) >= percentileMemoSize {
		clear(c.m)
	}
	c.m[key] = [2]float64{lo, hi}
	c.mu.Unlock()
}

// selectRank reorders a so that a[k] is the value of rank k (0-based,
// ascending), everything before it is ≤ and everything after it ≥, and
// returns a[k] (Hoare's selection with a median-of-three pivot; a holds no
// NaN).
func selectRank(a []float64, k int) float64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// outwardBounds rounds a lower bound down and an upper bound up to 4
// decimals and keeps lower ≤ q ≤ upper.
func outwardBounds(lo, hi, q float64) (float64, float64) {
	if lo >= q {
		lo = q
	} else {
		lo = math.Floor(lo*1e4) / 1e4
	}
	if hi <= q {
		hi = q
	} else {
		hi = min(math.Ceil(hi*1e4)/1e4, 1)
	}
	return lo, hi
}
