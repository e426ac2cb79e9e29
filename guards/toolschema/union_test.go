package toolschema

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Shapes that MCP servers emit: Pydantic and FastMCP write Optional[int] =
// None as anyOf [integer, null] with a null default; zod writes unions as
// anyOf, literal unions as anyOf of consts, discriminated unions as oneOf
// (or anyOf) of objects with a constant tag.
const (
	pydanticOptInt = `{"anyOf":[{"type":"integer"},{"type":"null"}],"default":null,"title":"Limit"}`
	pydanticOptStr = `{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Limit"}`
	emailVariant   = `{"type":"object","properties":{"kind":{"type":"string","const":"email"},"to":{"type":"string"}},"required":["kind","to"]}`
	emailVariantCC = `{"type":"object","properties":{"kind":{"type":"string","const":"email"},"to":{"type":"string"},"cc":{"type":"string"}},"required":["kind","to"]}`
	smsVariant     = `{"type":"object","properties":{"kind":{"type":"string","const":"sms"},"phone":{"type":"string"}},"required":["kind","phone"]}`
	pushVariant    = `{"type":"object","properties":{"kind":{"type":"string","const":"push"},"device":{"type":"string"}},"required":["kind","device"]}`
)

func field(schema string) string { return obj(`"v":` + schema) }

