package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

const digest = "6ddca7a2c0a7e1f5b4d6a1e8c2f3b4a5d6e7f8091a2b3c4d5e6f708192a3b4c5"

type decodeCase struct {
	name    string
	subject string
	header  map[string][]string
	body    []byte
	want    Event
}

func decodeCases(t testing.TB) []decodeCase {
	base := Event{ID: "e-1", Source: "agents/billing", Time: mustTime(t, "2026-11-29T10:00:00Z")}
	with := func(k Kind, key string, f func(*Event)) Event {
		ev := base
		ev.Kind, ev.Type, ev.Key = k, k.Type(), key
		f(&ev)
		return ev
	}
	return append([]decodeCase{
		{
			name:    "invocation with arguments",
			subject: invSubject,
			body: structured(invAttrs, `{"agent_id":"agent-7","tool_id":"crm.lookup","tool_version":"2.1.0","schema_fingerprint":"sha256:9f2c",
				"arguments":{"user_id":"u-123","options":{"limit":10,"ratio":0.5,"exact":1.0,"fields":["name","email"],"deep":{"x":null}},"items":[{"id":"a"},{"id":7,"tags":[]}],"flag":true},
				"used_fields":["user_id","legacy"],"output_fields_read":["name"],
				"outcome":{"status":"error","error_type":"Timeout","correct":false},
				"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","parent_span_id":"b7ad6b7169203331","workflow_id":"etl","latency_ms":41.5}`),
			want: with(KindInvocation, "crm.lookup", func(e *Event) {
				e.Invocation = &Invocation{
					AgentID: "agent-7", ToolID: "crm.lookup", ToolVersion: "2.1.0", SchemaFingerprint: "sha256:9f2c",
					ArgumentTypes: FieldTypes{
						"user_id":          toolschema.TypeString,
						"options":          toolschema.TypeObject,
						"options.limit":    toolschema.TypeInteger,
						"options.ratio":    toolschema.TypeNumber,
						"options.exact":    toolschema.TypeInteger,
						"options.fields":   toolschema.TypeArray,
						"options.fields[]": toolschema.TypeString,
						"options.deep":     toolschema.TypeObject,
						"options.deep.x":   toolschema.TypeNull,
						"items":            toolschema.TypeArray,
						"items[]":          toolschema.TypeObject,
						"items[].id":       toolschema.TypeString | toolschema.TypeInteger,
						"items[].tags":     toolschema.TypeArray,
						"flag":             toolschema.TypeBoolean,
					},
					UsedFields:       []string{"user_id", "legacy"},
					OutputFieldsRead: []string{"name"},
					Outcome:          &Outcome{Status: "error", ErrorType: "Timeout", Correct: ptr(false)},
					TraceID:          "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", ParentSpanID: "b7ad6b7169203331",
					WorkflowID: "etl", LatencyMS: ptr(41.5),
				}
			}),
		},
		{
			name:    "invocation with argument_types merged into arguments",
			subject: invSubject,
			body:    structured(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","arguments":{"n":1},"argument_types":{"n":"string","m":["null","boolean"]}}`),
			want: with(KindInvocation, "crm.lookup", func(e *Event) {
				e.Invocation = &Invocation{AgentID: "a", ToolID: "crm.lookup", ArgumentTypes: FieldTypes{
					"n": toolschema.TypeInteger | toolschema.TypeString,
					"m": toolschema.TypeNull | toolschema.TypeBoolean,
				}}
			}),
		},
		{
			name:    "minimal invocation, empty arguments",
			subject: invSubject,
			body:    structured(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","arguments":{},"used_fields":[]}`),
			want: with(KindInvocation, "crm.lookup", func(e *Event) {
				e.Invocation = &Invocation{AgentID: "a", ToolID: "crm.lookup", ArgumentTypes: FieldTypes{}, UsedFields: []string{}}
			}),
		},
		{
			name:    "one tool observed",
			subject: "toolsentry.telemetry.schema.crm=2Elookup",
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.schema.observed.v1","time":"2026-11-29T11:00:00+01:00","subject":"crm.lookup"`,
				`{"tool_id":"crm.lookup","version":"2","server":"crm","tool":{"name":"lookup","title":"Lookup","description":"Find a user","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}},"required":["user_id"]},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"_meta":{"v":1},"icons":[{"src":"x.png"}]}}`),
			want: with(KindSchemaObserved, "crm.lookup", func(e *Event) {
				e.Subject = "crm.lookup"
				e.SchemaObserved = &SchemaObserved{ToolID: "crm.lookup", Version: "2", Server: "crm", Tool: &MCPTool{
					Name: "lookup", Title: "Lookup", Description: "Find a user",
					InputSchema:  json.RawMessage(`{"properties":{"user_id":{"type":"string"}},"required":["user_id"],"type":"object"}`),
					OutputSchema: json.RawMessage(`{"type":"object"}`),
					Annotations:  json.RawMessage(`{"readOnlyHint":true}`),
					Meta:         json.RawMessage(`{"v":1}`),
					Other:        map[string]json.RawMessage{"icons": json.RawMessage(`[{"src":"x.png"}]`)},
				}}
			}),
		},
		{
			name:    "tools/list result on the server's subject",
			subject: "toolsentry.telemetry.schema.crm",
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.schema.observed.v1","time":"2026-11-29T10:00:00Z"`,
				`{"server":"crm","tools":{"tools":[{"name":"lookup","inputSchema":{"type":"object"}},{"name":"update","inputSchema":{"type":"object"}}],"nextCursor":"p2"}}`),
			want: with(KindSchemaObserved, "crm", func(e *Event) {
				e.SchemaObserved = &SchemaObserved{Server: "crm", NextCursor: "p2", Tools: []MCPTool{
					{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)},
					{Name: "update", InputSchema: json.RawMessage(`{"type":"object"}`)},
				}}
			}),
		},
		{
			name:    "tools/list of typeless schemas (anything goes)",
			subject: "toolsentry.telemetry.schema.fs",
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.schema.observed.v1","time":"2026-11-29T10:00:00Z"`,
				`{"server":"fs","tools":{"tools":[{"name":"read_file","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"},"outputSchema":{}}]}}`),
			want: with(KindSchemaObserved, "fs", func(e *Event) {
				e.SchemaObserved = &SchemaObserved{Server: "fs", Tools: []MCPTool{
					{Name: "read_file", InputSchema: json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#"}`), OutputSchema: json.RawMessage(`{}`)},
				}}
			}),
		},
		{
			name:    "contract",
			subject: "toolsentry.telemetry.contract.crm=2Elookup",
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.contract.v1","time":"2026-11-29T10:00:00Z"`,
				`{"tool_id":"crm.lookup","accuracy":0.95,"determinism":"DETERMINISTIC","output_schema_hash":"h1","expected_input_schema_hash":"h0"}`),
			want: with(KindContract, "crm.lookup", func(e *Event) {
				e.Contract = &Contract{ToolID: "crm.lookup", Accuracy: 0.95, Determinism: "DETERMINISTIC", OutputSchemaHash: "h1", ExpectedInputSchemaHash: "h0"}
			}),
		},
		{
			name:    "workflow, raw JSON kept",
			subject: "toolsentry.telemetry.workflow.etl",
			body:    structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.workflow.declared.v1","time":"2026-11-29T10:00:00Z"`, workflowData),
			want: with(KindWorkflow, "etl", func(e *Event) {
				e.Workflow = &Workflow{CompositionID: "etl", Raw: json.RawMessage(workflowData)}
			}),
		},
		{
			name:    "schema verdict",
			subject: "toolsentry.verdicts.schema.drift_on_used_fields.crm=2Elookup",
			body: structured(`"id":"v-1","source":"toolsentry","type":"io.toolsentry.verdict.schema.v1","subject":"crm.lookup","time":"2026-11-29T10:00:00Z"`,
				`{"verdict":"DRIFT_ON_USED_FIELDS","directive":"HALT: Drift on used fields ['user_id']. Apply migration.","manifest_digest":"`+digest+`","tool_id":"crm.lookup","agent_id":"agent-7","version":"2","baseline_fingerprint":"sha256:a","current_fingerprint":"sha256:b","changes":[{"path":"user_id","kind":"field_renamed","to":"userId"}],"affected":["user_id"],"migration":null,"guard_version":"0.1.0","input_event_id":"e-1","input_subject":"`+invSubject+`","input_sequence":42}`),
			want: Event{Kind: KindSchemaVerdict, Type: TypeSchemaVerdict, ID: "v-1", Source: "toolsentry", Subject: "crm.lookup", Key: "crm.lookup", Time: mustTime(t, "2026-11-29T10:00:00Z"),
				SchemaVerdict: &SchemaVerdict{
					Verdict: guards.DriftOnUsedFields, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.", ManifestDigest: digest,
					ToolID: "crm.lookup", AgentID: "agent-7", Version: "2", BaselineFingerprint: "sha256:a", CurrentFingerprint: "sha256:b",
					Changes:      json.RawMessage(`[{"kind":"field_renamed","path":"user_id","to":"userId"}]`),
					Affected:     json.RawMessage(`["user_id"]`),
					GuardVersion: "0.1.0", InputEventID: "e-1", InputSubject: invSubject, InputSequence: 42,
				}},
		},
		{
			name:    "composition verdict",
			subject: "toolsentry.verdicts.composition.composition_degraded.etl",
			body: structured(`"id":"v-2","source":"toolsentry","type":"io.toolsentry.verdict.composition.v1"`,
				`{"verdict":"COMPOSITION_DEGRADED","directive":"HALT: Composed quality 77.38% < requirement 95.00%.","manifest_digest":"`+digest+`","composition_id":"etl","composed_quality":0.7737809374999999,"composed_quality_lower":0.7,"composed_quality_upper":0.8,"confidence":"CONFIRMED","failure_modes":[{"kind":"accuracy_multiplication"}],"guard_version":"0.1.0","input_event_id":"e-9","input_subject":"toolsentry.telemetry.workflow.etl","input_sequence":3}`),
			want: Event{Kind: KindCompositionVerdict, Type: TypeCompositionVerdict, ID: "v-2", Source: "toolsentry", Key: "etl",
				CompositionVerdict: &CompositionVerdict{
					Verdict: guards.CompositionDegraded, Directive: "HALT: Composed quality 77.38% < requirement 95.00%.", ManifestDigest: digest,
					CompositionID: "etl", ComposedQuality: 0.7737809374999999, ComposedQualityLower: ptr(0.7), ComposedQualityUpper: ptr(0.8), Confidence: workflow.ConfidenceConfirmed,
					FailureModes: json.RawMessage(`[{"kind":"accuracy_multiplication"}]`),
					GuardVersion: "0.1.0", InputEventID: "e-9", InputSubject: "toolsentry.telemetry.workflow.etl", InputSequence: 3,
				}},
		},
		{
			name:    "extensions, null attributes, JSON media type with parameters",
			subject: invSubject,
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.invocation.v1","time":"2026-11-29T10:00:00Z","subject":null,"dataschema":"https://github.com/toolsentry/toolsentry/schemas/tool.invocation.v1.json","datacontenttype":"application/vnd.toolsentry+json; charset=utf-8","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","sampled":true,"priority":-7,"unset":null`,
				`{"agent_id":"a","tool_id":"crm.lookup"}`),
			want: with(KindInvocation, "crm.lookup", func(e *Event) {
				e.DataSchema = "https://github.com/toolsentry/toolsentry/schemas/tool.invocation.v1.json"
				e.Extensions = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "sampled": "true", "priority": "-7"}
				e.Invocation = &Invocation{AgentID: "a", ToolID: "crm.lookup"}
			}),
		},
		{
			name:    "data_base64 holding JSON",
			subject: invSubject,
			body:    []byte(`{"specversion":"1.0",` + invAttrs + `,"data_base64":"eyJhZ2VudF9pZCI6ImEiLCJ0b29sX2lkIjoiY3JtLmxvb2t1cCIsImFyZ3VtZW50cyI6eyJrIjoidiJ9fQ=="}`),
			want: with(KindInvocation, "crm.lookup", func(e *Event) {
				e.Invocation = &Invocation{AgentID: "a", ToolID: "crm.lookup", ArgumentTypes: FieldTypes{"k": toolschema.TypeString}}
			}),
		},
		{
			name:    "structured with its content type, non-ASCII key",
			subject: "toolsentry.telemetry.contract.caf=C3=A9=20bar",
			header:  map[string][]string{"Content-Type": {"application/cloudevents+json; charset=utf-8"}, "Nats-Msg-Id": {"e-1"}},
			body: structured(`"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.contract.v1","time":"2026-11-29T10:00:00Z"`,
				`{"tool_id":"café bar","accuracy":1,"determinism":"NON_DETERMINISTIC"}`),
			want: with(KindContract, "café bar", func(e *Event) {
				e.Contract = &Contract{ToolID: "café bar", Accuracy: 1, Determinism: "NON_DETERMINISTIC"}
			}),
		},
	}, observedDecodeCases(t)...)
}

