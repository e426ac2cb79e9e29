package workflow

// Observed workflows (issue 9): the tool calls of one agent invocation, as
// a trace shows them, run end to end; their success rate, measured over
// many runs, is set against the quality the workflow's structure predicts
// from each tool's own success rate.
//
// Rules:
//
//   - Predicted quality: the structure evaluated (as EvaluateWorkflow
//     composes it: chains multiply, parallel blocks and votes combine)
//     with each tool's measured success rate, or its declared accuracy
//     when it has no observed calls. The product rule holds when the
//     tools fail independently.
//   - Observed quality: successes/runs of the whole workflow, with the
//     one-sided 95% Wilson score bounds of the tools' measurements
//     (together a two-sided 90% interval).
//   - Correlated errors: the predicted quality lies outside that interval.
//     Independent failures would put it inside nine times out of ten; a
//     prediction outside means the tools' failures go together (one bad
//     input failing several stages, or an upstream error that a later stage
//     turns into its own failure), so per-tool accuracy no longer tells
//     the workflow's quality.
//   - Verdict (ApplyObserved): a verdict that proceeds (SINGLE_TOOL or
//     COMPOSITION_MEETS_QUALITY) becomes COMPOSITION_DEGRADED when errors
//     are correlated and the observed quality is below the workflow's
//     requirement; every other verdict stands, with the comparison beside
//     it.

import (
	"github.com/toolsentry/toolsentry/guards"

	"fmt"
	"strconv"
)

// ObservedQuality compares a workflow's predicted quality with the
// end-to-end success observed in traces.
type ObservedQuality struct {
	Runs      int64 `json:"runs"`
	Successes int64 `json:"successes"`
	// SuccessRate is Successes/Runs; SuccessRateLower and SuccessRateUpper
	// are its one-sided 95% Wilson score bounds.
	SuccessRate      float64 `json:"success_rate"`
	SuccessRateLower float64 `json:"success_rate_lower"`
	SuccessRateUpper float64 `json:"success_rate_upper"`
	// PredictedQuality is PredictedQuality of the workflow.
	PredictedQuality float64 `json:"predicted_quality"`
	// CorrelatedErrors: PredictedQuality lies outside
	// [SuccessRateLower, SuccessRateUpper].
	CorrelatedErrors bool `json:"correlated_errors"`
}

// PredictedQuality is the quality the workflow's structure predicts from
// its tools' measured success rates (the declared accuracy for a tool
// without observed calls), assuming independent failures. Errors wrap
// ErrInvalid or ErrUnquantified, as Validate's.
func PredictedQuality(w Workflow) (float64, error) {
	if err := w.Validate(); err != nil {
		return 0, err
	}
	p := compileStructure(w.Structure)
	acc := make([]float64, len(p.tools))
	for i, id := range p.tools {
		t := w.Tools[id]
		if t.measured() {
			acc[i] = float64(t.Observed.Successes) / float64(t.Observed.Calls)
		} else {
			acc[i] = t.effectiveAccuracy() // Validate made sure there is one
		}
	}
	return p.eval(acc, -1, p.newEvaluator()), nil
}

// CompareObserved compares a predicted quality with successes out of runs
// observed end to end. Errors wrap ErrInvalid: runs must be positive,
// successes within [0, runs], predicted within [0, 1].
func CompareObserved(predicted float64, runs, successes int64) (ObservedQuality, error) {
	if runs <= 0 || successes < 0 || successes > runs {
		return ObservedQuality{}, fmt.Errorf("%w: %d successes of %d runs", guards.ErrInvalid, successes, runs)
	}
	if err := guards.CheckUnit("predicted quality", predicted); err != nil {
		return ObservedQuality{}, err
	}
	lo, hi := wilsonBounds(successes, runs)
	return ObservedQuality{
		Runs:             runs,
		Successes:        successes,
		SuccessRate:      float64(successes) / float64(runs),
		SuccessRateLower: lo,
		SuccessRateUpper: hi,
		PredictedQuality: predicted,
		CorrelatedErrors: predicted < lo || predicted > hi,
	}, nil
}

// ApplyObserved returns the workflow's manifest m with the observed
// comparison o taken into account. When errors are correlated and the
// observed quality is below the requirement, a verdict that would let the
// workflow proceed becomes the seed's COMPOSITION_DEGRADED: the seed's
// decision boundary asks whether the composition's quality meets the
// requirement, and holds a quality "verified as a unit" above a computed
// one; the observed runs are that unit, and they say it does not.
// SEMANTIC_INCOMPATIBLE would claim a format mismatch the runs do not show,
// and SINGLE_TOOL is no decision about quality. Its composed quality is the
// observed success rate; its confidence CONFIRMED when even the rate's upper
// bound is below the requirement. Every other verdict is returned
// unchanged: a HALT stays a HALT, and a gap that does not cross the
// requirement is reported by o alone.
func ApplyObserved(m WorkflowManifest, w Workflow, o ObservedQuality) WorkflowManifest {
	req := w.WorkflowQualityRequirement
	proceeds := m.Verdict == guards.CompositionMeetsQuality || m.Verdict == guards.SingleTool
	if !proceeds || !o.CorrelatedErrors || o.SuccessRate >= req {
		return m
	}
	out := m
	out.CompositionManifest = guards.CompositionManifest{
		Verdict:         guards.CompositionDegraded,
		ComposedQuality: o.SuccessRate,
		Directive: "HALT: Observed quality " + guards.PyPercent(o.SuccessRate, 2) + " < requirement " + guards.PyPercent(req, 2) +
			" over " + strconv.FormatInt(o.Runs, 10) + " runs; errors are correlated: per-tool accuracy predicts " +
			guards.PyPercent(o.PredictedQuality, 2) + ", outside the observed " + guards.PyPercent(o.SuccessRateLower, 2) +
			" to " + guards.PyPercent(o.SuccessRateUpper, 2) + ".",
		ManifestDigest: guards.SHA256Hex(guards.PyJSONDumps(guards.PyObject{
			"composition": w.CompositionID,
			"observed":    guards.PyFixed(o.SuccessRate, 3),
			"predicted":   guards.PyFixed(o.PredictedQuality, 3),
			"requirement": guards.PyFixed(req, 3),
			"runs":        strconv.FormatInt(o.Runs, 10),
		})),
	}
	out.ComposedQualityLower, out.ComposedQualityUpper = nil, nil
	out.Confidence = ConfidenceInconclusive
	if o.SuccessRateUpper < req {
		out.Confidence = ConfidenceConfirmed
	}
	return out
}
