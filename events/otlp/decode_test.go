package otlp

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/toolsentry/toolsentry/events"
)

// otlpJSON is an OTLP/JSON export as the specification writes it: hex ids,
// enums as integers, 64-bit integers as strings, an unknown field.
const otlpJSON = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
 "scopeSpans":[{"scope":{"name":"agent-fw"},"spans":[
  {"traceId":"` + traceHex + `","spanId":"0000000000000001","name":"invoke_agent bot","kind":1,
   "startTimeUnixNano":"1800000000000000000","endTimeUnixNano":"1800000000100000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},{"key":"gen_ai.agent.name","value":{"stringValue":"bot"}}]},
  {"traceId":"` + traceHex + `","spanId":"0000000000000002","parentSpanId":"0000000000000001","name":"execute_tool a","kind":1,
   "startTimeUnixNano":"1800000000010000000","endTimeUnixNano":1800000000020000000,"futureField":{"x":1},
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"a"}},
     {"key":"gen_ai.tool.call.arguments","value":{"kvlistValue":{"values":[{"key":"n","value":{"intValue":"3"}},{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"x"}]}}}]}}}],
   "status":{"code":2,"message":"boom"}}]}]}]}`

func TestParseJSON(t *testing.T) {
	req, err := ParseJSON([]byte(otlpJSON))
	if err != nil {
		t.Fatal(err)
	}
	got := summary(t, Translate(req, Options{}))
	want := []string{
		"invocation " + spanID(2) + " tool=a agent=bot status=error args=n,tags,tags[]",
		"observed " + spanID(1) + ` composition=bot agent=bot success=false structure="a"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The same export in protobuf translates to the same messages.
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseProtobuf(b)
	if err != nil {
		t.Fatal(err)
	}
	if g := summary(t, Translate(again, Options{})); strings.Join(g, "\n") != strings.Join(got, "\n") {
		t.Errorf("protobuf: %v", g)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, msg string }{
		{"not JSON", `{"resourceSpans":`, "not JSON"},
		{"two values", `{} {}`, "more than one JSON value"},
		{"an array", `[]`, "not an object"},
		{"a span id that is not hex", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"01"}]}]}]}`, `span traceId "zz": not hex`},
		{"a wrong type", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":7}]}]}]}`, "OTLP/JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJSON([]byte(tc.body))
			if !errors.Is(err, ErrNotOTLP) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want ErrNotOTLP naming %q", err, tc.msg)
			}
		})
	}
	if _, err := ParseProtobuf([]byte("\xff\xff\xff")); !errors.Is(err, ErrNotOTLP) {
		t.Errorf("protobuf: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	// The collector's file exporter: one export per line; this trace is
	// split across two lines and is translated whole.
	lines := strings.Split(compactJSON(t, otlpJSON), `},{"traceId"`)
	if len(lines) != 2 {
		t.Fatal("setup")
	}
	first := lines[0] + "}]}]}]}"
	second := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},"scopeSpans":[{"spans":[{"traceId"` + lines[1]
	req, format, err := ReadFile([]byte(first + "\n" + second + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if format != FormatOTLPJSON {
		t.Errorf("format %q", format)
	}
	if got := summary(t, Translate(req, Options{})); len(got) != 2 || !strings.HasPrefix(got[1], "observed") {
		t.Errorf("a trace split across lines: %v", got)
	}
	if req, _, err := ReadFile(nil); err != nil || len(req.GetResourceSpans()) != 0 {
		t.Errorf("empty file: %v", err)
	}

	stdoutSpan := `{"Name":"execute_tool a","SpanContext":{"TraceID":"` + traceHex + `","SpanID":"0000000000000002"},"Parent":{"TraceID":"00000000000000000000000000000000","SpanID":"0000000000000000"},"SpanKind":1,"StartTime":"2026-11-29T10:00:00Z","EndTime":"2026-11-29T10:00:01Z","Attributes":[{"Key":"gen_ai.operation.name","Value":{"Type":"STRING","Value":"execute_tool"}},{"Key":"gen_ai.tool.name","Value":{"Type":"STRING","Value":"a"}}],"Status":{"Code":"Unset"},"Resource":[]}`
	for _, tc := range []struct{ name, body, msg string }{
		{"neither format", "{\"a\":1}\n", "line 1: neither an OTLP/JSON ExportTraceServiceRequest"},
		{"mixed formats", first + "\n" + stdoutSpan + "\n", "line 2: go-stdouttrace after otlp-json"},
		{"a broken line", first + "\n{\"resourceSpans\":[\n", "line 2: not JSON"},
		{"a scalar", "7", "line 1: a JSON value that is not an object"},
		{"an unknown attribute type", strings.Replace(stdoutSpan, `"Type":"STRING","Value":"a"`, `"Type":"COMPLEX","Value":"a"`, 1), `attribute "gen_ai.tool.name": unknown value type "COMPLEX"`},
		{"a bad status", strings.Replace(stdoutSpan, `"Unset"`, `"Meh"`, 1), `Status.Code "Meh"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadFile([]byte(tc.body))
			if !errors.Is(err, ErrNotOTLP) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want ErrNotOTLP naming %q", err, tc.msg)
			}
		})
	}
	req, format, err = ReadFile([]byte(stdoutSpan))
	if err != nil || format != FormatGoStdout {
		t.Fatalf("%v %q", err, format)
	}
	if got := summary(t, Translate(req, Options{})); len(got) != 1 || got[0] != "invocation "+spanID(2)+" tool=a agent="+unknownService+" status=ok" {
		t.Errorf("stdout span: %v", got)
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	return strings.NewReplacer("\n", "", " ", "").Replace(s)
}

// FuzzReadFile: any file either fails with ErrNotOTLP or translates into
// messages that decode, with every rejection an ErrBadSpan.
func FuzzReadFile(f *testing.F) {
	f.Add([]byte(otlpJSON))
	f.Add([]byte(`{"Name":"x","SpanContext":{"TraceID":"` + traceHex + `","SpanID":"0000000000000002"},"Attributes":[{"Key":"gen_ai.operation.name","Value":{"Type":"STRING","Value":"execute_tool"}},{"Key":"gen_ai.tool.call.arguments","Value":{"Type":"MAP","Value":[{"Key":"a","Value":{"Type":"INT64SLICE","Value":[1]}}]}}]}`))
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"` + traceHex + `","spanId":"0000000000000003","attributes":[{"key":"gen_ai.tool.definitions","value":{"stringValue":"[{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}}]"}}]}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, _, err := ReadFile(data)
		if err != nil {
			if !errors.Is(err, ErrNotOTLP) {
				t.Fatalf("an error that is not ErrNotOTLP: %v", err)
			}
			return
		}
		res := Translate(req, Options{})
		for _, m := range res.Messages {
			if _, err := events.Decode(m.Subject, m.Header, m.Data); err != nil {
				t.Fatalf("a message that does not decode: %v", err)
			}
		}
		for _, r := range res.Rejected {
			if !errors.Is(r, ErrBadSpan) {
				t.Fatalf("a rejection that is not ErrBadSpan: %v", r)
			}
		}
	})
}
