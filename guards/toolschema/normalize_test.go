package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gowebpki/jcs"
)

// equivalentSchemas are pairs of schemas that mean the same: their
// fingerprints must be equal and their diff empty.
var equivalentSchemas = []struct {
	name string
	a, b string
}{
	{"key order", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`,
		`{"properties":{"b":{"type":"integer"},"a":{"type":"string"}},"type":"object"}`},
	{"required order and repeats", `{"type":"object","properties":{"a":{},"b":{}},"required":["a","b"]}`,
		`{"type":"object","properties":{"a":{},"b":{}},"required":["b","a","b"]}`},
	{"enum order and repeats", `{"enum":["x","y",1]}`, `{"enum":[1,"y","x","y"]}`},
	{"enum number spelling", `{"enum":[1,2.5]}`, `{"enum":[1.0,25e-1]}`},
	{"type string or list", `{"type":"string"}`, `{"type":["string"]}`},
	{"type list order", `{"type":["string","null"]}`, `{"type":["null","string"]}`},
	{"number absorbs integer", `{"type":["integer","number"]}`, `{"type":"number"}`},
	{"every type is no type", `{"type":["null","boolean","object","array","number","string"]}`, `{}`},
	{"const is an enum of one", `{"const":"x"}`, `{"enum":["x"]}`},
	{"local ref resolved", `{"type":"object","properties":{"u":{"$ref":"#/$defs/user"}},"$defs":{"user":{"type":"string"}}}`,
		`{"type":"object","properties":{"u":{"type":"string"}}}`},
	{"definitions and $defs", `{"properties":{"u":{"$ref":"#/definitions/A"}},"definitions":{"A":{"type":"string"}}}`,
		`{"properties":{"u":{"$ref":"#/$defs/Other"}},"$defs":{"Other":{"type":"string"}}}`},
	{"ref to a property", `{"properties":{"a":{"type":"integer"},"b":{"$ref":"#/properties/a"}}}`,
		`{"properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`},
	{"escaped pointer", `{"$defs":{"a/b~c":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a~1b~0c"}}}`,
		`{"properties":{"x":{"type":"string"}}}`},
	{"anchor", `{"$defs":{"u":{"$anchor":"user","type":"string"}},"properties":{"x":{"$ref":"#user"}}}`,
		`{"properties":{"x":{"type":"string"}}}`},
	{"ref with a description beside it", `{"properties":{"s":{"$ref":"#/$defs/S","description":"state"}},"$defs":{"S":{"enum":["a","b"]}}}`,
		`{"properties":{"s":{"allOf":[{"$ref":"#/$defs/S"}],"description":"state"}},"$defs":{"S":{"enum":["a","b"]}}}`},
	{"ref sibling inline", `{"properties":{"s":{"$ref":"#/$defs/S","description":"state"}},"$defs":{"S":{"enum":["a","b"],"description":"old"}}}`,
		`{"properties":{"s":{"enum":["b","a"],"description":"state"}}}`},
	{"optional as anyOf null", `{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null}}}`,
		`{"properties":{"x":{"type":["string","null"],"default":null}}}`},
	{"optional ref as anyOf null", `{"properties":{"x":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/S"}]}},"$defs":{"S":{"type":"string","enum":["a"]}}}`,
		`{"properties":{"x":{"type":["string","null"],"enum":["a",null]}}}`},
	{"openapi nullable", `{"type":"string","nullable":true}`, `{"type":["string","null"]}`},
	{"items anything", `{"type":"array","items":{}}`, `{"type":"array"}`},
	{"items true", `{"type":"array","items":true}`, `{"type":"array"}`},
	{"additionalProperties true", `{"type":"object","additionalProperties":true}`, `{"type":"object"}`},
	{"draft-07 tuple", `{"items":[{"type":"string"}],"additionalItems":false}`, `{"prefixItems":[{"type":"string"}],"items":false}`},
	{"draft-04 exclusive bound", `{"maximum":10,"exclusiveMaximum":true}`, `{"exclusiveMaximum":10}`},
	{"stricter bound wins", `{"minimum":5,"exclusiveMinimum":5}`, `{"exclusiveMinimum":5}`},
	{"zero minimums", `{"minLength":0,"minItems":0,"uniqueItems":false,"deprecated":false}`, `{}`},
	{"dependencies", `{"dependencies":{"a":["c","b"]}}`, `{"dependentRequired":{"a":["b","c"]}}`},
	{"comments and ids ignored", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://x/s","$comment":"c","type":"string"}`,
		`{"type":"string"}`},
	{"anyOf order", `{"anyOf":[{"type":"string"},{"type":"integer","minimum":1}]}`, `{"anyOf":[{"minimum":1,"type":"integer"},{"type":"string"}]}`},
	{"recursive ref by another name", `{"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}}}`,
		`{"type":"object","properties":{"next":{"$ref":"#"}}}`},
	{"ref to root id", `{"$id":"https://x/s.json","properties":{"a":{"$ref":"https://x/s.json#/$defs/A"}},"$defs":{"A":{"type":"string"}}}`,
		`{"properties":{"a":{"type":"string"}}}`},
}

// distinctSchemas differ in one behavioural element each: their
// fingerprints must differ and the diff must report at least one change.
var distinctSchemas = []struct {
	name string
	a, b string
}{
	{"property name", `{"properties":{"a":{}}}`, `{"properties":{"b":{}}}`},
	{"type", `{"type":"string"}`, `{"type":"integer"}`},
	{"integer to number", `{"type":"integer"}`, `{"type":"number"}`},
	{"null allowed", `{"type":"string"}`, `{"type":["string","null"]}`},
	{"required", `{"properties":{"a":{}}}`, `{"properties":{"a":{}},"required":["a"]}`},
	{"default", `{"default":false}`, `{"default":true}`},
	{"null default", `{}`, `{"default":null}`},
	{"enum", `{"enum":["a"]}`, `{"enum":["a","b"]}`},
	{"empty enum", `{}`, `{"enum":[]}`},
	{"format", `{"type":"string"}`, `{"type":"string","format":"uri"}`},
	{"maximum", `{"maximum":10}`, `{"maximum":11}`},
	{"exclusive", `{"maximum":10}`, `{"exclusiveMaximum":10}`},
	{"pattern", `{"pattern":"^a"}`, `{"pattern":"^b"}`},
	{"additionalProperties", `{"type":"object"}`, `{"type":"object","additionalProperties":false}`},
	{"description", `{"description":"seconds"}`, `{"description":"milliseconds"}`},
	{"title", `{"title":"A"}`, `{"title":"B"}`},
	{"examples", `{"examples":[1]}`, `{"examples":[2]}`},
	{"unknown keyword", `{"x-order":1}`, `{"x-order":2}`},
	{"anyOf branch", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `{"anyOf":[{"type":"string"},{"type":"boolean"}]}`},
	{"not", `{"not":{"type":"string"}}`, `{"not":{"type":"integer"}}`},
	{"prefixItems", `{"prefixItems":[{"type":"string"}]}`, `{"prefixItems":[{"type":"integer"}]}`},
	{"nested default", `{"properties":{"o":{"properties":{"t":{"default":1}}}}}`, `{"properties":{"o":{"properties":{"t":{"default":2}}}}}`},
	{"items", `{"type":"array","items":{"type":"string"}}`, `{"type":"array","items":{"type":"integer"}}`},
	{"recursion depth", `{"type":"object","properties":{"next":{"$ref":"#"}}}`, `{"type":"object","properties":{"next":{"type":"object"}}}`},
	{"external ref", `{"$ref":"https://example.com/a.json"}`, `{"$ref":"https://example.com/b.json"}`},
	{"items of a non-array", `{"type":"string","items":{"type":"string"}}`, `{"type":"string","items":{"type":"integer"}}`},
	{"properties of a non-object", `{"type":"string","properties":{"a":{}}}`, `{"type":"string"}`},
}

func mustNormalize(t testing.TB, s string) *SchemaNode {
	t.Helper()
	n, err := NormalizeSchema([]byte(s))
	if err != nil {
		t.Fatalf("NormalizeSchema(%s): %v", s, err)
	}
	return n
}

func mustCanonical(t testing.TB, n *SchemaNode) string {
	t.Helper()
	b, err := CanonicalSchemaJSON(n)
	if err != nil {
		t.Fatalf("CanonicalSchemaJSON: %v", err)
	}
	return string(b)
}

func bareTool(t testing.TB, schema string) ToolDefinition {
	t.Helper()
	tools, err := ParseToolDocument([]byte(schema))
	if err != nil {
		t.Fatalf("ParseToolDocument(%s): %v", schema, err)
	}
	return tools[0]
}

func TestNormalizeEquivalentSchemas(t *testing.T) {
	for _, tc := range equivalentSchemas {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mustCanonical(t, mustNormalize(t, tc.a)), mustCanonical(t, mustNormalize(t, tc.b))
			if diff := cmp.Diff(a, b); diff != "" {
				t.Errorf("canonical forms differ (-a +b):\n%s", diff)
			}
			changes, err := DiffTools(bareTool(t, tc.a), bareTool(t, tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != 0 {
				t.Errorf("DiffTools of equivalent schemas = %+v, want none", changes)
			}
		})
	}
}

func TestNormalizeDistinctSchemas(t *testing.T) {
	for _, tc := range distinctSchemas {
		t.Run(tc.name, func(t *testing.T) {
			fa, err := Fingerprint(bareTool(t, tc.a))
			if err != nil {
				t.Fatal(err)
			}
			fb, err := Fingerprint(bareTool(t, tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if fa == fb {
				t.Errorf("fingerprints are equal (%s) for schemas that mean different things", fa)
			}
			for _, dir := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
				changes, err := DiffTools(bareTool(t, dir[0]), bareTool(t, dir[1]))
				if err != nil {
					t.Fatal(err)
				}
				if len(changes) == 0 {
					t.Errorf("DiffTools(%s, %s) reports no change; the fingerprints differ", dir[0], dir[1])
				}
			}
		})
	}
}

func TestCanonicalFormIsRFC8785(t *testing.T) {
	for _, tc := range append(slices.Clone(equivalentSchemas), distinctSchemas...) {
		for _, s := range []string{tc.a, tc.b} {
			got := mustCanonical(t, mustNormalize(t, s))
			want, err := jcs.Transform([]byte(got))
			if err != nil {
				t.Fatalf("jcs.Transform(%s): %v", got, err)
			}
			if got != string(want) {
				t.Errorf("canonical form of %s is not a JCS fixed point:\n got %s\nwant %s", s, got, want)
			}
		}
	}
}

func TestCanonicalKeysSortByUTF16(t *testing.T) {
	// U+FF61 sorts after U+1F600 in UTF-16 (0xD83D < 0xFF61) but before it
	// in UTF-8; RFC 8785 wants UTF-16.
	n := mustNormalize(t, `{"properties":{"｡":{},"😀":{},"a":{}}}`)
	got := mustCanonical(t, n)
	want := `{"properties":{"a":{},"😀":{},"｡":{}}}`
	if got != want {
		t.Errorf("canonical = %s, want %s", got, want)
	}
	ref, err := jcs.Transform([]byte(got))
	if err != nil || string(ref) != got {
		t.Errorf("jcs.Transform = %s, %v; want unchanged", ref, err)
	}
}

func TestNormalizeStructure(t *testing.T) {
	n := mustNormalize(t, `{
		"type": "object",
		"required": ["b", "a"],
		"properties": {
			"a": {"type": ["integer", "null"], "default": 3, "enum": [3, 1, null]},
			"b": {"type": "array", "items": {"$ref": "#/$defs/item"}}
		},
		"$defs": {"item": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid", "maxLength": 36}}}}
	}`)
	if n.Types != TypeObject || !slices.Equal(n.Required, []string{"a", "b"}) {
		t.Errorf("root: types %v required %v", n.Types, n.Required)
	}
	a := n.Properties["a"]
	if a.Types != TypeInteger|TypeNull || !a.Nullable() || !a.HasDefault || a.Default != 3.0 {
		t.Errorf("a: %+v", a)
	}
	if diff := cmp.Diff([]any{1.0, 3.0, nil}, a.Enum); diff != "" {
		t.Errorf("a.Enum (-want +got):\n%s", diff)
	}
	if !a.EnumContains(1) || a.EnumContains(2) || !a.EnumContains(nil) {
		t.Error("EnumContains does not match the enum")
	}
	id := n.Properties["b"].Items.Properties["id"]
	if id.Format != "uuid" || id.Constraints["maxLength"] != 36.0 {
		t.Errorf("b[].id: %+v", id)
	}
}

func TestNormalizeRecursiveRefTerminates(t *testing.T) {
	n := mustNormalize(t, `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
		"children":{"type":"array","items":{"$ref":"#/$defs/node"}},
		"parent":{"$ref":"#/$defs/node"}}}}}`)
	if n.Properties["children"].Items != n || n.Properties["parent"] != n {
		t.Error("recursive $ref does not share the node")
	}
	got := mustCanonical(t, n)
	want := `{"properties":{"children":{"items":{"$cycle":2},"type":["array"]},"parent":{"$cycle":1}},"type":["object"]}`
	if got != want {
		t.Errorf("canonical = %s, want %s", got, want)
	}
	// The canonical form normalises to itself.
	if again := mustCanonical(t, mustNormalize(t, got)); again != got {
		t.Errorf("normalising the canonical form again gives %s", again)
	}
}

func TestNormalizeErrors(t *testing.T) {
	deep := strings.Repeat(`{"properties":{"a":`, 10000) + `{}` + strings.Repeat(`}}`, 10000)
	var chain strings.Builder
	chain.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&chain, `"d%d":{"properties":{"x":{"$ref":"#/$defs/d%d"}}},`, i, i+1)
	}
	chain.WriteString(`"d300":{}}}`)
	// Each level refers twice to the next: 2^40 paths when expanded.
	var dag strings.Builder
	dag.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&dag, `"d%d":{"properties":{"l":{"$ref":"#/$defs/d%d"},"r":{"$ref":"#/$defs/d%d"}}},`, i, i+1, i+1)
	}
	dag.WriteString(`"d40":{"type":"string"}}}`)
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{`, "not valid JSON"},
		{"not a schema", `[1]`, "want an object or a boolean"},
		{"unknown type", `{"type":"text"}`, `unknown type "text"`},
		{"type not a name", `{"type":1}`, "want a type name"},
		{"properties not an object", `{"properties":[]}`, "#/properties: want an object"},
		{"bad required", `{"required":[1]}`, "array of strings"},
		{"ref not found", `{"$ref":"#/$defs/missing"}`, `no "$defs"`},
		{"ref loop", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "loop that never reaches a schema"},
		{"self ref", `{"$ref":"#"}`, "loop"},
		{"ref loop with siblings", `{"$defs":{"a":{"$ref":"#/$defs/a","description":"x"}},"$ref":"#/$defs/a"}`, "loop"},
		{"10,000 levels", deep, "nests deeper than"},
		{"ref chain deeper than the limit", chain.String(), "nests deeper than 128 levels"},
		{"exponential expansion", dag.String(), "expands beyond"},
		{"maximum not a number", `{"maximum":"10"}`, "#/maximum: want a number"},
		{"bad $cycle", `{"$cycle":3}`, "does not point to an enclosing schema"},
		{"anchor missing", `{"$ref":"#nope"}`, `no $anchor "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NormalizeSchema([]byte(tc.schema))
			if err == nil {
				_, err = CanonicalSchemaJSON(n)
			}
			if !errors.Is(err, guards.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestNormalizeLargeEnum(t *testing.T) {
	vals := make([]string, 0, 80000)
	for i := 0; len(vals) < cap(vals); i++ {
		vals = append(vals, fmt.Sprintf("value-%06d", i))
	}
	build := func(vals []string) []byte {
		b, _ := json.Marshal(map[string]any{"type": "string", "enum": vals})
		return b
	}
	fwd := build(vals)
	if len(fwd) < 1<<20 {
		t.Fatalf("enum document is %d bytes, want at least 1 MiB", len(fwd))
	}
	rev := slices.Clone(vals)
	slices.Reverse(rev)
	a, err := Fingerprint(bareTool(t, string(fwd)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Fingerprint(bareTool(t, string(build(rev))))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("enum order changed the fingerprint: %s vs %s", a, b)
	}
	c, err := Fingerprint(bareTool(t, string(build(vals[1:]))))
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("removing one enum value left the fingerprint unchanged")
	}
}

func TestParseToolDocument(t *testing.T) {
	tool := `{"name":"t","description":"d","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"_meta":{"x":1},"icons":[]}`
	tests := []struct {
		name, doc string
		names     []string
		bare      bool
		wantErr   string
	}{
		{"tool", tool, []string{"t"}, false, ""},
		{"tools/list", `{"tools":[` + tool + `,{"name":"u","inputSchema":{}}],"nextCursor":"c"}`, []string{"t", "u"}, false, ""},
		{"json-rpc response", `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + tool + `]}}`, []string{"t"}, false, ""},
		{"bare schema", `{"type":"object","properties":{"tools":{"type":"array"}}}`, []string{""}, true, ""},
		{"bare boolean schema", `true`, []string{""}, true, ""},
		{"duplicate tool", `{"tools":[` + tool + `,` + tool + `]}`, nil, false, "listed twice"},
		{"tool without name", `{"inputSchema":{}}`, nil, false, "tool name: missing"},
		{"bad hint", `{"name":"t","inputSchema":{},"annotations":{"readOnlyHint":"yes"}}`, nil, false, "want a boolean"},
		{"bad input schema", `{"name":"t","inputSchema":{"type":"x"}}`, nil, false, "inputSchema"},
		{"array document", `[]`, nil, false, "want a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tools, err := ParseToolDocument([]byte(tc.doc))
			if tc.wantErr != "" {
				if !errors.Is(err, guards.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want ErrInvalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools {
				names = append(names, tl.Name)
				if tl.Bare != tc.bare {
					t.Errorf("tool %q Bare = %v", tl.Name, tl.Bare)
				}
			}
			if diff := cmp.Diff(tc.names, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFingerprintToolLevel(t *testing.T) {
	base := `{"name":"t","title":"T","description":"d","inputSchema":{"type":"object"},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`
	fp := func(doc string) string {
		t.Helper()
		f, err := Fingerprint(bareTool(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	want := fp(base)
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q is not sha256:<hex>", want)
	}
	same := []string{
		// Hints at their default values are the same as absent ones.
		`{"name":"t","title":"T","description":"d","inputSchema":{"type":"object"},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true,"destructiveHint":true,"openWorldHint":true,"idempotentHint":false}}`,
		// _meta and icons are not behaviour.
		`{"_meta":{"v":2},"icons":[{"src":"x.png"}],"annotations":{"readOnlyHint":true},"outputSchema":{"type":"object"},"inputSchema":{"type":"object"},"description":"d","title":"T","name":"t"}`,
	}
	for _, doc := range same {
		if got := fp(doc); got != want {
			t.Errorf("Fingerprint(%s) = %s, want %s", doc, got, want)
		}
	}
	different := map[string]string{
		"name":        strings.Replace(base, `"name":"t"`, `"name":"t2"`, 1),
		"title":       strings.Replace(base, `"title":"T"`, `"title":"T2"`, 1),
		"description": strings.Replace(base, `"description":"d"`, `"description":"d2"`, 1),
		"annotation":  strings.Replace(base, `"readOnlyHint":true`, `"readOnlyHint":false`, 1),
		"output":      strings.Replace(base, `"outputSchema":{"type":"object"}`, `"outputSchema":{"type":"array"}`, 1),
		"no output":   strings.Replace(base, `,"outputSchema":{"type":"object"}`, ``, 1),
		"extra field": strings.Replace(base, `"name":"t"`, `"name":"t","execution":{"taskSupport":"required"}`, 1),
		// A typeless root (anything goes) is its own schema, not type object.
		"typeless input": strings.Replace(base, `"inputSchema":{"type":"object"}`, `"inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"}`, 1),
	}
	for what, doc := range different {
		if fp(doc) == want {
			t.Errorf("changing the %s left the fingerprint unchanged", what)
		}
	}
}

// reorderJSON writes a decoded JSON value back with every object's keys in
// reverse order, so the same document has a different byte layout.
func reorderJSON(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Reverse(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			reorderJSON(buf, x[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			reorderJSON(buf, e)
		}
		buf.WriteByte(']')
	default:
		b, _ := json.Marshal(x)
		buf.Write(b)
	}
}

// normalizeRegressions are inputs fuzzing found; each once broke a property
// FuzzNormalize checks.
var normalizeRegressions = []string{
	`{"properties":{"00000000":{"$ref":"#/$defs/S","":""}},"$defs":{"S":{}}}`,
}

func FuzzNormalize(f *testing.F) {
	for _, s := range normalizeRegressions {
		f.Add([]byte(s))
	}
	for _, tc := range equivalentSchemas {
		f.Add([]byte(tc.a))
		f.Add([]byte(tc.b))
	}
	for _, tc := range distinctSchemas {
		f.Add([]byte(tc.a))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := NormalizeSchema(raw)
		if err != nil {
			if !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		canon, err := CanonicalSchemaJSON(n)
		if err != nil {
			if !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// RFC 8785: the canonical form is its own canonicalisation.
		if want, err := jcs.Transform(canon); err != nil || !bytes.Equal(want, canon) {
			t.Fatalf("canonical form is not JCS: %s (jcs: %s, %v)", canon, want, err)
		}
		// Normalising twice changes nothing.
		again, err := NormalizeSchema(canon)
		if err != nil {
			t.Fatalf("normalising the canonical form %s: %v", canon, err)
		}
		canon2, err := CanonicalSchemaJSON(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(canon, canon2) {
			t.Fatalf("normalising twice changed the form:\n%s\n%s", canon, canon2)
		}
		// Key order does not matter.
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("NormalizeSchema accepted what json.Unmarshal rejects: %v", err)
		}
		var buf bytes.Buffer
		reorderJSON(&buf, doc)
		r, err := NormalizeSchema(buf.Bytes())
		if err != nil {
			t.Fatalf("reordered document rejected: %v", err)
		}
		canon3, err := CanonicalSchemaJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(canon, canon3) {
			t.Fatalf("key order changed the canonical form:\n%s\n%s", canon, canon3)
		}
		// A schema never differs from itself.
		tool := ToolDefinition{Input: n, Bare: true}
		if changes, err := DiffTools(tool, ToolDefinition{Input: again, Bare: true}); err != nil || len(changes) != 0 {
			t.Fatalf("DiffTools(x, normalize(x)) = %+v, %v", changes, err)
		}
	})
}
