package workflow

// EvaluateWorkflow: the seed's gates, in the seed's order, over a workflow's
// structure.
//
//  1. One tool call in the structure: SINGLE_TOOL, exactly as the seed.
//  2. policy.require_schema_compatibility and an incompatible edge:
//     SEMANTIC_INCOMPATIBLE, composed quality 0.
//  3. Deterministic and non-deterministic tools mixed without
//     introduction_of_nondeterminism_acceptable: the seed's
//     COMPOSITION_DEGRADED with quality 0 (NondeterminismManifest).
//  4. Composed quality below the requirement: the seed's
//     COMPOSITION_DEGRADED (DegradedManifest).
//  5. Otherwise COMPOSITION_MEETS_QUALITY.
//
// The composed quality is computed from each tool's effective accuracy: the
// declared accuracy when there is one, else the measured success rate.
//
// Directives and digests. SINGLE_TOOL, gate 3 and gate 4 use the seed's
// forms for every structure. For a flat chain of tool ids with no JSON
// Schemas (the seed's domain) gates 2 and 5 use the seed's forms too, so
// such a chain with declared accuracies gives exactly EvaluateComposition's
// manifest. Elsewhere gate 2's directive names the first incompatible edge
// in data-flow order (and how many more there are) and its digest covers
// the listed incompatible edges and their count (incompatibleDigest); all
// digests are Python-reproducible (testdata/workflow/digest.py); gate 5's
// directive is the
// seed's with the number of tool calls, and its digest covers the structure
// (structureMeetsDigest). The Monte Carlo bounds and the failure modes are
// reported beside the verdict and are not part of the digest: the verdict
// does not depend on them.

import (
	"github.com/toolsentry/toolsentry/guards"

	"fmt"
	"strconv"
)

// Confidence says whether a quality verdict survives the measurements'
// uncertainty.
type Confidence string

// The confidences.
const (
	// ConfidenceConfirmed: the verdict is the same at the bound that could
	// reverse it (MEETS at composed_quality_lower, DEGRADED at
	// composed_quality_upper).
	ConfidenceConfirmed Confidence = "CONFIRMED"
	// ConfidenceInconclusive: at that bound the verdict would reverse.
	ConfidenceInconclusive Confidence = "INCONCLUSIVE"
)

// The failure modes a composition introduces or amplifies, named after the
// seed's observations.
const (
	// AccuracyMultiplication: the composed quality is below the worst
	// single tool's accuracy (the seed's accuracy multiplication collapse).
	AccuracyMultiplication = "ACCURACY_MULTIPLICATION"
	// NondeterminismIntroduced: non-deterministic tools in a workflow with
	// deterministic ones (the seed's error mode introduction).
	NondeterminismIntroduced = "NONDETERMINISM_INTRODUCED"
	// SemanticContamination: an output that does not fit the input it
	// feeds (the seed's semantic contamination).
	SemanticContamination = "SEMANTIC_CONTAMINATION"
)

// Stage is one tool call of the structure in a failure mode.
type Stage struct {
	At     string `json:"at"`
	ToolID string `json:"tool_id"`
	// Accuracy is the effective accuracy and Contribution the stage's share
	// of the loss 1 − composed quality (ACCURACY_MULTIPLICATION only): its
	// share is proportional to the quality gained if it alone were perfect.
	Accuracy     *float64 `json:"accuracy,omitempty"`
	Contribution *float64 `json:"contribution,omitempty"`
}

// FailureMode is one entry of the failure-mode manifest.
type FailureMode struct {
	Mode   string `json:"mode"`
	Detail string `json:"detail"`
	// ACCURACY_MULTIPLICATION: Loss is 1 − composed quality, ExcessLoss
	// the worst tool's accuracy − composed quality; Stages carry every
	// stage's contribution. NONDETERMINISM_INTRODUCED: Stages are the
	// non-deterministic calls, Accepted the workflow's acceptance.
	Loss       float64 `json:"loss,omitempty"`
	ExcessLoss float64 `json:"excess_loss,omitempty"`
	Stages     []Stage `json:"stages,omitempty"`
	Accepted   *bool   `json:"accepted,omitempty"`
	// SEMANTIC_CONTAMINATION: the incompatible edge.
	Edge *EdgeIncompatibility `json:"edge,omitempty"`
}

