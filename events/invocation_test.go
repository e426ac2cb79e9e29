package events

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/schemas"
)

// referenceInvocation reads invocation data the generic way, the reference
// for the fast path: parseData, schemas.Validate, invocationOf. panicked
// reports a panic on the way (none is known: see TestHugeExponentsAreRefused).
func referenceInvocation(raw []byte) (inv *Invocation, err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			inv, err, panicked = nil, fmt.Errorf("panic: %v", r), true
		}
	}()
	v, args, err := parseData(raw)
	if err != nil {
		return nil, err, false
	}
	if err := schemas.Validate(schemas.ToolInvocationV1, v); err != nil {
		return nil, err, false
	}
	inv, err = invocationOf(v.(map[string]any), args)
	return inv, err, false
}

// checkInvocationData fails t unless the fast path and the reference agree
// on raw: both accept it, with the same Invocation, or both refuse it.
func checkInvocationData(t testing.TB, raw []byte) {
	t.Helper()
	fast, fastOK := parseInvocation(raw)
	ref, refErr, panicked := referenceInvocation(raw)
	switch {
	case panicked:
		if fastOK {
			t.Fatalf("the fast path accepts data the generic path panics on (%v):\n%s", refErr, raw)
		}
	case fastOK && refErr != nil:
		t.Fatalf("the fast path accepts data the generic path refuses (%v):\n%s", refErr, raw)
	case !fastOK && refErr == nil:
		t.Fatalf("the fast path refuses data the generic path accepts:\n%s", raw)
	case fastOK:
		if diff := cmp.Diff(ref, fast); diff != "" {
			t.Fatalf("invocation (-generic +fast):\n%s\ndata: %s", diff, raw)
		}
	}
}