var unionCases = []kindCase{
	{"Optional[int] to Optional[str] (Pydantic)", field(pydanticOptInt), field(pydanticOptStr),
		[]wantChange{{path: "v", kind: TypeChanged, breaking: [4]bool{true, true, true, true}}}},
	{"int to Optional[int] (Pydantic)", field(`{"type":"integer","title":"Limit"}`), field(`{"anyOf":[{"type":"integer"},{"type":"null"}],"title":"Limit"}`),
		[]wantChange{{path: "v", kind: NullableChanged, breaking: [4]bool{false, true, true, false}}}},
	{"int to Optional[int] = None (FastMCP)", field(`{"type":"integer"}`), field(`{"anyOf":[{"type":"integer"},{"type":"null"}],"default":null}`),
		[]wantChange{
			{path: "v", kind: DefaultChanged, breaking: [4]bool{true, true, false, false}},
			{path: "v", kind: NullableChanged, breaking: [4]bool{false, true, true, false}},
		}},
	{"int to int | str", field(`{"type":"integer"}`), field(`{"anyOf":[{"type":"integer"},{"type":"string"}]}`),
		[]wantChange{{path: "v", kind: TypeChanged, breaking: [4]bool{false, true, true, false}}}},
	{"zod union gains a member", field(`{"anyOf":[{"type":"string"},{"type":"number"}]}`), field(`{"anyOf":[{"type":"string"},{"type":"number"},{"type":"boolean"}]}`),
		[]wantChange{{path: "v", kind: TypeChanged, breaking: [4]bool{false, true, true, false}}}},
	{"union to one member: no invented null", field(`{"anyOf":[{"type":"integer"},{"type":"string"}]}`), field(`{"type":"string"}`),
		[]wantChange{{path: "v", kind: TypeChanged, breaking: [4]bool{true, false, false, true}}}},
	{"Optional[int | str] loses null", field(`{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}]}`), field(`{"anyOf":[{"type":"integer"},{"type":"string"}]}`),
		[]wantChange{{path: "v", kind: NullableChanged, breaking: [4]bool{true, false, false, true}}}},
	{"Optional[int | str] to Optional[int]", field(`{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}]}`), field(`{"anyOf":[{"type":"integer"},{"type":"null"}]}`),
		[]wantChange{{path: "v", kind: TypeChanged, breaking: [4]bool{true, false, false, true}}}},
	{"change inside a reordered branch", field(`{"anyOf":[{"type":"string","maxLength":10},{"type":"integer"}]}`), field(`{"anyOf":[{"type":"integer"},{"type":"string","maxLength":20}]}`),
		[]wantChange{{path: "v", keyword: "maxLength", kind: ConstraintChanged, breaking: [4]bool{false, true, true, false}}}},
	{"zod literal union gains a value", field(`{"anyOf":[{"type":"string","const":"a"},{"type":"string","const":"b"}]}`),
		field(`{"anyOf":[{"type":"string","const":"a"},{"type":"string","const":"b"},{"type":"string","const":"c"}]}`),
		[]wantChange{{path: "v", kind: EnumChanged, breaking: [4]bool{false, true, true, false}}}},
	{"literal union to a string enum", field(`{"anyOf":[{"const":"a"},{"const":"b"}]}`), field(`{"type":"string","enum":["a","b"]}`), nil},
	{"discriminated union gains a variant", field(`{"oneOf":[` + emailVariant + `,` + smsVariant + `]}`), field(`{"oneOf":[` + smsVariant + `,` + pushVariant + `,` + emailVariant + `]}`),
		[]wantChange{{path: "v", keyword: "oneOf", kind: ConstraintChanged, breaking: [4]bool{false, true, true, false}}}},
	{"field added inside a variant", field(`{"anyOf":[` + emailVariant + `,` + smsVariant + `]}`), field(`{"anyOf":[` + smsVariant + `,` + emailVariantCC + `]}`),
		[]wantChange{{path: "v.cc", kind: FieldAdded, revKind: FieldRemoved, breaking: [4]bool{false, true, false, true}}}},
	{"anyOf to oneOf with overlapping branches", field(`{"anyOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^a"}]}`),
		field(`{"oneOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^a"}]}`),
		[]wantChange{{path: "v", keyword: "oneOf", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
	{"anyOf to oneOf with disjoint branches", field(`{"anyOf":[{"type":"string"},{"type":"integer"}]}`), field(`{"oneOf":[{"type":"integer"},{"type":"string"}]}`), nil},
	{"allOf duplicates merged", field(`{"allOf":[{"type":"string"},{"type":"string"}]}`), field(`{"allOf":[{"type":"string"}]}`), nil},
	{"allOf merged before comparison", field(`{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"properties":{"b":{"type":"integer"}},"required":["b"]}]}`),
		field(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`), nil},
	{"allOf branch field retyped", field(`{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"properties":{"b":{"type":"integer"}}}]}`),
		field(`{"allOf":[{"properties":{"b":{"type":"number"}}},{"type":"object","properties":{"a":{"type":"string"}}}]}`),
		[]wantChange{{path: "v.b", kind: TypeChanged, breaking: [4]bool{false, true, true, false}}}},
	{"union with object siblings", field(`{"type":"object","properties":{"id":{"type":"string"},"url":{"type":"string"}},"anyOf":[{"required":["id"]},{"required":["url"]}]}`),
		field(`{"type":"object","properties":{"id":{"type":"string"},"url":{"type":"string"}},"anyOf":[{"required":["id"]}]}`),
		[]wantChange{{path: "v", keyword: "anyOf", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
}

func TestDiffUnions(t *testing.T) { runKindCases(t, unionCases) }

// TestDiffUnionOrder checks that the order of branches and properties
// changes nothing.
func TestDiffUnionOrder(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{field(`{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}`), field(`{"anyOf":[{"type":"null"},{"type":"integer"},{"type":"string"}]}`)},
		{field(`{"oneOf":[` + emailVariant + `,` + smsVariant + `]}`), field(`{"oneOf":[` + smsVariant + `,` + emailVariant + `]}`)},
		{field(`{"allOf":[{"minLength":1},{"type":"string"}]}`), field(`{"allOf":[{"type":"string"},{"minLength":1}]}`)},
	} {
		for _, side := range []ChangeSide{SideInput, SideOutput} {
			got, err := DiffTools(schemaTool(t, side, tc.a), schemaTool(t, side, tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 {
				t.Errorf("%s vs %s (%s): changes %+v, want none", tc.a, tc.b, side, got)
			}
		}
	}
}

// TestDiffUnionReasons checks what a union change says: the types of the
// whole union, the alternative added.
func TestDiffUnionReasons(t *testing.T) {
	got, err := DiffTools(schemaTool(t, SideInput, field(`{"anyOf":[{"type":"integer"},{"type":"null"}],"default":null}`)),
		schemaTool(t, SideInput, field(`{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"}],"default":null}`)))
	if err != nil {
		t.Fatal(err)
	}
	type view struct{ Kind, Before, After, Reason string }
	var views []view
	for _, c := range got {
		views = append(views, view{string(c.Kind), string(c.Before), string(c.After), c.Reason})
	}
	want := []view{{"type_changed", `"null|integer"`, `"null|integer|string"`, "v type changed from null|integer to null|integer|string (widened)"}}
	if diff := cmp.Diff(want, views); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}

	got, err = DiffTools(schemaTool(t, SideInput, field(`{"oneOf":[`+emailVariant+`]}`)),
		schemaTool(t, SideInput, field(`{"oneOf":[`+emailVariant+`,`+smsVariant+`]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Breaking || string(got[0].After) == "" || got[0].Before != nil {
		t.Fatalf("changes %+v, want one non-breaking alternative added with its schema", got)
	}
}