const workflowData = `{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"tools":{"a":{"accuracy":0.95,"determinism":"DETERMINISTIC","output_schema_hash":"h"},"b":{"determinism":"DETERMINISTIC","observed":{"calls":100,"successes":97}}},"structure":{"chain":["a","b"]}}`

func TestDecode(t *testing.T) {
	for _, tc := range decodeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.subject, tc.header, tc.body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := diffEvent(tc.want, got); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeWorkflowRawIsCanonical(t *testing.T) {
	body := structured(`"id":"e-1","source":"s","type":"io.toolsentry.workflow.declared.v1"`,
		`{"structure":"a","composition_id":"w","introduction_of_nondeterminism_acceptable":true,"policy":{"require_schema_compatibility":true},"workflow_quality_requirement":1.0}`)
	ev, err := Decode("toolsentry.telemetry.workflow.w", nil, body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"composition_id":"w","introduction_of_nondeterminism_acceptable":true,"policy":{"require_schema_compatibility":true},"structure":"a","workflow_quality_requirement":1.0}`
	if got := string(ev.Workflow.Raw); got != want {
		t.Errorf("Raw = %s, want %s (keys sorted, numbers as written)", got, want)
	}
}

func TestDecodeCustomPrefix(t *testing.T) {
	n, err := NewNames("acme-ts")
	if err != nil {
		t.Fatal(err)
	}
	body := structured(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup"}`)
	ev, err := n.Decode("acme-ts.telemetry.invocation.crm=2Elookup", nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Key != "crm.lookup" {
		t.Errorf("Key = %q", ev.Key)
	}
	if _, err := n.Decode(invSubject, nil, body); !errors.Is(err, ErrBadSubject) {
		t.Errorf("default prefix under acme-ts: got %v, want ErrBadSubject", err)
	}
}

// TestDecodeBinary decodes binary-mode messages: attributes in ce- headers
// (names in any case, values percent-encoded or quoted), data in the body.
func TestDecodeBinary(t *testing.T) {
	data := []byte(`{"agent_id":"a","tool_id":"crm.lookup","arguments":{"q":"x"}}`)
	tests := []struct {
		name   string
		header map[string][]string
		want   func(*Event)
	}{
		{
			name: "lower-case names, plain values",
			header: map[string][]string{
				"ce-specversion": {"1.0"}, "ce-id": {"e-1"}, "ce-source": {"agents/billing"},
				"ce-type": {"io.toolsentry.tool.invocation.v1"}, "ce-time": {"2026-11-29T10:00:00Z"},
			},
			want: func(*Event) {},
		},
		{
			name: "names in any case, percent-encoded and quoted values, Content-Type",
			header: map[string][]string{
				"Ce-Specversion": {"1.0"}, "CE-ID": {"e-1"}, "ce-Source": {"agents%2fbilling"},
				"Ce-Type": {"io.toolsentry.tool.invocation.v1"}, "ce-time": {"2026-11-29T10:00:00Z"},
				"Ce-Subject": {"crm%2Elookup"}, "ce-comment": {`"caf%C3%A9 \"ok\""`}, "ce-euro": {"Euro%20%E2%82%AC%20%F0%9F%98%80"},
				"Content-Type": {"application/json; charset=utf-8"}, "Nats-Msg-Id": {"e-1"},
			},
			want: func(e *Event) {
				e.Subject = "crm.lookup"
				e.Extensions = map[string]string{"comment": `café "ok"`, "euro": "Euro € 😀"}
			},
		},
		{
			name: "ce-datacontenttype",
			header: map[string][]string{
				"ce-specversion": {"1.0"}, "ce-id": {"e-1"}, "ce-source": {"agents/billing"},
				"ce-type": {"io.toolsentry.tool.invocation.v1"}, "ce-time": {"2026-11-29T10:00:00Z"},
				"ce-datacontenttype": {"application/json"},
			},
			want: func(*Event) {},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := Event{Kind: KindInvocation, Type: TypeInvocation, ID: "e-1", Source: "agents/billing", Time: mustTime(t, "2026-11-29T10:00:00Z"), Key: "crm.lookup",
				Invocation: &Invocation{AgentID: "a", ToolID: "crm.lookup", ArgumentTypes: FieldTypes{"q": toolschema.TypeString}}}
			tc.want(&want)
			got, err := Decode(invSubject, tc.header, data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := diffEvent(want, got); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeBinaryEqualsStructured: the same event in both modes decodes
// to the same Event.
func TestDecodeBinaryEqualsStructured(t *testing.T) {
	for _, tc := range decodeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(tc.body, &obj); err != nil {
				t.Fatal(err)
			}
			header := map[string][]string{}
			var data []byte
			for k, v := range obj {
				switch k {
				case "data":
					data = v
				case "data_base64":
					var s string
					if err := json.Unmarshal(v, &s); err != nil {
						t.Fatal(err)
					}
					data = mustBase64(t, s)
				default:
					var val any
					if err := json.Unmarshal(v, &val); err != nil {
						t.Fatal(err)
					}
					if val == nil {
						continue
					}
					header["ce-"+k] = []string{percentEncode(fmt.Sprint(val))}
				}
			}
			got, err := Decode(tc.subject, header, data)
			if err != nil {
				t.Fatalf("Decode binary: %v", err)
			}
			if diff := diffEvent(tc.want, got); diff != "" {
				t.Errorf("binary (-want +got):\n%s", diff)
			}
		})
	}
}

// percentEncode encodes a header value as the NATS binding says: space,
// double quote, percent and everything outside printable ASCII.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '"' || c == '%' || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

type errorCase struct {
	name    string
	subject string
	header  map[string][]string
	body    string
	want    error
	msg     string // a part of the message: the attribute, header or field at fault
}

func binHeader(overrides ...string) map[string][]string {
	h := map[string][]string{
		"ce-specversion": {"1.0"}, "ce-id": {"e-1"}, "ce-source": {"agents/billing"}, "ce-type": {TypeInvocation},
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		if overrides[i+1] == "<delete>" {
			delete(h, overrides[i])
			continue
		}
		h[overrides[i]] = []string{overrides[i+1]}
	}
	return h
}

const okData = `{"agent_id":"a","tool_id":"crm.lookup"}`

func errorCases() []errorCase {
	s := func(attrs, data string) string { return string(structured(attrs, data)) }
	deep := strings.Repeat(`{"a":`, MaxArgumentDepth+1) + "1" + strings.Repeat("}", MaxArgumentDepth+1)
	var wide strings.Builder
	wide.WriteString("{")
	for i := 0; i <= MaxArgumentFields; i++ {
		if i > 0 {
			wide.WriteString(",")
		}
		fmt.Fprintf(&wide, `"f%d":1`, i)
	}
	wide.WriteString("}")
	return append([]errorCase{
		// Not a CloudEvent.
		{"body not JSON", invSubject, nil, `hello`, ErrNotCloudEvent, "not JSON"},
		{"empty body", invSubject, nil, ``, ErrNotCloudEvent, "not JSON"},
		{"JSON array", invSubject, nil, `[1]`, ErrNotCloudEvent, "array"},
		{"object without specversion", invSubject, nil, `{"agent_id":"a","tool_id":"crm.lookup"}`, ErrNotCloudEvent, "specversion"},
		{"trailing data", invSubject, nil, s(invAttrs, okData) + `{}`, ErrNotCloudEvent, "after the JSON value"},
		{"invalid UTF-8", invSubject, nil, "{\"specversion\":\"1.0\",\"id\":\"\xff\"}", ErrNotCloudEvent, "UTF-8"},

		// Subjects.
		{"another prefix", "other.telemetry.invocation.crm", nil, s(invAttrs, okData), ErrBadSubject, `"toolsentry."`},
		{"unknown kind", "toolsentry.telemetry.call.crm", nil, s(invAttrs, okData), ErrBadSubject, `"call"`},
		{"key in two tokens", "toolsentry.telemetry.invocation.crm.lookup", nil, s(invAttrs, okData), ErrBadSubject, "<kind>.<key>"},
		{"non-canonical key token", "toolsentry.telemetry.invocation.crm=2elookup", nil, s(invAttrs, okData), ErrBadSubject, "upper-case hex"},
		{"dead-letter subject", "toolsentry.dlq.schema_invalid", nil, s(invAttrs, okData), ErrBadSubject, HeaderOriginalSubject},
		{"verdict token in upper case", "toolsentry.verdicts.schema.NO_BASELINE.t", nil, s(invAttrs, okData), ErrBadSubject, "verdict token"},

		// Structured mode: the spec.
		{"missing id", invSubject, nil, s(`"source":"s","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "id missing"},
		{"missing source", invSubject, nil, s(`"id":"e","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "source missing"},
		{"missing type", invSubject, nil, s(`"id":"e","source":"s"`, okData), ErrSpecViolation, "type missing"},
		{"null id", invSubject, nil, s(`"id":null,"source":"s","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "id missing"},
		{"empty id", invSubject, nil, s(`"id":"","source":"s","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "id is empty"},
		{"empty source", invSubject, nil, s(`"id":"e","source":"","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "source is empty"},
		{"empty type", invSubject, nil, s(`"id":"e","source":"s","type":""`, okData), ErrSpecViolation, "type is empty"},
		{"empty subject", invSubject, nil, s(invAttrs+`,"subject":""`, okData), ErrSpecViolation, "subject is empty"},
		{"specversion 0.3", invSubject, nil, `{"specversion":"0.3",` + invAttrs + `,"data":` + okData + `}`, ErrSpecViolation, `specversion "0.3"`},
		{"specversion a number", invSubject, nil, `{"specversion":1.0,` + invAttrs + `,"data":` + okData + `}`, ErrSpecViolation, "specversion: want a string"},
		{"id a boolean", invSubject, nil, s(`"id":true,"source":"s","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "id: want a string"},
		{"attribute name in upper case", invSubject, nil, s(invAttrs+`,"traceParent":"x"`, okData), ErrSpecViolation, `"traceParent"`},
		{"attribute name with underscore", invSubject, nil, s(invAttrs+`,"trace_parent":"x"`, okData), ErrSpecViolation, `"trace_parent"`},
		{"both data and data_base64", invSubject, nil, `{"specversion":"1.0",` + invAttrs + `,"data":` + okData + `,"data_base64":"e30="}`, ErrSpecViolation, "both data and data_base64"},
		{"data_base64 not base64", invSubject, nil, `{"specversion":"1.0",` + invAttrs + `,"data_base64":"!!"}`, ErrSpecViolation, "data_base64"},
		{"data_base64 not a string", invSubject, nil, `{"specversion":"1.0",` + invAttrs + `,"data_base64":1}`, ErrSpecViolation, "data_base64"},
		{"time not RFC 3339", invSubject, nil, s(`"id":"e","source":"s","type":"`+TypeInvocation+`","time":"2026-11-29 10:00:00"`, okData), ErrSpecViolation, "attribute time"},
		{"time with month 13", invSubject, nil, s(`"id":"e","source":"s","type":"`+TypeInvocation+`","time":"2026-13-01T00:00:00Z"`, okData), ErrSpecViolation, "attribute time"},
		{"time before year 0 in UTC", invSubject, nil, s(`"id":"e","source":"s","type":"`+TypeInvocation+`","time":"0000-01-01T00:00:00+01:00"`, okData), ErrSpecViolation, "year out of range"},
		{"datacontenttype not JSON", invSubject, nil, s(invAttrs+`,"datacontenttype":"text/plain"`, okData), ErrSpecViolation, "datacontenttype"},
		{"datacontenttype malformed", invSubject, nil, s(invAttrs+`,"datacontenttype":"json"`, okData), ErrSpecViolation, "datacontenttype"},
		{"source not a URI-reference", invSubject, nil, s(`"id":"e","source":"%zz","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "source"},
		{"dataschema relative", invSubject, nil, s(invAttrs+`,"dataschema":"schemas/x.json"`, okData), ErrSpecViolation, "dataschema"},
		{"control character in id", invSubject, nil, s(`"id":"e\u0001","source":"s","type":"`+TypeInvocation+`"`, okData), ErrSpecViolation, "attribute id: control"},
		{"extension an object", invSubject, nil, s(invAttrs+`,"ext":{}`, okData), ErrSpecViolation, "attribute ext"},
		{"extension a fraction", invSubject, nil, s(invAttrs+`,"ext":1.5`, okData), ErrSpecViolation, "attribute ext"},
		{"extension beyond int32", invSubject, nil, s(invAttrs+`,"ext":2147483648`, okData), ErrSpecViolation, "attribute ext"},
		{"repeated attribute", invSubject, nil, `{"specversion":"1.0","id":"a","id":"b","source":"s","type":"` + TypeInvocation + `","data":` + okData + `}`, ErrSpecViolation, "/id repeated"},
		{"declared structured, not JSON", invSubject, map[string][]string{"content-type": {"application/cloudevents+json"}}, `nope`, ErrSpecViolation, "not JSON"},
		{"declared structured, no specversion", invSubject, map[string][]string{"content-type": {"application/cloudevents+json"}}, `{"id":"e"}`, ErrSpecViolation, "specversion missing"},
		{"batch format", invSubject, map[string][]string{"Content-Type": {"application/cloudevents-batch+json"}}, `[]`, ErrSpecViolation, "Content-Type"},
		{"two Content-Type headers", invSubject, map[string][]string{"Content-Type": {"application/json", "text/plain"}, "ce-id": {"e"}}, okData, ErrSpecViolation, "Content-Type given 2 times"},

		// Binary mode: the spec.
		{"binary without specversion", invSubject, binHeader("ce-specversion", "<delete>"), okData, ErrSpecViolation, "specversion missing"},
		{"binary specversion 0.3", invSubject, binHeader("ce-specversion", "0.3"), okData, ErrSpecViolation, `specversion "0.3"`},
		{"binary without id", invSubject, binHeader("ce-id", "<delete>"), okData, ErrSpecViolation, "id missing"},
		{"binary without source", invSubject, binHeader("ce-source", "<delete>"), okData, ErrSpecViolation, "source missing"},
		{"binary without type", invSubject, binHeader("ce-type", "<delete>"), okData, ErrSpecViolation, "type missing"},
		{"binary empty id", invSubject, binHeader("ce-id", ""), okData, ErrSpecViolation, "id is empty"},
		{"binary bad attribute name", invSubject, binHeader("ce-trace_parent", "x"), okData, ErrSpecViolation, `"trace_parent"`},
		{"binary ce-data header", invSubject, binHeader("ce-data", "x"), okData, ErrSpecViolation, "data is not an attribute"},
		{"binary bad percent-encoding", invSubject, binHeader("ce-source", "a%zzb"), okData, ErrSpecViolation, `"ce-source"`},
		{"binary truncated percent-encoding", invSubject, binHeader("ce-source", "a%E"), okData, ErrSpecViolation, "truncated"},
		{"binary overlong UTF-8", invSubject, binHeader("ce-source", "a%C0%A0"), okData, ErrSpecViolation, "not UTF-8"},
		{"binary unterminated quote", invSubject, binHeader("ce-source", `"abc`), okData, ErrSpecViolation, "quoted"},
		{"binary attribute twice", invSubject, func() map[string][]string { h := binHeader(); h["Ce-Id"] = []string{"e-2"}; return h }(), okData, ErrSpecViolation, "attribute id given more than once"},
		{"binary attribute with two values", invSubject, func() map[string][]string { h := binHeader(); h["ce-id"] = []string{"a", "b"}; return h }(), okData, ErrSpecViolation, "attribute id given more than once"},
		{"binary content types disagree", invSubject, binHeader("ce-datacontenttype", "application/json", "Content-Type", "application/problem+json"), okData, ErrSpecViolation, "disagree"},
		{"binary content type not JSON", invSubject, binHeader("Content-Type", "application/xml"), `<x/>`, ErrSpecViolation, "datacontenttype"},
		{"binary control character", invSubject, binHeader("ce-source", "a%0Ab"), okData, ErrSpecViolation, "attribute source: control"},

		// Types.
		{"unknown type", invSubject, nil, s(`"id":"e","source":"s","type":"com.example.thing"`, okData), ErrUnknownType, `"com.example.thing"`},
		{"unknown version", invSubject, nil, s(`"id":"e","source":"s","type":"io.toolsentry.tool.invocation.v2"`, okData), ErrUnknownType, "v2"},
		{"binary unknown type", invSubject, binHeader("ce-type", "x"), okData, ErrUnknownType, `"x"`},

		// Subject mismatches.
		{"invocation on a schema subject", "toolsentry.telemetry.schema.crm=2Elookup", nil, s(invAttrs, okData), ErrSubjectMismatch, "does not belong"},
		{"verdict type on a telemetry subject", invSubject, nil, s(`"id":"e","source":"s","type":"`+TypeSchemaVerdict+`"`, okData), ErrSubjectMismatch, "does not belong"},
		{"tool_id not the key", "toolsentry.telemetry.invocation.billing", nil, s(invAttrs, okData), ErrSubjectMismatch, `"crm.lookup" is not the subject's key "billing"`},
		{"subject attribute not the key", invSubject, nil, s(invAttrs+`,"subject":"other"`, okData), ErrSubjectMismatch, `attribute subject "other"`},
		{"tools list not on the server's subject", "toolsentry.telemetry.schema.lookup", nil, s(`"id":"e","source":"s","type":"`+TypeSchemaObserved+`"`, `{"server":"crm","tools":{"tools":[]}}`), ErrSubjectMismatch, `"crm"`},
		{"verdict on another verdict's subject", "toolsentry.verdicts.schema.schema_match.t", nil,
			s(`"id":"v","source":"toolsentry","type":"`+TypeSchemaVerdict+`"`, `{"verdict":"NO_BASELINE","directive":"HALT","manifest_digest":"`+digest+`","tool_id":"t","version":"","baseline_fingerprint":"","current_fingerprint":"","changes":null,"affected":null,"migration":null,"guard_version":"1","input_event_id":"e","input_subject":"x","input_sequence":1}`),
			ErrSubjectMismatch, `verdict "NO_BASELINE"`},

		// Data.
		{"no data", invSubject, nil, `{"specversion":"1.0",` + invAttrs + `}`, ErrSchemaInvalid, "no data"},
		{"binary empty body", invSubject, binHeader(), ``, ErrSchemaInvalid, "no data"},
		{"data null", invSubject, nil, s(invAttrs, `null`), ErrSchemaInvalid, "at /: got null, want object"},
		{"data an array", invSubject, nil, s(invAttrs, `[]`), ErrSchemaInvalid, "at /: got array"},
		{"missing agent_id", invSubject, nil, s(invAttrs, `{"tool_id":"crm.lookup"}`), ErrSchemaInvalid, "missing property 'agent_id'"},
		{"bad outcome", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","outcome":{"status":"meh"}}`), ErrSchemaInvalid, "at /outcome/status"},
		{"misspelt field", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","argumens":{}}`), ErrSchemaInvalid, "'argumens' not allowed"},
		{"repeated member in data", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","tool_id":"x"}`), ErrSchemaInvalid, "/data/tool_id repeated"},
		{"repeated member in arguments", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","arguments":{"o":{"k":1,"k":2}}}`), ErrSchemaInvalid, "/data/arguments/o/k repeated"},
		{"arguments too deep", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","arguments":`+deep+`}`), ErrSchemaInvalid, "nested deeper than"},
		{"arguments too wide", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","arguments":`+wide.String()+`}`), ErrSchemaInvalid, "more than 1000 field paths"},
		{"arguments not JSON inside", invSubject, nil, `{"specversion":"1.0",` + invAttrs + `,"data":{"agent_id":"a","tool_id":"crm.lookup","arguments":{"a":tru}}}`, ErrNotCloudEvent, "invalid literal"},
		{"latency out of float range", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","latency_ms":1e400}`), ErrSchemaInvalid, "latency_ms"},
		{"number too long", invSubject, nil, s(invAttrs, `{"agent_id":"a","tool_id":"crm.lookup","latency_ms":`+strings.Repeat("9", 100)+`}`), ErrSchemaInvalid, "/data/latency_ms: a number of 100 characters"},
		{"repeated tool name", "toolsentry.telemetry.schema.crm", nil, s(`"id":"e","source":"s","type":"`+TypeSchemaObserved+`"`, `{"server":"crm","tools":{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","inputSchema":{"type":"object"}}]}}`), ErrSchemaInvalid, "tools.tools[1]"},
		{"binary data not JSON", invSubject, binHeader(), `{"agent_id":`, ErrSchemaInvalid, "data is not JSON"},
		{"binary data with repeated member", invSubject, binHeader(), `{"agent_id":"a","agent_id":"b","tool_id":"crm.lookup"}`, ErrSchemaInvalid, "/agent_id repeated"},
		{"workflow with an empty chain", "toolsentry.telemetry.workflow.w", nil, s(`"id":"e","source":"s","type":"`+TypeWorkflow+`"`, `{"composition_id":"w","workflow_quality_requirement":1,"introduction_of_nondeterminism_acceptable":false,"structure":{"chain":[]}}`), ErrSchemaInvalid, "at /structure/chain"},
		{"contract accuracy above 1", "toolsentry.telemetry.contract.t", nil, s(`"id":"e","source":"s","type":"`+TypeContract+`"`, `{"tool_id":"t","accuracy":1.01,"determinism":"DETERMINISTIC"}`), ErrSchemaInvalid, "at /accuracy"},
	}, observedErrorCases()...)
}

// TestDecodeErrors: every rejection wraps its sentinel, only that one, and
// names what is at fault.
func TestDecodeErrors(t *testing.T) {
	sentinels := []error{ErrNotCloudEvent, ErrSpecViolation, ErrUnknownType, ErrSchemaInvalid, ErrSubjectMismatch, ErrBadSubject}
	for _, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(tc.subject, tc.header, []byte(tc.body))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", ev)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q does not wrap %q", err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("error %q also wraps %q", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
			if diff := diffEvent(Event{}, ev); diff != "" {
				t.Errorf("a failed Decode returned a partial event:\n%s", diff)
			}
		})
	}
}

// TestDecodeStoredSubject decodes every case again under its stored
// subject (the partition token the telemetry stream's transform inserts):
// the same event.
func TestDecodeStoredSubject(t *testing.T) {
	n := Names{}
	for _, tc := range decodeCases(t) {
		addr, err := n.ParseSubject(tc.subject)
		if err != nil || addr.Class != ClassTelemetry {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			stored, err := n.StoredTelemetry(addr.Kind, 3, addr.Key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(stored, tc.header, tc.body)
			if err != nil {
				t.Fatalf("Decode(%q): %v", stored, err)
			}
			if diff := diffEvent(tc.want, got); diff != "" {
				t.Errorf("Decode(%q) (-want +got):\n%s", stored, diff)
			}
		})
	}
}