// invocationDataCases are edge cases of tool.invocation.v1 data, for
// TestInvocationFastPathMatchesReference and as fuzz seeds; which of them
// are valid is for the reference to say.
var invocationDataCases = []string{
	okData,
	benchData,
	`{"agent_id":"a","tool_id":"t","arguments":{},"argument_types":{},"used_fields":[],"output_fields_read":[]}`,
	`{"agent_id":"a","tool_id":"t","argument_types":{"x":"string","y":["null","integer"]}}`,
	`{"agent_id":"a","tool_id":"t","arguments":{"x":1,"z":[{"a":1}]},"argument_types":{"x":"string","y":["null","integer"],"z[].a":"number"}}`,
	` {"tool_id" : "t" , "agent_id":"a" } `,
	"\n{\t\"agent_id\"\r:\"a\",\"tool_id\":\"t\"}\n",
	`{"agent\u005fid":"a","tool_id":"\u00e9\ud83d\ude00","trace_id":"\ud800","span_id":"\"\\\/\b\f\n\r\t"}`,
	// Missing, repeated and unknown members.
	`{}`, `{"agent_id":"a"}`, `{"tool_id":"t"}`,
	`{"agent_id":"a","tool_id":"t","tool_id":"t"}`,
	`{"agent_id":"a","tool_id":"t","extra":1}`,
	`{"agent_id":"a","tool_id":"t","Tool_version":"1"}`,
	`{"agent_id":"a","tool_id":"t","arguments":{"k":1,"k":2}}`,
	`{"agent_id":"a","tool_id":"t","argument_types":{"k":"string","k":"string"}}`,
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"ok","status":"ok"}}`,
	// Types.
	`{"agent_id":1,"tool_id":"t"}`, `{"agent_id":null,"tool_id":"t"}`, `{"agent_id":["a"],"tool_id":"t"}`,
	`{"agent_id":"a","tool_id":"t","arguments":[]}`, `{"agent_id":"a","tool_id":"t","arguments":null}`,
	`{"agent_id":"a","tool_id":"t","arguments":"x"}`,
	`{"agent_id":"a","tool_id":"t","used_fields":"x"}`, `{"agent_id":"a","tool_id":"t","used_fields":[1]}`,
	`{"agent_id":"a","tool_id":"t","used_fields":[""]}`, `{"agent_id":"a","tool_id":"t","used_fields":["a","a"]}`,
	`{"agent_id":"a","tool_id":"t","outcome":null}`, `{"agent_id":"a","tool_id":"t","outcome":{}}`,
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"error","error_type":"E","correct":false}}`,
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"OK"}}`, `{"agent_id":"a","tool_id":"t","outcome":{"status":"ok","correct":1}}`,
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"ok","correct":null}}`, `{"agent_id":"a","tool_id":"t","outcome":{"status":"ok","x":1}}`,
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"\u006fk","error_type":""}}`,
	`{"agent_id":"a","tool_id":"t","argument_types":{"x":"text"}}`, `{"agent_id":"a","tool_id":"t","argument_types":{"x":[]}}`,
	`{"agent_id":"a","tool_id":"t","argument_types":{"x":["string","string"]}}`, `{"agent_id":"a","tool_id":"t","argument_types":{"x":null}}`,
	`{"agent_id":"a","tool_id":"t","argument_types":{"":"string"}}`, `{"agent_id":"a","tool_id":"t","argument_types":[]}`,
	// Numbers.
	`{"agent_id":"a","tool_id":"t","latency_ms":0}`, `{"agent_id":"a","tool_id":"t","latency_ms":-0}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":-0.0e5}`, `{"agent_id":"a","tool_id":"t","latency_ms":-1}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":-1e-400}`, `{"agent_id":"a","tool_id":"t","latency_ms":1e-400}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":1e400}`, `{"agent_id":"a","tool_id":"t","latency_ms":1.7976931348623157e308}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":4.15E-05}`, `{"agent_id":"a","tool_id":"t","latency_ms":1e+0010000}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":1e10001}`, `{"agent_id":"a","tool_id":"t","latency_ms":"5"}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":null}`, `{"agent_id":"a","tool_id":"t","latency_ms":01}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":` + strings.Repeat("1", 64) + `}`,
	`{"agent_id":"a","tool_id":"t","latency_ms":` + strings.Repeat("1", 65) + `}`,
	// Lengths: code points, not bytes.
	`{"agent_id":"` + strings.Repeat("é", 128) + `","tool_id":"t"}`,
	`{"agent_id":"` + strings.Repeat("é", 129) + `","tool_id":"t"}`,
	`{"agent_id":"` + strings.Repeat(`\u00e9`, 128) + `","tool_id":"t"}`,
	`{"agent_id":"a","tool_id":"t","trace_id":"` + strings.Repeat("😀", 256) + `"}`,
	`{"agent_id":"a","tool_id":"t","trace_id":"` + strings.Repeat("😀", 257) + `"}`,
	// Syntax.
	`{"agent_id":"a","tool_id":"t"`, `{"agent_id":"a","tool_id":"t",}`, `{"agent_id":"a" "tool_id":"t"}`,
	`{"agent_id":"a","tool_id":"t"} x`, `{"agent_id":"a","tool_id":"t"}{}`, "{\"agent_id\":\"\xff\",\"tool_id\":\"t\"}",
	`{"agent_id":"a","tool_id":"t","outcome":{"status":"ok","correct":tru}}`,
	`{"agent_id":"a","tool_id":"t","arguments":{"a":[1,]}}`, `[]`, `null`, ``, `"x"`,
}

func TestInvocationFastPathMatchesReference(t *testing.T) {
	for _, c := range invocationDataCases {
		checkInvocationData(t, []byte(c))
	}
	for _, doc := range schemaProbes(t) {
		checkInvocationData(t, doc)
	}
}

// FuzzInvocationValidatorMatchesSchema: the fast path accepts exactly the
// data that the generic path (tool.invocation.v1 and invocationOf)
// accepts, and reads it into the same Invocation.
func FuzzInvocationValidatorMatchesSchema(f *testing.F) {
	for _, c := range invocationDataCases {
		f.Add([]byte(c))
	}
	for _, doc := range schemaProbes(f) {
		if len(doc) < 2000 {
			f.Add(doc)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkInvocationData(t, data)
	})
}

