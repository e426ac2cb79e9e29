package guards

import (
	"fmt"
	"math"
	"strconv"
)

// CompositionVerdict is the seed's CompositionVerdict enum, by name.
type CompositionVerdict string

// The composition verdicts, named as in seed 000_918c771bac28ae93.
const (
	SingleTool              CompositionVerdict = "SINGLE_TOOL"
	CompositionMeetsQuality CompositionVerdict = "COMPOSITION_MEETS_QUALITY"
	CompositionDegraded     CompositionVerdict = "COMPOSITION_DEGRADED"
	SemanticIncompatible    CompositionVerdict = "SEMANTIC_INCOMPATIBLE"
)

// Determinism names, as the seed spells them.
const (
	Deterministic    = "DETERMINISTIC"
	NonDeterministic = "NON_DETERMINISTIC"
)

// ToolQuality is one composed tool's quality contract (the seed's
// per_tool_quality_contract_receipt).
type ToolQuality struct {
	ToolID                  string  `json:"tool_id"`
	Accuracy                float64 `json:"accuracy"`
	Determinism             string  `json:"determinism"`
	OutputSchemaHash        string  `json:"output_schema_hash"`
	ExpectedInputSchemaHash string  `json:"expected_input_schema_hash"`
}

// ToolComposition is a chain of tools with the workflow's requirement.
type ToolComposition struct {
	CompositionID                          string        `json:"composition_id"`
	Tools                                  []ToolQuality `json:"tools"`
	WorkflowQualityRequirement             float64       `json:"workflow_quality_requirement"`
	IntroductionOfNondeterminismAcceptable bool          `json:"introduction_of_nondeterminism_acceptable"`
}

// CompositionPolicy says which checks the guard enforces.
type CompositionPolicy struct {
	RequireSchemaCompatibility bool `json:"require_schema_compatibility"`
}

// CompositionManifest is the guard's decision.
type CompositionManifest struct {
	Verdict         CompositionVerdict `json:"verdict"`
	ComposedQuality float64            `json:"composed_quality"`
	Directive       string             `json:"directive"`
	ManifestDigest  string             `json:"manifest_digest"`
}

// Validate reports the first value the seed would accept silently but that
// has no meaning: an accuracy or requirement outside [0, 1] or not finite,
// or a determinism other than the two names.
func (c ToolComposition) Validate() error {
	if err := CheckUnit("workflow_quality_requirement", c.WorkflowQualityRequirement); err != nil {
		return err
	}
	for i, t := range c.Tools {
		if err := t.validate(); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
	}
	return nil
}

func (t ToolQuality) validate() error {
	if err := CheckUnit("accuracy", t.Accuracy); err != nil {
		return err
	}
	return CheckDeterminism(t.Determinism)
}

// CheckDeterminism accepts exactly the seed's two determinism names.
func CheckDeterminism(d string) error {
	if d != Deterministic && d != NonDeterministic {
		return fmt.Errorf("%w: determinism %s, want %q or %q", ErrInvalid, strconv.Quote(d), Deterministic, NonDeterministic)
	}
	return nil
}

// CheckUnit returns an ErrInvalid naming name unless v is a number in
// [0, 1] (an accuracy, a rate, a requirement).
func CheckUnit(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1 {
		return fmt.Errorf("%w: %s %v is not a number in [0, 1]", ErrInvalid, name, v)
	}
	return nil
}

