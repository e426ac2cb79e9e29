package otlp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolsentry/toolsentry/events"
)

const traceHex = "4bf92f3577b34da6a3ce929d0e0e4736"

func kv(k string, v any) *commonpb.KeyValue {
	var a *commonpb.AnyValue
	switch x := v.(type) {
	case string:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case int:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case *commonpb.AnyValue:
		a = x
	default:
		panic(fmt.Sprintf("kv %T", v))
	}
	return &commonpb.KeyValue{Key: k, Value: a}
}

// sp builds a span of trace traceHex with span id n (and parent p, 0 for
// none), starting at start ms and ending at end ms.
func sp(n, p byte, name string, start, end uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
	tid, _ := hex.DecodeString(traceHex)
	s := &tracepb.Span{TraceId: tid, SpanId: []byte{0, 0, 0, 0, 0, 0, 0, n}, Name: name,
		StartTimeUnixNano: 1_800_000_000_000_000_000 + start*1e6, EndTimeUnixNano: 1_800_000_000_000_000_000 + end*1e6, Attributes: attrs}
	if p != 0 {
		s.ParentSpanId = []byte{0, 0, 0, 0, 0, 0, 0, p}
	}
	return s
}

func request(spans ...*tracepb.Span) *coltracepb.ExportTraceServiceRequest {
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "svc")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

func spanID(n byte) string { return fmt.Sprintf("%016x", n) }

var (
	opTool  = kv(AttrOperationName, OpExecuteTool)
	opAgent = kv(AttrOperationName, OpInvokeAgent)
	mcpCall = kv(AttrMCPMethodName, MCPToolsCall)
)

// summary is a translation in short: one line per message, then the
// rejected spans.
func summary(t *testing.T, res Result) []string {
	t.Helper()
	var out []string
	for _, m := range res.Messages {
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("a translated event does not decode: %v", err)
		}
		switch {
		case ev.Invocation != nil:
			i := ev.Invocation
			line := fmt.Sprintf("invocation %s tool=%s agent=%s status=%s", ev.ID[len(traceHex)+1:], i.ToolID, i.AgentID, i.Outcome.Status)
			if i.Outcome.ErrorType != "" {
				line += " error_type=" + i.Outcome.ErrorType
			}
			if i.Outcome.Correct != nil {
				line += fmt.Sprintf(" correct=%v", *i.Outcome.Correct)
			}
			if len(i.ArgumentTypes) > 0 {
				line += " args=" + strings.Join(i.ArgumentTypes.Paths(), ",")
			}
			if p := ev.Extensions[ExtensionProvider]; p != "" {
				line += " provider=" + p
			}
			out = append(out, line)
		case ev.WorkflowObserved != nil:
			w := ev.WorkflowObserved
			st, _ := w.Structure.MarshalJSON()
			out = append(out, fmt.Sprintf("observed %s composition=%s agent=%s success=%v structure=%s", ev.ID[len(traceHex)+1:], w.CompositionID, w.AgentID, w.Success, st))
		case ev.SchemaObserved != nil:
			out = append(out, fmt.Sprintf("schema %s version=%s input=%s", ev.SchemaObserved.ToolID, ev.SchemaObserved.Version, ev.SchemaObserved.Tool.InputSchema))
		}
	}
	for _, r := range res.Rejected {
		if !errors.Is(r, ErrBadSpan) {
			t.Errorf("a rejection that is not ErrBadSpan: %v", r)
		}
		out = append(out, "rejected "+r.Error())
	}
	return out
}