// TestHugeExponentsAreRefused: a number whose exponent is beyond ±maxExp10
// (which big.Rat refuses, and the JSON Schema validator then panicked on)
// is bad input with a reason, on both paths and in every event type.
func TestHugeExponentsAreRefused(t *testing.T) {
	for _, raw := range []string{
		`{"agent_id":"a","tool_id":"t","latency_ms":1e999999999}`,
		`{"agent_id":"a","tool_id":"t","latency_ms":1E+10001}`,
	} {
		if _, ok := parseInvocation([]byte(raw)); ok {
			t.Errorf("the fast path accepts %s", raw)
		}
		inv, err, panicked := referenceInvocation([]byte(raw))
		if panicked || err == nil {
			t.Errorf("the generic path on %s: %v, %v (panicked %t)", raw, inv, err, panicked)
		}
	}
	if _, err := Decode("toolsentry.telemetry.contract.crm=2Elookup", nil, structured(`"specversion":"1.0","id":"c-1","source":"s","type":"`+TypeContract+`"`,
		`{"tool_id":"crm.lookup","accuracy":1e-9999999,"determinism":"deterministic","output_schema_hash":"h","expected_input_schema_hash":"h"}`)); err == nil {
		t.Error("a contract with a huge exponent decodes")
	} else if _, ok := ReasonFor(err); !ok {
		t.Errorf("no dead-letter reason for %v", err)
	}
	// Arguments are only summarised (a number is a number), never
	// validated: any exponent is fine there.
	checkInvocationData(t, []byte(`{"agent_id":"a","tool_id":"t","arguments":{"x":1e-999999999}}`))
	// The bound itself is a number.
	if _, _, err := parseData([]byte(`{"x":1e10000,"y":1e-10000}`)); err != nil {
		t.Errorf("exponent 10000 refused: %v", err)
	}
}

