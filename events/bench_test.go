package events

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/schemas"
)

// A typical invocation: a dozen fields, small nested arguments.
const benchData = `{"agent_id":"agent-7","tool_id":"crm.lookup","tool_version":"2.1.0","schema_fingerprint":"sha256:9f2c81d0e4",` +
	`"arguments":{"user_id":"u-123","options":{"limit":10,"fields":["name","email"],"include_deleted":false}},` +
	`"outcome":{"status":"ok","correct":true},"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","latency_ms":41.5}`

var benchInvocation = structured(invAttrs, benchData)

// BenchmarkDecode measures Decode of a typical invocation, CloudEvents
// checks and JSON Schema validation included, in both content modes; the
// same without the fast path for invocations (path=generic, the path of
// the other kinds); and, as the yardstick on a given machine, a plain
// encoding/json Unmarshal of the same structured body into an any (no
// checks at all).
func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name   string
		header map[string][]string
		body   []byte
		decode func(header map[string][]string, body []byte) error
	}{
		{"mode=structured", map[string][]string{"Content-Type": {ContentTypeStructured}, "Nats-Msg-Id": {"e-1"}}, benchInvocation, decodeInvocation},
		{"mode=binary", binHeader("ce-time", "2026-11-29T10:00:00Z", "Nats-Msg-Id", "e-1"), []byte(benchData), decodeInvocation},
		{"mode=structured,path=generic", map[string][]string{"Content-Type": {ContentTypeStructured}, "Nats-Msg-Id": {"e-1"}}, benchInvocation, func(header map[string][]string, body []byte) error {
			_, err := Names{}.decode(invSubject, header, body, false)
			return err
		}},
		{"baseline=encoding-json", nil, benchInvocation, func(_ map[string][]string, body []byte) error {
			var v any
			return json.Unmarshal(body, &v)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := bc.decode(bc.header, bc.body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.decode(bc.header, bc.body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func decodeInvocation(header map[string][]string, body []byte) error {
	_, err := Decode(invSubject, header, body)
	return err
}

// BenchmarkDecodeStages splits Decode of the structured invocation into its
// steps, to see where the time goes: on the fast path, reading the body
// (attributes, and the data checked against its schema, in one pass) and
// checking the attributes; on the generic path (path=generic, the other
// kinds'), parsing the body into a tree, checking the attributes,
// validating the data and reading the payload out of the tree.
func BenchmarkDecodeStages(b *testing.B) {
	env, err := readEnvelope(nil, benchInvocation, KindUnknown)
	if err != nil {
		b.Fatal(err)
	}
	fastEnv, ok := readStructuredFast(benchInvocation, KindInvocation)
	if !ok {
		b.Fatal("the fast path does not read the benchmark's invocation")
	}
	for _, st := range []struct {
		name string
		run  func()
	}{
		{"step=subject", func() { _, _ = ParseSubject(invSubject) }},
		{"step=read", func() { _, _ = readStructuredFast(benchInvocation, KindInvocation) }},
		{"step=attributes", func() { _, _ = fastEnv.attributes() }},
		{"path=generic/step=parse", func() { _, _, _ = parseJSONSummarizing(benchInvocation, structuredArguments) }},
		{"path=generic/step=attributes", func() { _, _ = env.attributes() }},
		{"path=generic/step=validate", func() { _ = schemas.Validate(schemas.ToolInvocationV1, env.data) }},
		{"path=generic/step=payload", func() { ev := Event{Kind: KindInvocation}; _, _, _ = ev.setPayload(env.data, env.args) }},
	} {
		b.Run(st.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st.run()
			}
		})
	}
}

// BenchmarkEncodeVerdict measures what the processor does per verdict:
// NewSchemaVerdict, which checks a plain verdict field by field
// (check=fields); and, for comparison, the same verdict checked by decoding
// Encode's output (check=decode), as every other event is.
func BenchmarkEncodeVerdict(b *testing.B) {
	v := schemaVerdict()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	b.Run("check=fields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (Names{}).NewSchemaVerdict(v, at); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
	})
	b.Run("check=decode", func(b *testing.B) {
		ev := schemaVerdictEvent(v)
		ev.Time, ev.Extensions = at, nil
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (Names{}).encode(ev, false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
	})
}

// BenchmarkDecodeSchemaVerdict measures Decode of a SCHEMA_MATCH verdict
// as toolsentry writes it, the directives projector's every message, with
// and without the fast path.
func BenchmarkDecodeSchemaVerdict(b *testing.B) {
	msg := verdictFastCases(b)[0] // "match"
	for _, fast := range []bool{true, false} {
		name := "path=fast"
		if !fast {
			name = "path=generic"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(msg.body)))
			b.ReportAllocs()
			body := []byte(msg.body)
			for b.Loop() {
				if _, err := (Names{}).decode(msg.subject, msg.header, body, fast); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
		})
	}
}

// BenchmarkDecodeSchemaObserved measures Decode of a schema observation of
// one MCP tool with a few properties, as agents send them.
func BenchmarkDecodeSchemaObserved(b *testing.B) {
	const subject = "toolsentry.telemetry.schema.crm=2Elookup"
	body := structured(`"id":"e-1","source":"agents/billing","type":"`+TypeSchemaObserved+`","time":"2026-11-29T10:00:00Z"`,
		`{"tool_id":"crm.lookup","version":"2","server":"crm","tool":{"name":"lookup","description":"Find a CRM user.",`+
			`"inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer","default":10},"fields":{"type":"array","items":{"type":"string"}}},"required":["user_id"]},`+
			`"outputSchema":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"}}},"annotations":{"readOnlyHint":true}}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(subject, nil, body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
