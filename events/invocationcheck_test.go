package events

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/schemas"
)

// checkPlainInvocation encodes ev with and without the field by field check
// of an invocation and fails unless both give the same message or both
// fail: the check must never accept what Decode refuses. It reports
// whether the check took the invocation.
func checkPlainInvocation(t *testing.T, ev Event) bool {
	t.Helper()
	n := Names{}
	withCheck, err1 := n.encode(ev, true)
	decoded, err2 := n.encode(ev, false)
	if (err1 == nil) != (err2 == nil) || err1 != nil && !errors.Is(err1, ErrBadEvent) {
		t.Fatalf("%+v:\nwith the field check: %v\ndecoded: %v", ev.Invocation, err1, err2)
	}
	if err1 != nil {
		return false
	}
	if withCheck.Subject != decoded.Subject || withCheck.ID != decoded.ID || !bytes.Equal(withCheck.Data, decoded.Data) {
		t.Fatalf("messages differ:\n%s\n%s", withCheck.Data, decoded.Data)
	}
	if ev.Type == "" {
		ev.Type = ev.Kind.Type()
	}
	checkInvocationJSON(t, ev.Invocation)
	plain := plainInvocation(&ev)
	if plain {
		// What the check lets through must satisfy the schema itself, not
		// only the decoder's fast path for invocations.
		body, err := parseJSON(withCheck.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate(KindInvocation.Schema(), body.(map[string]any)["data"]); err != nil {
			t.Fatalf("the field check took data that %s refuses: %v\n%s", KindInvocation.Schema(), err, withCheck.Data)
		}
	}
	return plain
}

func plainInvocationEvent() Event {
	latency, correct := 41.5, true
	return Meta{
		ID: "e-1", Source: "agents/billing-7", Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
		Extensions: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}.event(KindInvocation, "crm.lookup", Event{Invocation: &Invocation{
		AgentID: "agent-7", ToolID: "crm.lookup", ToolVersion: "2.1.0", SchemaFingerprint: "sha256:9f2c",
		ArgumentTypes: FieldTypes{"user_id": toolschema.TypeString, "options": toolschema.TypeObject, "options.limit": toolschema.TypeInteger | toolschema.TypeNull},
		UsedFields:    []string{"user_id"}, OutputFieldsRead: []string{"name"},
		Outcome: &Outcome{Status: "ok", Correct: &correct}, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		ParentSpanID: "p", WorkflowID: "w", LatencyMS: &latency,
	}})
}

// TestPlainInvocation: the field by field check takes the invocations that
// producers build, and leaves every invocation that Decode would refuse,
// or that it does not recognise as plainly valid, to Decode. Each case
// that Decode refuses is refused by Encode either way (checkPlainInvocation).
func TestPlainInvocation(t *testing.T) {
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "f" + strings.Repeat("x", i%7)
		}
		return out
	}
	manyTypes := func(n int) FieldTypes {
		f := make(FieldTypes, n)
		for i := range n {
			f["p"+strconv.Itoa(i)] = toolschema.TypeString
		}
		return f
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Event)
		plain bool
	}{
		{"as a producer builds it", func(*Event) {}, true},
		{"the required fields only, no time, no extension", func(e *Event) {
			e.Invocation = &Invocation{AgentID: "a", ToolID: "crm.lookup"}
			e.Time, e.Extensions = time.Time{}, nil
		}, true},
		{"no subject attribute", func(e *Event) { e.Subject = "" }, true},
		{"longest ids", func(e *Event) {
			e.Invocation.AgentID, e.Invocation.ToolID = strings.Repeat("é", 128), strings.Repeat("a", 128)
			e.Subject = e.Invocation.ToolID
		}, true},
		{"longest optional strings", func(e *Event) {
			e.Invocation.ToolVersion, e.Invocation.SchemaFingerprint = strings.Repeat("v", 128), strings.Repeat("f", 256)
			e.Invocation.TraceID, e.Invocation.SpanID, e.Invocation.ParentSpanID, e.Invocation.WorkflowID = strings.Repeat("t", 256), strings.Repeat("s", 256), strings.Repeat("p", 256), strings.Repeat("w", 256)
			e.Invocation.Outcome = &Outcome{Status: "error", ErrorType: strings.Repeat("e", 256)}
		}, true},
		{"every type at a path", func(e *Event) { e.Invocation.ArgumentTypes = FieldTypes{"x": toolschema.TypeAny} }, true},
		{"longest path", func(e *Event) {
			e.Invocation.ArgumentTypes = FieldTypes{strings.Repeat("é", MaxFieldPathLen): toolschema.TypeString}
		}, true},
		{"most paths", func(e *Event) { e.Invocation.ArgumentTypes = manyTypes(MaxArgumentFields) }, true},
		{"most used fields", func(e *Event) { e.Invocation.UsedFields = many(1000) }, true},
		{"empty used fields", func(e *Event) { e.Invocation.UsedFields = []string{} }, true},
		{"zero latency", func(e *Event) { z := 0.0; e.Invocation.LatencyMS = &z }, true},
		{"source a URI", func(e *Event) { e.Source = "https://agents.example.com/billing?x=1" }, true},
		// Refused by Decode.
		{"no agent", func(e *Event) { e.Invocation.AgentID = "" }, false},
		{"agent id too long", func(e *Event) { e.Invocation.AgentID = strings.Repeat("é", 129) }, false},
		{"tool id too long", func(e *Event) { e.Invocation.ToolID = strings.Repeat("a", 129); e.Subject = e.Invocation.ToolID }, false},
		{"tool version too long", func(e *Event) { e.Invocation.ToolVersion = strings.Repeat("v", 129) }, false},
		{"fingerprint too long", func(e *Event) { e.Invocation.SchemaFingerprint = strings.Repeat("f", 257) }, false},
		{"trace id too long", func(e *Event) { e.Invocation.TraceID = strings.Repeat("t", 257) }, false},
		{"span id too long", func(e *Event) { e.Invocation.SpanID = strings.Repeat("s", 257) }, false},
		{"parent span id too long", func(e *Event) { e.Invocation.ParentSpanID = strings.Repeat("p", 257) }, false},
		{"workflow id too long", func(e *Event) { e.Invocation.WorkflowID = strings.Repeat("w", 257) }, false},
		{"an unknown status", func(e *Event) { e.Invocation.Outcome = &Outcome{Status: "fine"} }, false},
		{"no status", func(e *Event) { e.Invocation.Outcome = &Outcome{} }, false},
		{"error type too long", func(e *Event) { e.Invocation.Outcome = &Outcome{Status: "error", ErrorType: strings.Repeat("e", 257)} }, false},
		{"path too long", func(e *Event) {
			e.Invocation.ArgumentTypes = FieldTypes{strings.Repeat("é", MaxFieldPathLen+1): toolschema.TypeString}
		}, false},
		{"too many paths", func(e *Event) { e.Invocation.ArgumentTypes = manyTypes(MaxArgumentFields + 1) }, false},
		{"a path without types", func(e *Event) { e.Invocation.ArgumentTypes = FieldTypes{"x": 0} }, false},
		{"too many used fields", func(e *Event) { e.Invocation.UsedFields = many(1001) }, false},
		{"an empty used field", func(e *Event) { e.Invocation.UsedFields = []string{""} }, false},
		{"output field too long", func(e *Event) { e.Invocation.OutputFieldsRead = []string{strings.Repeat("o", 1025)} }, false},
		{"negative latency", func(e *Event) { l := -1.0; e.Invocation.LatencyMS = &l }, false},
		{"subject attribute of another key", func(e *Event) { e.Subject = "other" }, false},
		{"type of another kind", func(e *Event) { e.Type = TypeContract }, false},
		{"source not a URI-reference", func(e *Event) { e.Source = "%zz" }, false},
		{"source with a control character", func(e *Event) { e.Source = "a\x7f" }, false},
		{"no id", func(e *Event) { e.ID = "" }, false},
		{"no source", func(e *Event) { e.Source = "" }, false},
		{"extension shadowing an attribute", func(e *Event) { e.Extensions = map[string]string{"id": "x"} }, false},
		{"extension named data", func(e *Event) { e.Extensions = map[string]string{"data": "x"} }, false},
		{"extension name not a-z0-9", func(e *Event) { e.Extensions = map[string]string{"Tenant": "x"} }, false},
		{"extension with a control character", func(e *Event) { e.Extensions = map[string]string{"tenant": "a\nb"} }, false},
		{"time beyond year 9999", func(e *Event) { e.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		// Accepted by Decode, but not plainly: left to it.
		{"dataschema", func(e *Event) { e.DataSchema = "https://example.com/s" }, false},
		{"agent id not UTF-8", func(e *Event) { e.Invocation.AgentID = "a\xff" }, false},
		{"empty extension value", func(e *Event) { e.Extensions = map[string]string{"tenant": ""} }, false},
		{"minus zero latency", func(e *Event) { l := math.Copysign(0, -1); e.Invocation.LatencyMS = &l }, false},
		{"year 0", func(e *Event) { e.Time = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := plainInvocationEvent()
			inv := *ev.Invocation
			ev.Invocation = &inv
			tc.edit(&ev)
			if plain := checkPlainInvocation(t, ev); plain != tc.plain {
				t.Errorf("field check took it: %v, want %v", plain, tc.plain)
			}
		})
	}
}

// FuzzEncodeInvocation: the field by field check of an invocation never
// accepts what Decode refuses (the full JSON Schema validator included),
// and Encode writes the same either way.
func FuzzEncodeInvocation(f *testing.F) {
	f.Add("agent-7", "crm.lookup", "2.1.0", "user_id", uint8(toolschema.TypeString), "user_id", "ok", "", 41.5, "agents/billing", int64(1795000000), "traceparent", "00-1", "")
	f.Add("é", "a", "", "", uint8(0), "", "", "x", -0.0, "%zz", int64(0), "ID", "", "crm.lookup")
	f.Fuzz(func(t *testing.T, agent, tool, version, path string, types uint8, used, status, errType string, latency float64, source string, unix int64, ext, extValue, subject string) {
		inv := Invocation{AgentID: agent, ToolID: tool, ToolVersion: version, SchemaFingerprint: version, TraceID: errType, LatencyMS: &latency}
		if path != "" || types != 0 {
			inv.ArgumentTypes = FieldTypes{path: toolschema.TypeSet(types)}
		}
		if used != "" {
			inv.UsedFields = []string{used, path}
		}
		if status != "" {
			inv.Outcome = &Outcome{Status: status, ErrorType: errType}
		}
		ev := Meta{ID: "e-1", Source: source, Time: time.Unix(unix, 0)}.event(KindInvocation, subject, Event{Invocation: &inv})
		if ext != "" {
			ev.Extensions = map[string]string{ext: extValue}
		}
		checkPlainInvocation(t, ev)
	})
}

// checkInvocationJSON: Encode's writer of an invocation writes what
// marshalJSON writes, or leaves it to marshalJSON's error.
func checkInvocationJSON(t *testing.T, inv *Invocation) {
	t.Helper()
	want, err := marshalJSON(inv)
	got, ok := inv.appendJSON(nil)
	if ok != (err == nil) || ok && !bytes.Equal(got, want) {
		t.Fatalf("appendJSON:\n%s (%v)\nmarshalJSON:\n%s (%v)", got, ok, want, err)
	}
}

// TestInvocationAppendJSON: the writer of an invocation is encoding/json's,
// for the strings, numbers and empty values where they could differ.
func TestInvocationAppendJSON(t *testing.T) {
	yes, no := true, false
	for _, l := range []float64{0, math.Copysign(0, -1), 1, 41.5, -3, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, 1.2345e22, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)} {
		checkInvocationJSON(t, &Invocation{AgentID: "a", ToolID: "t", LatencyMS: &l})
	}
	for _, s := range []string{"", "plain", "<a&b>", "quote\" back\\slash", "\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029", "é😀", "bad \xff\xfe utf-8", "\xed\xa0\x80"} {
		checkInvocationJSON(t, &Invocation{
			AgentID: s, ToolID: s, ToolVersion: s, SchemaFingerprint: s,
			ArgumentTypes: FieldTypes{s: toolschema.TypeString, s + "x": toolschema.TypeAny, s + "y": 0, "b": toolschema.TypeNull | toolschema.TypeInteger},
			UsedFields:    []string{s, "z"}, OutputFieldsRead: []string{s},
			Outcome: &Outcome{Status: s, ErrorType: s, Correct: &no}, TraceID: s, SpanID: s, ParentSpanID: s, WorkflowID: s,
		})
	}
	checkInvocationJSON(t, &Invocation{ArgumentTypes: FieldTypes{}, UsedFields: []string{}, OutputFieldsRead: []string{}, Outcome: &Outcome{Correct: &yes}})
	checkInvocationJSON(t, &Invocation{})
}