// fastDecodeCases are messages on an invocation subject for
// TestDecodeFastPath and FuzzDecodeFastPath, besides decodeCases and
// errorCases: mostly structured-mode attributes around the edges.
func fastDecodeCases() []errorCase {
	s := func(attrs, data string) string { return string(structured(attrs, data)) }
	var many, manyRepeated strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&many, `,"x%d":%d`, i, i)
	}
	manyRepeated.WriteString(many.String() + `,"x3":null`)
	return []errorCase{
		{name: "extensions of every form", body: s(invAttrs+`,"b":true,"c":false,"n":-2147483648,"m":2147483647,"z":null,"s":"v"`, okData)},
		{name: "many extensions", body: s(invAttrs+many.String(), okData)},
		{name: "many extensions, one repeated", body: s(invAttrs+manyRepeated.String(), okData)},
		{name: "null extension repeated", body: s(invAttrs+`,"z":null,"z":"v"`, okData)},
		{name: "null core attribute repeated", body: s(invAttrs+`,"subject":null,"subject":"crm.lookup"`, okData)},
		{name: "subject attribute", body: s(invAttrs+`,"subject":"crm.lookup"`, okData)},
		{name: "null subject", body: s(invAttrs+`,"subject":null`, okData)},
		{name: "null specversion", body: `{"specversion":null,` + invAttrs + `,"data":` + okData + `}`},
		{name: "null data", body: s(invAttrs, `null`)},
		{name: "data first", body: `{"data":` + okData + `,"specversion":"1.0",` + invAttrs + `}`},
		{name: "data repeated", body: s(invAttrs, okData) + `,"data":` + okData + `}`},
		{name: "escaped names", body: `{"sp\u0065cversion":"1.0",` + invAttrs + `,"d\u0061ta":` + okData + `}`},
		{name: "white space", body: " {\n\"specversion\" : \"1.0\" ,\t" + invAttrs + " , \"data\" :\r" + okData + " }\n"},
		{name: "core attribute a number", body: s(invAttrs+`,"subject":1`, okData)},
		{name: "extension a fraction", body: s(invAttrs+`,"e":1.0`, okData)},
		{name: "extension beyond int32", body: s(invAttrs+`,"e":-2147483649`, okData)},
		{name: "extension an array", body: s(invAttrs+`,"e":[]`, okData)},
		{name: "extension with an upper-case name", body: s(invAttrs+`,"E":"x"`, okData)},
		{name: "data_base64", body: `{"specversion":"1.0",` + invAttrs + `,"data_base64":"eyJhZ2VudF9pZCI6ImEiLCJ0b29sX2lkIjoiY3JtLmxvb2t1cCJ9"}`},
		{name: "data_base64 null", body: s(invAttrs+`,"data_base64":null`, okData)},
		{name: "another type", body: s(`"id":"e","source":"s","type":"`+TypeContract+`"`, okData)},
		{name: "no type", body: s(`"id":"e","source":"s"`, okData)},
		{name: "time with offset", body: s(`"id":"e","source":"s","type":"`+TypeInvocation+`","time":"2026-11-29T11:00:00.5+01:00"`, okData)},
		{name: "datacontenttype JSON", body: s(invAttrs+`,"datacontenttype":"application/json"`, okData)},
		{name: "datacontenttype with parameters", body: s(invAttrs+`,"datacontenttype":"application/json; charset=utf-8"`, okData)},
		{name: "source a URL", body: s(`"id":"e","source":"https://example.com/agents?x=1#f","type":"`+TypeInvocation+`"`, okData)},
		{name: "another tool", body: s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookupx"}`)},
		{name: "trailing data", body: s(invAttrs, okData) + `x`},
		{name: "not an object", body: `["specversion"]`},
		{name: "declared structured", header: map[string][]string{"Content-Type": {"application/cloudevents+json"}}, body: s(invAttrs, okData)},
		{name: "binary", header: binHeader("ce-subject", "crm.lookup"), body: benchData},
		{name: "binary, argument types", header: binHeader(), body: `{"agent_id":"a","tool_id":"crm.lookup","argument_types":{"q":"string"}}`},
		{name: "binary, bad data", header: binHeader(), body: `{"agent_id":"a","tool_id":"crm.lookup","latency_ms":-1}`},
		{name: "binary, JSON content type", header: binHeader("Content-Type", "application/json"), body: okData},
	}
}

// TestDecodeFastPath: on an invocation subject, Decode with the fast path
// returns what it returns without, error message included, and takes the
// fast path for every valid invocation except data_base64.
func TestDecodeFastPath(t *testing.T) {
	cases := fastDecodeCases()
	for _, tc := range decodeCases(t) {
		cases = append(cases, errorCase{name: tc.name, subject: tc.subject, header: tc.header, body: string(tc.body)})
	}
	cases = append(cases, errorCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			subject := tc.subject
			if subject == "" {
				subject = invSubject
			}
			fast, fastErr := Names{}.decode(subject, tc.header, []byte(tc.body), true)
			generic, genericErr := Names{}.decode(subject, tc.header, []byte(tc.body), false)
			if fmt.Sprint(fastErr) != fmt.Sprint(genericErr) {
				t.Fatalf("error with the fast path %v, without %v", fastErr, genericErr)
			}
			if diff := diffEvent(generic, fast); diff != "" {
				t.Fatalf("event (-generic +fast):\n%s", diff)
			}
			if fastErr != nil || fast.Kind != KindInvocation || strings.Contains(tc.body, "data_base64") {
				return
			}
			addr, err := ParseSubject(subject)
			if err != nil {
				t.Fatal(err)
			}
			if env, err := readEnvelope(tc.header, []byte(tc.body), addr.Kind); err != nil || env.inv == nil {
				t.Errorf("the fast path did not read the invocation (%v)", err)
			}
		})
	}
}