func TestTranslate(t *testing.T) {
	args := kv(AttrToolCallArgs, `{"user_id":"SECRET","tags":["SECRET"]}`)
	cases := []struct {
		name  string
		spans []*tracepb.Span
		want  []string
	}{
		{
			name:  "spans that are not GenAI tool spans are ignored",
			spans: []*tracepb.Span{sp(1, 0, "GET /", 0, 5), sp(2, 1, "chat gpt-4o", 1, 4, kv(AttrOperationName, "chat"))},
		},
		{
			name:  "a lone execute_tool span: agent from service.name, no run",
			spans: []*tracepb.Span{sp(1, 0, "execute_tool crm.lookup", 0, 5, opTool, kv(AttrToolName, "crm.lookup"), args)},
			want:  []string{"invocation " + spanID(1) + " tool=crm.lookup agent=svc status=ok args=tags,tags[],user_id"},
		},
		{
			name:  "tool name from the span name; the span's own agent name; gen_ai.system",
			spans: []*tracepb.Span{sp(1, 0, "execute_tool kb.search", 0, 5, opTool, kv(AttrAgentName, "helper"), kv(AttrSystem, "anthropic"))},
			want:  []string{"invocation " + spanID(1) + " tool=kb.search agent=helper status=ok provider=anthropic"},
		},
		{
			name: "a chain under invoke_agent; provider of the agent span",
			spans: []*tracepb.Span{
				sp(1, 0, "invoke_agent bot", 0, 100, opAgent, kv(AttrAgentName, "bot"), kv(AttrProviderName, "openai"), kv(AttrSystem, "legacy")),
				sp(3, 1, "execute_tool b", 20, 30, opTool, kv(AttrToolName, "b")),
				sp(2, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a")),
			},
			want: []string{
				"invocation " + spanID(2) + " tool=a agent=bot status=ok provider=openai",
				"invocation " + spanID(3) + " tool=b agent=bot status=ok provider=openai",
				"observed " + spanID(1) + ` composition=bot agent=bot success=true structure={"chain":["a","b"]}`,
			},
		},
		{
			name: "overlapping calls run in parallel; a lone stage is not a chain",
			spans: []*tracepb.Span{
				sp(1, 0, "invoke_agent bot", 0, 100, opAgent, kv(AttrAgentName, "bot"), kv(AttrCompositionID, "support")),
				sp(2, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a")),
				sp(3, 1, "execute_tool b", 15, 40, opTool, kv(AttrToolName, "b")),
				sp(4, 1, "execute_tool c", 30, 35, opTool, kv(AttrToolName, "c")),
			},
			want: []string{
				"invocation " + spanID(2) + " tool=a agent=bot status=ok",
				"invocation " + spanID(3) + " tool=b agent=bot status=ok",
				"invocation " + spanID(4) + " tool=c agent=bot status=ok",
				"observed " + spanID(1) + ` composition=support agent=bot success=true structure={"parallel":{"mode":"all","of":["a","b","c"]}}`,
			},
		},
		{
			name: "errors: error.type, status ERROR, a failing agent",
			spans: []*tracepb.Span{
				withStatus(sp(1, 0, "invoke_agent bot", 0, 100, opAgent, kv(AttrAgentName, "bot")), tracepb.Status_STATUS_CODE_OK),
				sp(2, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a"), kv(AttrErrorType, "timeout")),
				withStatus(sp(3, 1, "execute_tool b", 20, 30, opTool, kv(AttrToolName, "b")), tracepb.Status_STATUS_CODE_ERROR),
				withStatus(sp(4, 0, "invoke_agent other", 0, 100, opAgent, kv(AttrAgentName, "other")), tracepb.Status_STATUS_CODE_ERROR),
				sp(5, 4, "execute_tool c", 10, 20, opTool, kv(AttrToolName, "c")),
			},
			want: []string{
				"invocation " + spanID(2) + " tool=a agent=bot status=error error_type=timeout",
				"invocation " + spanID(5) + " tool=c agent=other status=ok",
				"invocation " + spanID(3) + " tool=b agent=bot status=error",
				"observed " + spanID(1) + ` composition=bot agent=bot success=false structure={"chain":["a","b"]}`,
				"observed " + spanID(4) + ` composition=other agent=other success=false structure="c"`,
			},
		},
		{
			name: "evaluations: pass, fail, and labels that judge nothing",
			spans: []*tracepb.Span{
				withEvals(sp(1, 0, "execute_tool a", 0, 10, opTool, kv(AttrToolName, "a")), "PASSED"),
				withEvals(sp(2, 0, "execute_tool b", 10, 20, opTool, kv(AttrToolName, "b")), "correct", "incorrect"),
				withEvals(sp(3, 0, "execute_tool c", 20, 30, opTool, kv(AttrToolName, "c")), "relevant", ""),
				withFailedEval(sp(4, 0, "execute_tool d", 30, 40, opTool, kv(AttrToolName, "d"))),
			},
			want: []string{
				"invocation " + spanID(1) + " tool=a agent=svc status=ok correct=true",
				"invocation " + spanID(2) + " tool=b agent=svc status=ok correct=false",
				"invocation " + spanID(3) + " tool=c agent=svc status=ok",
				"invocation " + spanID(4) + " tool=d agent=svc status=ok",
			},
		},
		{
			name: "an MCP span under the framework span of the same tool is one call",
			spans: []*tracepb.Span{
				sp(1, 0, "execute_tool a", 0, 20, opTool, kv(AttrToolName, "a")),
				sp(2, 1, "tools/call a", 1, 19, mcpCall, kv(AttrToolName, "a"), args, kv(AttrErrorType, "tool_error")),
			},
			want: []string{"invocation " + spanID(1) + " tool=a agent=svc status=error error_type=tool_error args=tags,tags[],user_id"},
		},
		{
			name: "the same call id is one call; another tool's MCP child is not",
			spans: []*tracepb.Span{
				sp(1, 0, "execute_tool a", 0, 20, opTool, kv(AttrToolName, "a"), kv(AttrToolCallID, 77)),
				sp(2, 0, "tools/call a", 1, 19, mcpCall, kv(AttrToolCallID, "77")),
				sp(3, 1, "tools/call z", 2, 3, mcpCall, kv(AttrToolName, "z")),
			},
			want: []string{
				"invocation " + spanID(1) + " tool=a agent=svc status=ok",
				"invocation " + spanID(3) + " tool=z agent=svc status=ok",
			},
		},
		{
			name:  "an MCP span that names its server (mcp.server.name) calls the server's tool",
			spans: []*tracepb.Span{sp(1, 0, "tools/call get_issue", 0, 20, mcpCall, kv(AttrMCPServerName, "github"))},
			want:  []string{"invocation " + spanID(1) + " tool=github/get_issue agent=svc status=ok"},
		},
		{
			name: "the MCP partner's server names the call; two servers' get_issue are two tools",
			spans: []*tracepb.Span{
				sp(1, 0, "invoke_agent triage-bot", 0, 100, opAgent, kv(AttrAgentName, "triage-bot")),
				sp(2, 1, "execute_tool get_issue", 10, 20, opTool, kv(AttrToolName, "get_issue")),
				sp(3, 2, "tools/call get_issue", 11, 19, mcpCall, kv(AttrToolName, "get_issue"), kv(AttrMCPServerName, "github")),
				sp(4, 1, "execute_tool get_issue", 30, 40, opTool, kv(AttrToolName, "get_issue"), kv(AttrToolCallID, "c2")),
				sp(5, 0, "tools/call get_issue", 31, 39, mcpCall, kv(AttrToolCallID, "c2"), kv(AttrMCPServerName, "jira")),
			},
			want: []string{
				"invocation " + spanID(2) + " tool=github/get_issue agent=triage-bot status=ok",
				"invocation " + spanID(4) + " tool=jira/get_issue agent=triage-bot status=ok",
				"observed " + spanID(1) + ` composition=triage-bot agent=triage-bot success=true structure={"chain":["github/get_issue","jira/get_issue"]}`,
			},
		},
		{
			name:  "an MCP span alone is a call",
			spans: []*tracepb.Span{sp(1, 0, "tools/call a", 0, 20, mcpCall)},
			want:  []string{"invocation " + spanID(1) + " tool=a agent=svc status=ok"},
		},
		{
			name: "malformed tool spans are rejected, the rest translated",
			spans: []*tracepb.Span{
				sp(1, 0, "execute_tool", 0, 5, opTool),
				sp(2, 0, "execute_tool a", 5, 6, opTool, kv(AttrToolName, "a"), kv(AttrToolCallArgs, `"SECRET"`)),
				sp(3, 0, "execute_tool a", 6, 7, opTool, kv(AttrToolName, "a"), kv(AttrToolCallArgs, `{"a":SECRET}`)),
				{TraceId: []byte{1}, SpanId: []byte{1}, Name: "execute_tool a", Attributes: []*commonpb.KeyValue{opTool}},
				{TraceId: []byte{1}, SpanId: []byte{1}, Name: "not ours"},
				sp(4, 0, "execute_tool b", 8, 9, opTool, kv(AttrToolName, "b")),
			},
			want: []string{
				"invocation " + spanID(4) + " tool=b agent=svc status=ok",
				`rejected span "execute_tool a" (trace -, span -): trace id of 1 bytes, want 16`,
				`rejected span "execute_tool" (trace ` + traceHex + `, span ` + spanID(1) + `): a tool span without gen_ai.tool.name`,
				`rejected span "execute_tool a" (trace ` + traceHex + `, span ` + spanID(2) + `): gen_ai.tool.call.arguments: not a JSON object`,
				`rejected span "execute_tool a" (trace ` + traceHex + `, span ` + spanID(3) + `): gen_ai.tool.call.arguments: `,
			},
		},
		{
			name: "an invoke_agent span that names no composition",
			spans: []*tracepb.Span{
				sp(1, 0, "invoke_agent", 0, 100, opAgent),
				sp(2, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a")),
			},
			want: []string{
				"invocation " + spanID(2) + " tool=a agent=svc status=ok",
				`rejected span "invoke_agent" (trace ` + traceHex + `, span ` + spanID(1) + `): an invoke_agent span without gen_ai.agent.name or toolsentry.composition.id: no composition to observe`,
			},
		},
		{
			name: "tool definitions, as a JSON string and structured, repeated once",
			spans: []*tracepb.Span{
				sp(1, 0, "chat m", 0, 5, kv(AttrToolDefinitions, `[{"type":"function","name":"a","description":"d","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}},{"type":"function","name":"b","description":"no parameters"}]`)),
				sp(2, 0, "chat m", 5, 9, kv(AttrToolDefinitions, &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{
					{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{kv("type", "function"), kv("name", "b"), kv("description", "no parameters")}}}},
				}}}})),
				sp(3, 0, "chat m", 9, 10, kv(AttrToolDefinitions, `{"name":"a"}`)),
				sp(4, 0, "chat m", 10, 11, kv(AttrToolDefinitions, `[{"name":"a","parameters":{"type":"string"}}]`)),
			},
			want: []string{
				`schema a version=sha256:` + defVersion("a", `{"description":"d","inputSchema":{"properties":{"x":{"type":"integer"}},"type":"object"},"name":"a"}`) + ` input={"properties":{"x":{"type":"integer"}},"type":"object"}`,
				`schema b version=sha256:` + defVersion("b", `{"description":"no parameters","inputSchema":{"type":"object"},"name":"b"}`) + ` input={"type":"object"}`,
				`rejected span "chat m" (trace ` + traceHex + `, span ` + spanID(3) + `): gen_ai.tool.definitions: not a JSON array of tool definitions: json: cannot unmarshal object into Go value of type []otlp.toolDefinition`,
				`rejected span "chat m" (trace ` + traceHex + `, span ` + spanID(4) + `): gen_ai.tool.definitions[0] (a): bad event: schema_observed: data does not match its schema: tool.schema.observed.v1: at /tool/inputSchema/type: value must be 'object'`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := summary(t, Translate(request(tc.spans...), Options{}))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("line %d:\n got %s\nwant %s", i, got[i], tc.want[i])
				}
				if strings.Contains(got[i], "SECRET") {
					t.Errorf("line %d quotes a value: %s", i, got[i])
				}
			}
		})
	}
}

