package events

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/schemas"
)

// fastPathObjects are the objects of the JSON Schemas that Decode's fast
// paths read member by member (invocation.go, verdictfast.go,
// observedcheck.go), by schema and JSON Pointer into its document, each
// with the fast path's own lookup of a member's name.
var fastPathObjects = map[string]map[string]func(name string) bool{
	schemas.ToolInvocationV1: {
		"":                    func(name string) bool { bit, _ := invocationMember(name); return bit != 0 },
		"/properties/outcome": func(name string) bool { return outcomeMember(name) != 0 },
	},
	schemas.VerdictSchemaV1: {
		"": func(name string) bool { return schemaVerdictMember(name) != 0 },
	},
	schemas.ToolSchemaObservedV1: {
		"/then":                  observedList.knows,
		"/else":                  observedTool.knows,
		"/$defs/toolsListResult": toolsListResult.knows,
		"/$defs/tool":            mcpTool.knows,
		"/$defs/objectSchema":    objectSchema.knows,
	},
}

// TestFastPathsKnowSchemaMembers: every member that a schema with a fast
// path declares, in every object of it, is one the fast path knows. A
// member the fast path does not know would be refused by it where the
// schema is closed (every such event going the slow way) and left
// unchecked where it is open (the fast path taking what the schema
// refuses); an object with members that no fast path reads fails too, so
// that a new nested object gets a decision.
func TestFastPathsKnowSchemaMembers(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(fastPathObjects)) {
		objects := fastPathObjects[name]
		doc, err := schemas.Document(name)
		if err != nil {
			t.Fatal(err)
		}
		var root any
		if err := json.Unmarshal(doc, &root); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		visited := map[string]bool{}
		walkSchema(root, "", func(ptr string, properties map[string]any) {
			known, ok := objects[ptr]
			if !ok {
				t.Errorf("%s: the object at #%s declares %s, and no fast path reads it: add its lookup to fastPathObjects", name, ptr, strings.Join(slices.Sorted(maps.Keys(properties)), ", "))
				return
			}
			visited[ptr] = true
			for _, member := range slices.Sorted(maps.Keys(properties)) {
				if !known(member) {
					t.Errorf("%s: member %q of the object at #%s is not known to the fast path", name, member, ptr)
				}
			}
		})
		for ptr := range objects {
			if !visited[ptr] {
				t.Errorf("%s: fastPathObjects names #%s, which is no object with properties in the schema", name, ptr)
			}
		}
	}
}

// TestFastPathsKnowSchemaMembersFails: the walk finds a member and a
// nested object that a fast path does not know, so the test above can
// fail.
func TestFastPathsKnowSchemaMembersFails(t *testing.T) {
	var schema any
	if err := json.Unmarshal([]byte(`{"properties":{"a":{"type":"string"},"b":{"items":{"$ref":"#/$defs/x"}}},"$defs":{"x":{"properties":{"~/":{}}}},"then":{"properties":{"properties":{"properties":{"deep":{}}}}}}`), &schema); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	walkSchema(schema, "", func(ptr string, properties map[string]any) {
		got[ptr] = slices.Sorted(maps.Keys(properties))
	})
	want := map[string][]string{"": {"a", "b"}, "/$defs/x": {"~/"}, "/then": {"properties"}, "/then/properties/properties": {"deep"}}
	if len(got) != len(want) {
		t.Fatalf("walkSchema found %v, want %v", got, want)
	}
	for ptr, names := range want {
		if !slices.Equal(got[ptr], names) {
			t.Errorf("walkSchema at #%s found %v, want %v", ptr, got[ptr], names)
		}
	}
	if known, _ := invocationMember("no_such_member"); known != 0 || outcomeMember("no_such_member") != 0 || schemaVerdictMember("no_such_member") != 0 || mcpTool.knows("no_such_member") {
		t.Error("a fast path knows a member no schema declares")
	}
}

// walkSchema calls object for every subschema of a JSON Schema document
// that declares properties, with its JSON Pointer: the document, its $defs,
// the schemas of its properties, items, conditions and combinations, down
// to the bottom.
func walkSchema(schema any, ptr string, object func(ptr string, properties map[string]any)) {
	s, ok := schema.(map[string]any)
	if !ok {
		return
	}
	if props, ok := s["properties"].(map[string]any); ok {
		object(ptr, props)
	}
	for _, kw := range []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"} {
		if m, ok := s[kw].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				walkSchema(m[k], ptr+"/"+kw+"/"+pointerToken(k), object)
			}
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "unevaluatedProperties", "contains", "propertyNames", "if", "then", "else", "not"} {
		walkSchema(s[kw], ptr+"/"+kw, object)
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
		if a, ok := s[kw].([]any); ok {
			for i, sub := range a {
				walkSchema(sub, ptr+"/"+kw+"/"+strconv.Itoa(i), object)
			}
		}
	}
}

// pointerToken escapes a name for a JSON Pointer (RFC 6901).
func pointerToken(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}
