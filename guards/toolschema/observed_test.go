package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestObservedInputDrift(t *testing.T) {
	const current = `{"name": "crm.lookup", "inputSchema": {"type": "object",
		"properties": {
			"userId": {"type": "string", "description": "the user"},
			"limit": {"type": "integer", "default": 10},
			"options": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
			"tags": {"type": "array", "items": {"type": "string"}}
		},
		"required": ["userId"]}}`
	cur := mustTool(t, current)
	tests := []struct {
		name       string
		fields     map[string]TypeSet
		deviations []string
		verdict    guards.SchemaVerdict
		affected   []string
		migrated   string // the migration applied to payload
		payload    string
	}{
		{
			name:       "payload fits: no deviation",
			fields:     map[string]TypeSet{"userId": TypeString, "limit": TypeInteger, "options": TypeObject, "options.verbose": TypeBoolean, "tags": TypeArray, "tags[]": TypeString},
			deviations: nil,
			verdict:    guards.SchemaMatch,
		},
		{
			name:       "the seed's silent rename: the agent still sends user_id",
			fields:     map[string]TypeSet{"user_id": TypeString, "limit": TypeInteger},
			deviations: []string{"user_id"},
			verdict:    guards.DriftOnUsedFields,
			affected:   []string{"user_id"},
			payload:    `{"user_id": "u-1", "limit": 5}`,
			migrated:   `{"limit":5,"userId":"u-1"}`,
		},
		{
			name:       "a type the tool no longer accepts",
			fields:     map[string]TypeSet{"userId": TypeString, "limit": TypeString},
			deviations: []string{"limit"},
			verdict:    guards.DriftOnUsedFields,
			affected:   []string{"limit"},
			payload:    `{"userId": "u-1", "limit": "5"}`,
			migrated:   `{"limit":5,"userId":"u-1"}`,
		},
		{
			name:       "an unknown nested field",
			fields:     map[string]TypeSet{"userId": TypeString, "options": TypeObject, "options.verbosity": TypeInteger},
			deviations: []string{"options.verbosity"},
			verdict:    guards.DriftOnUsedFields,
			affected:   []string{"options.verbosity"}, // options.verbose, optional, is only added under the options it sends
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, err := InputDeviations(cur.Input, tt.fields)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.deviations, dev); diff != "" {
				t.Fatalf("InputDeviations (-want +got):\n%s", diff)
			}
			obs, err := ObservedInputTool(cur, tt.fields)
			if err != nil {
				t.Fatal(err)
			}
			var used []string
			for p := range tt.fields {
				used = append(used, p)
			}
			rep, err := EvaluateDrift(obs, cur, UsedSurface{Input: used})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Manifest.Verdict != tt.verdict {
				t.Fatalf("verdict %s, want %s; changes %+v", rep.Manifest.Verdict, tt.verdict, rep.Changes)
			}
			if tt.affected != nil {
				if diff := cmp.Diff(tt.affected, rep.Affected); diff != "" {
					t.Errorf("affected (-want +got):\n%s", diff)
				}
			}
			if tt.payload != "" {
				in, err := decodeJSONValue([]byte(tt.payload))
				if err != nil {
					t.Fatal(err)
				}
				out, err := rep.Migration.Apply(in)
				if err != nil {
					t.Fatalf("migration %+v: %v", rep.Migration, err)
				}
				got := canonicalRaw(out)
				if string(got) != tt.migrated {
					t.Errorf("migrated %s, want %s", got, tt.migrated)
				}
			}
		})
	}
}

// TestObservedInputTuple: "[]" of a tuple stands for every position, each
// with its own schema, so the items an agent sends are not judged against
// items (false after a closed tuple's last position).
func TestObservedInputTuple(t *testing.T) {
	cur := mustTool(t, `{"name":"plot","inputSchema":{"type":"object","properties":{
		"pt":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false},
		"tags":{"type":"array","items":false}}}}`)
	got, err := InputDeviations(cur.Input, map[string]TypeSet{"pt": TypeArray, "pt[]": TypeInteger, "tags": TypeArray, "tags[]": TypeString})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tags[]"}; !cmp.Equal(got, want) {
		t.Errorf("deviations %v, want %v", got, want)
	}
}

// TestObservedInputTypeless: a schema that constrains nothing (a typeless
// root, {"$schema": ...} only or with annotations only, or a property {})
// declares nothing, so what an agent sends under it is not undeclared; a
// typed object without properties, or a root with any constraint keyword,
// still is judged.
func TestObservedInputTypeless(t *testing.T) {
	sent := map[string]TypeSet{"path": TypeString, "opts": TypeObject, "opts.x": TypeInteger}
	tests := []struct {
		name, tool string
		want       []string
	}{
		{"typeless root", `{"name":"read","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"}}`, nil},
		{"empty root", `{"name":"read","inputSchema":{}}`, nil},
		{"typeless property", `{"name":"read","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"opts":{}}}}`, nil},
		{"typed object without properties", `{"name":"read","inputSchema":{"type":"object"}}`, []string{"opts", "opts.x", "path"}},
		// Annotations constrain nothing: still typeless.
		{"typeless root with a description", `{"name":"read","inputSchema":{"description":"anything"}}`, nil},
		{"typeless root with annotations only", `{"name":"read","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","title":"Args","description":"d","$comment":"c","examples":[{"path":"/a"}],"default":{},"deprecated":false,"x-vendor":1}}`, nil},
		{"typeless property with a description", `{"name":"read","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"opts":{"description":"options"}}}}`, nil},
		// One constraint keyword is enough to be judged.
		{"root with a format", `{"name":"read","inputSchema":{"description":"d","format":"uri"}}`, []string{"opts", "opts.x", "path"}},
		{"root with minProperties", `{"name":"read","inputSchema":{"description":"d","minProperties":1}}`, []string{"opts", "opts.x", "path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := mustTool(t, tt.tool)
			got, err := InputDeviations(cur.Input, sent)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("deviations (-want +got):\n%s", diff)
			}
		})
	}
}