// defVersion is the version of a definition: the first 48 bits of the
// SHA-256 of its name and its MCP Tool in canonical JSON.
func defVersion(name, tool string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + tool))
	return hex.EncodeToString(sum[:6])
}

func withStatus(s *tracepb.Span, c tracepb.Status_StatusCode) *tracepb.Span {
	s.Status = &tracepb.Status{Code: c}
	return s
}

func withEvals(s *tracepb.Span, labels ...string) *tracepb.Span {
	for _, l := range labels {
		s.Events = append(s.Events, &tracepb.Span_Event{Name: EventEvaluationResult, Attributes: []*commonpb.KeyValue{kv(AttrEvaluationLabel, l)}})
	}
	return s
}

func TestTranslateTooManyCalls(t *testing.T) {
	spans := []*tracepb.Span{sp(1, 0, "invoke_agent bot", 0, 100000, opAgent, kv(AttrAgentName, "bot"))}
	for i := 0; i <= maxCalls; i++ {
		s := sp(2, 1, "execute_tool a", uint64(10+2*i), uint64(11+2*i), opTool, kv(AttrToolName, "a"))
		s.SpanId[5], s.SpanId[6] = byte(i>>8), byte(i)
		spans = append(spans, s)
	}
	res := Translate(request(spans...), Options{})
	if len(res.Messages) != maxCalls+1 || len(res.Rejected) != 1 || !strings.Contains(res.Rejected[0].Error(), "512 tool calls under one agent invocation, at most 511") {
		t.Errorf("%d messages, rejected %v", len(res.Messages), res.Rejected)
	}
	res = Translate(request(spans[:maxCalls+1]...), Options{})
	if len(res.Messages) != maxCalls+1 || len(res.Rejected) != 0 {
		t.Errorf("at the bound: %d messages, rejected %v", len(res.Messages), res.Rejected)
	}
}