// FuzzDecodeFastPath: Decode with the fast path accepts what Decode without
// it accepts, with the same event (a schema verdict's raw JSON to the
// byte), and refuses the rest for the same reason (the messages can differ
// in which of several faults they name).
func FuzzDecodeFastPath(f *testing.F) {
	for _, tc := range fastDecodeCases() {
		f.Add(invSubject, headerText(tc.header), []byte(tc.body))
	}
	for _, tc := range decodeCases(f) {
		f.Add(tc.subject, headerText(tc.header), tc.body)
	}
	for _, tc := range errorCases() {
		f.Add(tc.subject, headerText(tc.header), []byte(tc.body))
	}
	for _, tc := range verdictFastCases(f) {
		f.Add(tc.subject, headerText(tc.header), []byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, subject, header string, body []byte) {
		h := parseHeaderText(header)
		fast, fastErr, fastPanic := decodeRecovering(subject, h, body, true)
		generic, genericErr, genericPanic := decodeRecovering(subject, h, body, false)
		if fastPanic != genericPanic {
			t.Fatalf("panic with the fast path: %v, without: %v", fastPanic, genericPanic)
		}
		if (fastErr == nil) != (genericErr == nil) {
			t.Fatalf("error with the fast path %v, without %v", fastErr, genericErr)
		}
		if fr, _ := ReasonFor(fastErr); fr != func() Reason { r, _ := ReasonFor(genericErr); return r }() {
			t.Fatalf("error with the fast path %v, without %v", fastErr, genericErr)
		}
		if diff := diffEvent(generic, fast); diff != "" {
			t.Fatalf("event (-generic +fast):\n%s", diff)
		}
		if g, f := generic.SchemaVerdict, fast.SchemaVerdict; g != nil && f != nil {
			for _, raw := range [][2]json.RawMessage{{g.Changes, f.Changes}, {g.Affected, f.Affected}, {g.Migration, f.Migration}} {
				if string(raw[0]) != string(raw[1]) || (raw[0] == nil) != (raw[1] == nil) {
					t.Fatalf("raw JSON %q without the fast path, %q with", raw[0], raw[1])
				}
			}
		}
	})
}

func decodeRecovering(subject string, header map[string][]string, body []byte, fast bool) (ev Event, err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			ev, err, panicked = Event{}, fmt.Errorf("panic: %v", r), true
		}
	}()
	ev, err = Names{}.decode(subject, header, body, fast)
	return ev, err, false
}

// TestInvocationValidatorFollowsSchema checks the fast path against edge
// cases derived from tool.invocation.v1 itself (schemaProbes): a change
// of the schema that the fast path does not follow makes the fast path and
// the generic path disagree on some of them, and a keyword that the
// derivation does not know fails the test outright.
func TestInvocationValidatorFollowsSchema(t *testing.T) {
	probes := schemaProbes(t)
	if len(probes) < 200 {
		t.Fatalf("only %d probes", len(probes))
	}
	valid := 0
	for _, doc := range probes {
		checkInvocationData(t, doc)
		if _, ok := parseInvocation(doc); ok {
			valid++
		}
	}
	if valid < len(probes)/4 || valid == len(probes) {
		t.Errorf("%d of %d probes valid: the probes do not straddle the constraints", valid, len(probes))
	}
	// Every property of the schema is one the fast path knows.
	doc, err := schemas.Document(schemas.ToolInvocationV1)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(doc, &root); err != nil {
		t.Fatal(err)
	}
	for name := range root.Properties {
		if bit, _ := invocationMember(name); bit == 0 {
			t.Errorf("property %q of %s is unknown to invocationMember", name, schemas.ToolInvocationV1)
		}
	}
}

