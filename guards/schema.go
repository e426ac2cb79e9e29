package guards

import (
	"sort"
	"strings"
)

// SchemaVerdict is the seed's SchemaVerdict enum, by name.
type SchemaVerdict string

// The schema verdicts, named as in seed 001_e5cb5c1180e470b4.
const (
	SchemaMatch         SchemaVerdict = "SCHEMA_MATCH"
	DriftOnUnusedFields SchemaVerdict = "DRIFT_ON_UNUSED_FIELDS"
	DriftOnUsedFields   SchemaVerdict = "DRIFT_ON_USED_FIELDS"
	NoBaseline          SchemaVerdict = "NO_BASELINE"
)

// ToolSchema is the schema a tool presents now and the fields the agent uses.
type ToolSchema struct {
	ToolID            string   `json:"tool_id"`
	Version           string   `json:"version"`
	SchemaFingerprint string   `json:"schema_fingerprint"`
	UsedFields        []string `json:"used_fields"` // a set: order and repeats do not matter
}

// SchemaBaseline is the recorded fingerprint, the agent's used surface at
// that time, and the fields that changed since.
type SchemaBaseline struct {
	BaselineFingerprint string   `json:"baseline_fingerprint"`
	BaselineUsedFields  []string `json:"baseline_used_fields"` // a set
	ChangedFields       []string `json:"changed_fields"`       // a set
}

// SchemaManifest is the guard's decision.
type SchemaManifest struct {
	Verdict        SchemaVerdict `json:"verdict"`
	Directive      string        `json:"directive"`
	ManifestDigest string        `json:"manifest_digest"`
}

// EvaluateSchema is the seed's ToolSchemaDriftGuard.evaluate_schema, gate for
// gate. A nil baseline is the seed's None.
func EvaluateSchema(current ToolSchema, baseline *SchemaBaseline) SchemaManifest {
	// Gate 1: baseline presence.
	if baseline == nil {
		return SchemaManifest{
			Verdict:        NoBaseline,
			Directive:      "HALT: No baseline schema. Capture current fingerprint as baseline.",
			ManifestDigest: SHA256Hex("NO_BASELINE:" + current.ToolID),
		}
	}

	// Gate 2: fingerprint match.
	if current.SchemaFingerprint == baseline.BaselineFingerprint {
		return SchemaManifest{
			Verdict:   SchemaMatch,
			Directive: "PROCEED: Schema matches baseline.",
			ManifestDigest: SHA256Hex(PyJSONDumps(PyObject{
				"tool":        current.ToolID,
				"version":     current.Version,
				"fingerprint": current.SchemaFingerprint,
			})),
		}
	}

	// Gate 3: does the drift touch the used surface (now or at baseline)?
	changed := SortedSet(baseline.ChangedFields)
	used := make(map[string]struct{}, len(current.UsedFields)+len(baseline.BaselineUsedFields))
	for _, f := range current.UsedFields {
		used[f] = struct{}{}
	}
	for _, f := range baseline.BaselineUsedFields {
		used[f] = struct{}{}
	}
	var intersect []string
	for _, f := range changed {
		if _, ok := used[f]; ok {
			intersect = append(intersect, f)
		}
	}
	if len(intersect) == 0 {
		return SchemaManifest{
			Verdict:   DriftOnUnusedFields,
			Directive: "PROCEED: Drift on unused fields " + PyReprStrings(changed) + ". Safe.",
			ManifestDigest: SHA256Hex(PyJSONDumps(PyObject{
				"tool":               current.ToolID,
				"drift_fields":       changed,
				"used_surface_clean": "TRUE",
			})),
		}
	}

	// Gate 4: drift on used fields.
	return SchemaManifest{
		Verdict:        DriftOnUsedFields,
		Directive:      "HALT: Drift on used fields " + PyReprStrings(intersect) + ". Apply migration.",
		ManifestDigest: SHA256Hex("USED_DRIFT:" + strings.Join(intersect, ",")),
	}
}

// SortedSet returns the distinct strings of in, sorted by code point as
// Python's sorted() orders str.
func SortedSet(in []string) []string {
	out := make([]string, 0, len(in))
	seen := make(map[string]struct{}, len(in))
	for _, s := range in {
		if _, ok := seen[s]; !ok {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