// EvaluateComposition is the seed's ToolCompositionSkillGuard.evaluate_composition,
// gate for gate. It does not validate; call Validate first on untrusted input.
func EvaluateComposition(comp ToolComposition, policy CompositionPolicy) CompositionManifest {
	// Gate 1: single tool.
	if len(comp.Tools) <= 1 {
		q := 1.0
		if len(comp.Tools) == 1 {
			q = comp.Tools[0].Accuracy
		}
		return CompositionManifest{
			Verdict:         SingleTool,
			ComposedQuality: q,
			Directive:       "PROCEED: Single tool workflow, quality " + PyFixed(q, 2) + ".",
			ManifestDigest: SHA256Hex(PyJSONDumps(PyObject{
				"composition": comp.CompositionID,
				"tools":       strconv.Itoa(len(comp.Tools)),
				"quality":     PyFixed(q, 3),
			})),
		}
	}

	// Gate 2: schema compatibility between neighbours.
	if policy.RequireSchemaCompatibility {
		for i := 0; i < len(comp.Tools)-1; i++ {
			up, down := comp.Tools[i], comp.Tools[i+1]
			if up.OutputSchemaHash != down.ExpectedInputSchemaHash {
				return CompositionManifest{
					Verdict:         SemanticIncompatible,
					ComposedQuality: 0,
					Directive:       "HALT: " + up.ToolID + " output schema != " + down.ToolID + " input schema.",
					ManifestDigest:  SHA256Hex("SCHEMA:" + strconv.Itoa(i)),
				}
			}
		}
	}

	// Gate 3: non-determinism introduced into a deterministic workflow.
	if MixesDeterminism(comp.Tools) && !comp.IntroductionOfNondeterminismAcceptable {
		return NondeterminismManifest()
	}

	// Gate 4: chained quality is the product of accuracies, in order.
	q := 1.0
	for _, t := range comp.Tools {
		q *= t.Accuracy
	}
	if q < comp.WorkflowQualityRequirement {
		return DegradedManifest(q, comp.WorkflowQualityRequirement)
	}

	// Gate 5: meets quality.
	ids := make([]string, len(comp.Tools))
	for i, t := range comp.Tools {
		ids[i] = t.ToolID
	}
	return CompositionManifest{
		Verdict:         CompositionMeetsQuality,
		ComposedQuality: q,
		Directive:       "PROCEED: " + strconv.Itoa(len(comp.Tools)) + "-tool composition, quality " + PyPercent(q, 2) + ".",
		ManifestDigest:  MeetsQualityDigest(comp.CompositionID, ids, q, comp.WorkflowQualityRequirement),
	}
}

// MixesDeterminism reports whether the tools include both a deterministic
// and a non-deterministic one (the seed's gate 3 condition).
func MixesDeterminism(tools []ToolQuality) bool {
	var det, nondet bool
	for _, t := range tools {
		det = det || t.Determinism == Deterministic
		nondet = nondet || t.Determinism == NonDeterministic
	}
	return det && nondet
}

// NondeterminismManifest is the seed's gate 3 HALT.
func NondeterminismManifest() CompositionManifest {
	return CompositionManifest{
		Verdict:         CompositionDegraded,
		ComposedQuality: 0,
		Directive:       "HALT: Mixing deterministic and non-deterministic tools without explicit acceptance.",
		ManifestDigest:  SHA256Hex("NONDET_INTRODUCED"),
	}
}

// DegradedManifest is the seed's gate 4 HALT for composed quality q below
// the requirement.
func DegradedManifest(q, requirement float64) CompositionManifest {
	return CompositionManifest{
		Verdict:         CompositionDegraded,
		ComposedQuality: q,
		Directive:       "HALT: Composed quality " + PyPercent(q, 2) + " < requirement " + PyPercent(requirement, 2) + ".",
		ManifestDigest:  SHA256Hex("DEGRADED:" + PyFixed(q, 3)),
	}
}

// MeetsQualityDigest is the seed's gate 5 digest over the composition id,
// the tool ids in order, the composed quality and the requirement.
func MeetsQualityDigest(compositionID string, toolIDs []string, q, requirement float64) string {
	return SHA256Hex(PyJSONDumps(PyObject{
		"composition":      compositionID,
		"tools":            toolIDs,
		"composed_quality": PyFixed(q, 3),
		"requirement":      PyFixed(requirement, 3),
	}))
}