// WorkflowManifest is EvaluateWorkflow's decision: the seed's manifest, the
// composed bounds when tools were measured, and the failure-mode manifest.
type WorkflowManifest struct {
	guards.CompositionManifest
	// ComposedQualityLower and ComposedQualityUpper are the Monte Carlo 5th
	// and 95th percentiles of the composed quality; present when a tool of
	// the structure has observed calls and the verdict is SINGLE_TOOL or
	// decided by quality (gates 4 and 5).
	ComposedQualityLower *float64 `json:"composed_quality_lower,omitempty"`
	ComposedQualityUpper *float64 `json:"composed_quality_upper,omitempty"`
	// Confidence is present with the bounds for a verdict decided by quality.
	Confidence Confidence `json:"confidence,omitempty"`
	// FailureModes introduced or amplified by the composition, whatever the
	// verdict: accuracy multiplication, non-determinism, then the reported
	// incompatible edges (also when the policy does not require
	// compatibility).
	FailureModes []FailureMode `json:"failure_modes"`
	// Incompatibilities are the incompatible edges in data-flow order, at
	// most MaxReportedIncompatibilities; IncompatibleEdges counts them all.
	Incompatibilities []EdgeIncompatibility `json:"incompatibilities,omitempty"`
	IncompatibleEdges int                   `json:"incompatible_edges,omitempty"`
	// Measurements are the used tools with observed calls, by tool id.
	Measurements []ToolMeasurement `json:"measurements,omitempty"`
}

// EvaluateWorkflow validates the workflow (see Validate) and decides it.
// Errors wrap ErrInvalid (including a schema NormalizeSchema rejects, named
// as tools.<id>.input_schema or output_schema, and schemas that need more
// than MaxCompatibilitySteps comparisons) or ErrUnquantified. It is
// deterministic: the same workflow yields the same manifest, bit for bit.
func EvaluateWorkflow(w Workflow) (WorkflowManifest, error) {
	if err := w.Validate(); err != nil {
		return WorkflowManifest{}, err
	}
	p := compileStructure(w.Structure)
	schemas, err := normalizeToolSchemas(w, p)
	if err != nil {
		return WorkflowManifest{}, err
	}
	e := p.newEvaluator()
	acc := make([]float64, len(p.tools))
	used := make([]guards.ToolQuality, len(p.tools))
	var measurements []ToolMeasurement
	for i, id := range p.tools {
		t := w.Tools[id]
		acc[i] = t.effectiveAccuracy()
		used[i] = guards.ToolQuality{ToolID: id, Accuracy: acc[i], Determinism: t.Determinism}
		if t.measured() {
			measurements = append(measurements, measureTool(id, t))
		}
	}
	q := p.eval(acc, -1, e)
	edges, err := incompatibilities(w, p, schemas)
	if err != nil {
		return WorkflowManifest{}, err
	}
	m := WorkflowManifest{
		FailureModes:      failureModes(w, p, acc, q, edges.found, e),
		Incompatibilities: edges.found,
		IncompatibleEdges: edges.total,
		Measurements:      measurements,
	}

	byQuality := false
	switch req := w.WorkflowQualityRequirement; {
	case len(p.leaves) == 1:
		m.CompositionManifest = guards.EvaluateComposition(guards.ToolComposition{
			CompositionID: w.CompositionID,
			Tools:         []guards.ToolQuality{{Accuracy: q}},
		}, w.Policy)
	case w.Policy.RequireSchemaCompatibility && edges.total > 0:
		m.CompositionManifest = incompatibleManifest(w, p, edges)
	case guards.MixesDeterminism(used) && !w.IntroductionOfNondeterminismAcceptable:
		m.CompositionManifest = guards.NondeterminismManifest()
	case q < req:
		m.CompositionManifest = guards.DegradedManifest(q, req)
		byQuality = true
	default:
		m.CompositionManifest = guards.CompositionManifest{
			Verdict:         guards.CompositionMeetsQuality,
			ComposedQuality: q,
			Directive:       "PROCEED: " + strconv.Itoa(len(p.leaves)) + "-tool composition, quality " + guards.PyPercent(q, 2) + ".",
		}
		if ids, ok := flatChain(w, p); ok {
			m.ManifestDigest = guards.MeetsQualityDigest(w.CompositionID, ids, q, req)
		} else {
			m.ManifestDigest = structureMeetsDigest(w, q)
		}
		byQuality = true
	}

	if len(measurements) > 0 && (byQuality || m.Verdict == guards.SingleTool) {
		lo, hi := p.composedBounds(w, acc, q)
		m.ComposedQualityLower, m.ComposedQualityUpper = &lo, &hi
		if byQuality {
			m.Confidence = ConfidenceInconclusive
			if m.Verdict == guards.CompositionMeetsQuality && lo >= w.WorkflowQualityRequirement ||
				m.Verdict == guards.CompositionDegraded && hi < w.WorkflowQualityRequirement {
				m.Confidence = ConfidenceConfirmed
			}
		}
	}
	return m, nil
}