// schemaProbes derives invocation data from tool.invocation.v1: a minimal
// valid document, and that document with each property, at every depth,
// set to values on both sides of each of its constraints, of every JSON
// type, missing when required, plus members the schema does not name.
func schemaProbes(t testing.TB) [][]byte {
	doc, err := schemas.Document(schemas.ToolInvocationV1)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		t.Fatal(err)
	}
	g := &probeGen{t: t, root: root}
	var out [][]byte
	for _, v := range g.probes(root, "#") {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

type probeGen struct {
	t    testing.TB
	root map[string]any
}

// probeKeywords are the keywords the derivation understands.
var probeKeywords = []string{
	"$schema", "$id", "title", "description", "$defs", "$ref", "type", "enum", "anyOf",
	"properties", "required", "additionalProperties", "propertyNames", "maxProperties",
	"items", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "minimum",
}

func (g *probeGen) schema(s map[string]any, at string) map[string]any {
	for k := range s {
		if !slices.Contains(probeKeywords, k) {
			g.t.Fatalf("%s: keyword %q: schemaProbes does not know it; teach it, and the fast path in invocation.go", at, k)
		}
	}
	ref, ok := s["$ref"].(string)
	if !ok {
		return s
	}
	if len(s) != 1 {
		g.t.Fatalf("%s: $ref beside other keywords", at)
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	def, _ := g.root["$defs"].(map[string]any)[name].(map[string]any)
	if !ok || def == nil {
		g.t.Fatalf("%s: $ref %q not found", at, ref)
	}
	return g.schema(def, ref)
}

func num(s map[string]any, k string) (int, bool) {
	n, ok := s[k].(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(n))
	return i, err == nil
}

// minimal returns a value valid against s.
func (g *probeGen) minimal(s map[string]any, at string) any {
	s = g.schema(s, at)
	if branches, ok := s["anyOf"].([]any); ok {
		return g.minimal(branches[0].(map[string]any), at+"/anyOf/0")
	}
	if enum, ok := s["enum"].([]any); ok {
		return enum[0]
	}
	switch s["type"] {
	case "string":
		n, _ := num(s, "minLength")
		return strings.Repeat("a", max(n, 1))
	case "number", "integer":
		if m, ok := s["minimum"].(json.Number); ok {
			return m
		}
		return json.Number("1")
	case "boolean":
		return true
	case "array":
		n, _ := num(s, "minItems")
		arr := []any{}
		for i := 0; i < n; i++ {
			arr = append(arr, g.minimal(s["items"].(map[string]any), at+"/items"))
		}
		return arr
	case "object":
		obj := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, r := range req {
			obj[r.(string)] = g.minimal(props[r.(string)].(map[string]any), at+"/properties/"+r.(string))
		}
		return obj
	}
	g.t.Fatalf("%s: no minimal value for %v", at, s)
	return nil
}

// anyValues are values of every JSON type, and the strings that the fast
// path takes somewhere (the outcome statuses, the type names of guards).
var anyValues = append([]any{nil, true, false, json.Number("0"), json.Number("1.5"), json.Number("-1"),
	"", "x", "ok", "error", []any{}, []any{"x"}, map[string]any{}, map[string]any{"x": "y"}},
	stringsAsAny(toolschema.TypeAny.Names())...)

func stringsAsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// lengths returns strings of n code points of 1, 2 and 4 bytes.
func lengths(ns ...int) []any {
	var out []any
	for _, n := range ns {
		if n < 0 {
			continue
		}
		for _, c := range []string{"a", "é", "😀"} {
			out = append(out, strings.Repeat(c, n))
		}
	}
	return out
}

// probes returns values on both sides of the constraints of s.
func (g *probeGen) probes(s map[string]any, at string) []any {
	s = g.schema(s, at)
	out := slices.Clone(anyValues)
	if branches, ok := s["anyOf"].([]any); ok {
		for i, b := range branches {
			out = append(out, g.probes(b.(map[string]any), fmt.Sprintf("%s/anyOf/%d", at, i))...)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		for _, e := range enum {
			out = append(out, e)
			if str, ok := e.(string); ok {
				out = append(out, str+"x", strings.ToUpper(str), str[:len(str)-1])
			}
		}
	}
	minLen, hasMin := num(s, "minLength")
	maxLen, hasMax := num(s, "maxLength")
	if hasMin || hasMax {
		out = append(out, lengths(minLen-1, minLen, minLen+1)...)
		if hasMax {
			out = append(out, lengths(maxLen-1, maxLen, maxLen+1)...)
		}
	}
	switch s["type"] {
	case "number", "integer":
		out = append(out, json.Number("0"), json.Number("-0"), json.Number("-0.0"), json.Number("0.0"), json.Number("1.0"),
			json.Number("1e2"), json.Number("-1e-5"), json.Number("4.15E-05"), json.Number("1E400"), json.Number("-1E400"),
			json.Number("1e-400"), json.Number("-1e-400"), json.Number("12345678901234567890"))
		if m, ok := s["minimum"].(json.Number); ok {
			f, _ := strconv.ParseFloat(string(m), 64)
			for _, d := range []float64{-1, -0.5, 0, 0.5, 1} {
				out = append(out, json.Number(strconv.FormatFloat(f+d, 'g', -1, 64)))
			}
		}
	case "array":
		items := s["items"].(map[string]any)
		for _, v := range g.probes(items, at+"/items") {
			out = append(out, []any{v}, []any{g.minimal(items, at+"/items"), v})
		}
		if n, ok := num(s, "minItems"); ok {
			out = append(out, repeatItem(g.minimal(items, at+"/items"), n-1), repeatItem(g.minimal(items, at+"/items"), n))
		}
		if n, ok := num(s, "maxItems"); ok {
			out = append(out, repeatItem(g.minimal(items, at+"/items"), n), repeatItem(g.minimal(items, at+"/items"), n+1))
		}
		if s["uniqueItems"] == true {
			var distinct []any
			for _, v := range g.probes(items, at+"/items") {
				if !slices.ContainsFunc(distinct, func(d any) bool { return cmp.Equal(d, v) }) {
					distinct = append(distinct, v)
				}
			}
			sort.Slice(distinct, func(i, j int) bool { return fmt.Sprint(distinct[i]) < fmt.Sprint(distinct[j]) })
			out = append(out, distinct, distinct[len(distinct)/2:])
		}
	case "object":
		base := g.minimal(s, at).(map[string]any)
		with := func(k string, v any) map[string]any {
			m := make(map[string]any, len(base)+1)
			for bk, bv := range base {
				m[bk] = bv
			}
			m[k] = v
			return m
		}
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		sort.Strings(names)
		out = append(out, base, with("zz_extra", "x"), with("zz_extra", map[string]any{}))
		for _, name := range names {
			for _, v := range g.probes(props[name].(map[string]any), at+"/properties/"+name) {
				out = append(out, with(name, v))
			}
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				m := maps.Clone(base)
				delete(m, r.(string))
				out = append(out, m)
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			for _, v := range g.probes(ap, at+"/additionalProperties") {
				out = append(out, with("some.path[]", v))
			}
			if pn, ok := s["propertyNames"].(map[string]any); ok {
				for _, name := range g.probes(pn, at+"/propertyNames") {
					if str, ok := name.(string); ok {
						out = append(out, with(str, g.minimal(ap, at+"/additionalProperties")))
					}
				}
			}
			if n, ok := num(s, "maxProperties"); ok {
				for _, size := range []int{n, n + 1} {
					m := map[string]any{}
					for i := 0; i < size; i++ {
						m["p"+strconv.Itoa(i)] = g.minimal(ap, at+"/additionalProperties")
					}
					out = append(out, m)
				}
			}
		}
	}
	return out
}

func repeatItem(v any, n int) []any {
	arr := []any{}
	for i := 0; i < n; i++ {
		arr = append(arr, v)
	}
	return arr
}
