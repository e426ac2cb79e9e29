package guards

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Digests computed with the seed's own Python.
func TestEvaluateSchemaGates(t *testing.T) {
	cur := ToolSchema{ToolID: "crm.lookup", Version: "2", SchemaFingerprint: "fp1", UsedFields: []string{"user_id", "limit"}}
	tests := []struct {
		name     string
		current  ToolSchema
		baseline *SchemaBaseline
		want     SchemaManifest
	}{
		{
			name:    "gate 1: no baseline",
			current: cur,
			want:    SchemaManifest{NoBaseline, "HALT: No baseline schema. Capture current fingerprint as baseline.", "69132ee180d97168b9820e9709f8278402a6de4d08c0c614648b36a7ae7f37bc"},
		},
		{
			name:     "gate 2: fingerprint matches, whatever changed_fields says",
			current:  cur,
			baseline: &SchemaBaseline{BaselineFingerprint: "fp1", ChangedFields: []string{"user_id"}},
			want:     SchemaManifest{SchemaMatch, "PROCEED: Schema matches baseline.", "6aad70c792f9253810d7d782b584e487befde35c1ce36b0315a30ea5092846a6"},
		},
		{
			name:     "gate 3: drift on unused fields, sorted and deduplicated",
			current:  cur,
			baseline: &SchemaBaseline{BaselineFingerprint: "fp0", ChangedFields: []string{"é", "b", "b"}},
			want:     SchemaManifest{DriftOnUnusedFields, "PROCEED: Drift on unused fields ['b', 'é']. Safe.", "788aad9cc30260976efc3dc71364a001f52e8b9310452ec025f83f6cccad3898"},
		},
		{
			name:     "gate 4: the silent rename touches a field used at baseline only",
			current:  ToolSchema{ToolID: "crm.lookup", Version: "2", SchemaFingerprint: "fp1"},
			baseline: &SchemaBaseline{BaselineFingerprint: "fp0", BaselineUsedFields: []string{"user_id", "é"}, ChangedFields: []string{"é", "user_id", "userId"}},
			want:     SchemaManifest{DriftOnUsedFields, "HALT: Drift on used fields ['user_id', 'é']. Apply migration.", "7f71aca4be90397a64e645e30149454255779da505fbbf3fd3248145aa6bcf58"},
		},
		{
			name:     "gate 3 with nothing changed but a new fingerprint",
			current:  cur,
			baseline: &SchemaBaseline{BaselineFingerprint: "fp0"},
			want:     SchemaManifest{DriftOnUnusedFields, "PROCEED: Drift on unused fields []. Safe.", SHA256Hex(`{"drift_fields": [], "tool": "crm.lookup", "used_surface_clean": "TRUE"}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, EvaluateSchema(tt.current, tt.baseline)); diff != "" {
				t.Errorf("EvaluateSchema (-want +got):\n%s", diff)
			}
		})
	}
}