// withFailedEval adds an evaluation that errored: its "fail" label is no
// judgement.
func withFailedEval(s *tracepb.Span) *tracepb.Span {
	s.Events = append(s.Events, &tracepb.Span_Event{Name: EventEvaluationResult, Attributes: []*commonpb.KeyValue{kv(AttrEvaluationLabel, "fail"), kv(AttrErrorType, "timeout")}})
	return s
}

// TestTranslateDeterministic: the same spans in any batching and order give
// the same messages, byte for byte.
func TestTranslateDeterministic(t *testing.T) {
	spans := []*tracepb.Span{
		sp(1, 0, "invoke_agent bot", 0, 100, opAgent, kv(AttrAgentName, "bot")),
		sp(2, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a")),
		sp(3, 1, "execute_tool b", 15, 40, opTool, kv(AttrToolName, "b")),
		sp(4, 1, "execute_tool c", 40, 45, opTool, kv(AttrToolName, "c")),
		sp(5, 0, "chat", 0, 1, kv(AttrToolDefinitions, `[{"name":"a"}]`)),
	}
	want := Translate(request(spans...), Options{}).Messages
	reversed := make([]*tracepb.Span, len(spans))
	for i, s := range spans {
		reversed[len(spans)-1-i] = proto.Clone(s).(*tracepb.Span)
	}
	split := request(reversed[:2]...)
	split.ResourceSpans = append(split.ResourceSpans, request(reversed[2:]...).ResourceSpans...)
	for name, req := range map[string]*coltracepb.ExportTraceServiceRequest{"reversed": request(reversed...), "split": split} {
		got := Translate(req, Options{}).Messages
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
