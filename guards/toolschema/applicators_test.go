package toolschema

import "testing"

// TypeScript tuples ([string, number]) become prefixItems with items:false
// (2020-12) or the array form of items with additionalItems (draft-07).
const (
	tsTuple        = `{"type":"array","prefixItems":[{"type":"string"},{"type":"number"}],"items":false}`
	tsTupleRetyped = `{"type":"array","prefixItems":[{"type":"string"},{"type":"string"}],"items":false}`
	tsTupleLonger  = `{"type":"array","prefixItems":[{"type":"string"},{"type":"number"},{"type":"boolean"}],"items":false}`
)

var applicatorCases = []kindCase{
	// Rule 2's two cases.
	{"field added where additionalProperties constrained it", obj(`"a":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
		obj(`"a":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":{"type":"string"}`),
		[]wantChange{{path: "bar", kind: FieldAdded, revKind: FieldRemoved, breaking: [4]bool{true, true, true, true}}}},
	{"field added narrower than additionalProperties", obj(`"a":{}`, `"additionalProperties":{"type":"string"}`),
		obj(`"a":{},"bar":{"type":"string","maxLength":5}`, `"additionalProperties":{"type":"string"}`),
		[]wantChange{{path: "bar", kind: FieldAdded, revKind: FieldRemoved, breaking: [4]bool{true, true, false, true}}}},
	{"field added where unevaluatedProperties constrained it", obj(`"a":{}`, `"unevaluatedProperties":{"type":"string"}`),
		obj(`"a":{},"bar":{"type":"number"}`, `"unevaluatedProperties":{"type":"string"}`),
		[]wantChange{{path: "bar", kind: FieldAdded, revKind: FieldRemoved, breaking: [4]bool{true, true, true, true}}}},
	{"field added where a pattern constrained it", obj(`"a":{}`, `"patternProperties":{"^b":{"type":"string"}}`),
		obj(`"a":{},"bar":{"type":"integer"}`, `"patternProperties":{"^b":{"type":"string"}}`),
		[]wantChange{{path: "bar", kind: FieldAdded, revKind: FieldRemoved, breaking: [4]bool{true, true, true, true}}}},
	{"foo:false removed from a closed schema", obj(`"a":{},"foo":false`, `"additionalProperties":false`), obj(`"a":{}`, `"additionalProperties":false`),
		[]wantChange{{path: "foo", kind: FieldRemoved, revKind: FieldAdded, breaking: [4]bool{false, false, false, false}}}},
	// Rule 3: a required name without a declared property still breaks a writer.
	{"required name without a property added", obj(`"a":{}`), obj(`"a":{}`, `"required":["zz"]`),
		[]wantChange{{path: "zz", kind: RequiredChanged, breaking: [4]bool{true, false, false, true}}}},
	// Tuples.
	{"tuple position retyped", field(tsTuple), field(tsTupleRetyped),
		[]wantChange{{path: "v[]", kind: TypeChanged, breaking: [4]bool{true, true, true, true}}}},
	{"tuple gains a position where items was false", field(tsTuple), field(tsTupleLonger),
		[]wantChange{{path: "v[]", kind: TypeChanged, breaking: [4]bool{false, true, true, false}}}},
	{"draft-07 additionalItems opened", field(`{"type":"array","items":[{"type":"string"}],"additionalItems":false}`),
		field(`{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"integer"}}`),
		[]wantChange{{path: "v[]", kind: TypeChanged, breaking: [4]bool{false, true, true, false}}}},
	{"additionalItems beside a single items schema means nothing", field(`{"type":"array","items":{"type":"string"},"additionalItems":false}`),
		field(`{"type":"array","items":{"type":"string"}}`), nil},
	{"draft-07 tuple respelled as prefixItems", field(`{"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":false}`), field(tsTuple), nil},
	// not, if/then/else, dependencies.
	{"not excludes more", field(`{"type":"string","not":{"enum":["root"]}}`), field(`{"type":"string","not":{"enum":["admin","root"]}}`),
		[]wantChange{{path: "v", keyword: "not", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
	{"not added", field(`{"type":"string"}`), field(`{"type":"string","not":{"const":""}}`),
		[]wantChange{{path: "v", keyword: "not", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
	{"then dropped under the same if", obj(`"kind":{},"n":{}`, `"if":{"properties":{"kind":{"const":"a"}}}`, `"then":{"required":["n"]}`),
		obj(`"kind":{},"n":{}`, `"if":{"properties":{"kind":{"const":"a"}}}`),
		[]wantChange{{path: "", keyword: "then", kind: ConstraintChanged, breaking: [4]bool{false, true, true, false}}}},
	{"if changed", obj(`"kind":{},"n":{}`, `"if":{"properties":{"kind":{"const":"a"}}}`, `"then":{"required":["n"]}`),
		obj(`"kind":{},"n":{}`, `"if":{"properties":{"kind":{"const":"b"}}}`, `"then":{"required":["n"]}`),
		[]wantChange{{path: "", keyword: "if", kind: ConstraintChanged, breaking: [4]bool{true, true, true, true}}}},
	{"dependentSchemas added", obj(`"a":{},"b":{}`), obj(`"a":{},"b":{}`, `"dependentSchemas":{"a":{"required":["b"]}}`),
		[]wantChange{{path: "", keyword: "dependentSchemas.a", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
	{"draft-07 schema dependency relaxed", obj(`"a":{},"b":{}`, `"dependencies":{"a":{"properties":{"b":{"type":"string","maxLength":3}}}}`),
		obj(`"a":{},"b":{}`, `"dependencies":{"a":{"properties":{"b":{"type":"string"}}}}`),
		[]wantChange{{path: "", keyword: "dependentSchemas.a", kind: ConstraintChanged, breaking: [4]bool{false, true, true, false}}}},
	{"patternProperties narrowed", obj(`"a":{}`, `"patternProperties":{"^x-":{"type":"string"}}`), obj(`"a":{}`, `"patternProperties":{"^x-":{"type":"string","maxLength":3}}`),
		[]wantChange{{path: "", keyword: "patternProperties.^x-", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
	{"unevaluatedProperties closed", obj(`"a":{}`), obj(`"a":{}`, `"unevaluatedProperties":false`),
		[]wantChange{{path: "", keyword: "unevaluatedProperties", kind: ConstraintChanged, breaking: [4]bool{true, false, false, true}}}},
}

func TestDiffApplicators(t *testing.T) { runKindCases(t, applicatorCases) }