// flatChain reports whether the workflow is in the seed's domain, a chain
// of tool ids whose tools carry no JSON Schema, and returns the ids in
// order.
func flatChain(w Workflow, p *structProgram) ([]string, bool) {
	if w.Structure.Kind != KindChain {
		return nil, false
	}
	ids := make([]string, len(w.Structure.Of))
	for i, c := range w.Structure.Of {
		if c.Kind != KindTool {
			return nil, false
		}
		ids[i] = c.Tool
	}
	for _, id := range p.tools {
		if t := w.Tools[id]; hasSchemaDoc(t.InputSchema) || hasSchemaDoc(t.OutputSchema) {
			return nil, false
		}
	}
	return ids, true
}

// incompatibleManifest is gate 2's HALT for the first incompatible edge.
func incompatibleManifest(w Workflow, p *structProgram, edges edgeReport) guards.CompositionManifest {
	first := edges.found[0]
	m := guards.CompositionManifest{Verdict: guards.SemanticIncompatible}
	if _, ok := flatChain(w, p); ok {
		m.Directive = "HALT: " + first.describe() + "."
		m.ManifestDigest = guards.SHA256Hex("SCHEMA:" + strconv.Itoa(edges.firstEdge))
		return m
	}
	m.Directive = "HALT: " + first.describe()
	switch more := edges.total - 1; more {
	case 0:
		m.Directive += "."
	case 1:
		m.Directive += " (and 1 more incompatible edge)."
	default:
		m.Directive += fmt.Sprintf(" (and %d more incompatible edges).", more)
	}
	m.ManifestDigest = incompatibleDigest(w, edges)
	return m
}

// failureModes is the failure-mode manifest, independent of the verdict.
func failureModes(w Workflow, p *structProgram, acc []float64, q float64, found []EdgeIncompatibility, e *structEvaluator) []FailureMode {
	modes := []FailureMode{}
	if len(p.leaves) > 1 {
		worst := 1.0
		for _, l := range p.leaves {
			worst = min(worst, acc[l.tool])
		}
		if worst-q > ProbabilityTolerance {
			shares := p.contributions(acc, q, e)
			stages := make([]Stage, len(p.leaves))
			for i, l := range p.leaves {
				a, c := acc[l.tool], shares[i]
				stages[i] = Stage{At: l.path, ToolID: p.tools[l.tool], Accuracy: &a, Contribution: &c}
			}
			modes = append(modes, FailureMode{
				Mode: AccuracyMultiplication,
				Detail: fmt.Sprintf("composed quality %s is below the worst tool's %s: %d tool calls compound their errors",
					guards.PyPercent(q, 2), guards.PyPercent(worst, 2), len(p.leaves)),
				Loss:       1 - q,
				ExcessLoss: worst - q,
				Stages:     stages,
			})
		}
	}

	var det bool
	var nondet []Stage
	for _, l := range p.leaves {
		id := p.tools[l.tool]
		if w.Tools[id].Determinism == guards.NonDeterministic {
			nondet = append(nondet, Stage{At: l.path, ToolID: id})
		} else {
			det = true
		}
	}
	if det && len(nondet) > 0 {
		accepted := w.IntroductionOfNondeterminismAcceptable
		detail := "non-deterministic " + nondet[0].ToolID + " at " + nondet[0].At
		if len(nondet) > 1 {
			detail += fmt.Sprintf(" (and %d more calls)", len(nondet)-1)
		}
		detail += " in a workflow with deterministic tools; "
		if accepted {
			detail += "accepted"
		} else {
			detail += "not accepted"
		}
		modes = append(modes, FailureMode{Mode: NondeterminismIntroduced, Detail: detail, Stages: nondet, Accepted: &accepted})
	}

	for i := range found {
		modes = append(modes, FailureMode{Mode: SemanticContamination, Detail: found[i].describe(), Edge: &found[i]})
	}
	return modes
}
