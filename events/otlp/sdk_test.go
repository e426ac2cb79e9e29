package otlp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// agentRun records, with the OpenTelemetry Go SDK, one run of a support
// agent as a GenAI-instrumented framework would: an invoke_agent span; a
// chat span with the tool definitions; crm.lookup with an MCP client span
// as its child; kb.search and billing.balance at the same time (kb.search
// judged incorrect by an evaluation); mail.send failing, with an MCP span
// beside it carrying the same call id. Times are fixed so that the order
// and the overlap are the test's, not the clock's.
func agentRun(tr trace.Tracer, base time.Time, secret string) {
	at := func(ms int) trace.SpanStartEventOption {
		return trace.WithTimestamp(base.Add(time.Duration(ms) * time.Millisecond))
	}
	end := func(ms int) trace.SpanEndOption {
		return trace.WithTimestamp(base.Add(time.Duration(ms) * time.Millisecond))
	}
	op := func(o string) attribute.KeyValue { return attribute.String("gen_ai.operation.name", o) }
	tool := func(n string) attribute.KeyValue { return attribute.String("gen_ai.tool.name", n) }

	ctx, agent := tr.Start(context.Background(), "invoke_agent support-bot", at(0), trace.WithAttributes(
		op("invoke_agent"), attribute.String("gen_ai.agent.name", "support-bot"), attribute.String("gen_ai.system", "openai")))

	_, chat := tr.Start(ctx, "chat gpt-4o", at(1), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(op("chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.tool.definitions", `[{"type":"function","name":"crm.lookup","description":"Find a user.","parameters":{"type":"object","properties":{"user_id":{"type":"string"}},"required":["user_id"]}}]`)))
	chat.End(end(9))

	cctx, lookup := tr.Start(ctx, "execute_tool crm.lookup", at(10), trace.WithAttributes(op("execute_tool"), tool("crm.lookup"),
		attribute.String("gen_ai.tool.call.id", "call-1"),
		attribute.Map("gen_ai.tool.call.arguments", attribute.String("user_id", secret), attribute.Map("options", attribute.Int("limit", 5)))))
	_, mcp := tr.Start(cctx, "tools/call crm.lookup", at(11), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("mcp.method.name", "tools/call"), tool("crm.lookup"), op("execute_tool"), attribute.String("jsonrpc.request.id", "7")))
	mcp.End(end(18))
	lookup.End(end(20))

	_, kb := tr.Start(ctx, "execute_tool kb.search", at(21), trace.WithAttributes(op("execute_tool"), tool("kb.search"),
		attribute.String("gen_ai.tool.call.arguments", `{"query":"`+secret+`"}`)))
	_, bal := tr.Start(ctx, "execute_tool billing.balance", at(22), trace.WithAttributes(op("execute_tool"), tool("billing.balance")))
	kb.AddEvent("gen_ai.evaluation.result", at(29), trace.WithAttributes(attribute.String("gen_ai.evaluation.name", "relevance"),
		attribute.String("gen_ai.evaluation.score.label", "Fail"), attribute.Float64("gen_ai.evaluation.score.value", 0.1)))
	kb.End(end(30))
	bal.End(end(31))

	_, mail := tr.Start(ctx, "execute_tool mail.send", at(40), trace.WithAttributes(op("execute_tool"), tool("mail.send"),
		attribute.String("gen_ai.tool.call.id", "call-4")))
	_, mailMCP := tr.Start(ctx, "tools/call mail.send", at(41), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("mcp.method.name", "tools/call"), tool("mail.send"), attribute.String("gen_ai.tool.call.id", "call-4"),
		attribute.String("error.type", "tool_error")))
	mailMCP.SetStatus(codes.Error, "smtp down")
	mailMCP.End(end(48))
	mail.RecordError(errors.New("smtp down"))
	mail.SetStatus(codes.Error, "smtp down")
	mail.End(end(50))

	agent.End(end(60))
}

var runStart = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func newProvider(opt sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(opt, sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "support-svc"))))
}

// checkAgentRun checks what Translate makes of agentRun.
func checkAgentRun(t *testing.T, res Result, secret string) {
	t.Helper()
	if len(res.Rejected) != 0 {
		t.Fatalf("rejected: %v", res.Rejected)
	}
	var defs []*events.SchemaObserved
	var invs []*events.Invocation
	var runs []*events.WorkflowObserved
	for _, m := range res.Messages {
		if strings.Contains(string(m.Data), secret) {
			t.Fatalf("an argument value reached an event: %s", m.Data)
		}
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("%s: %v", m.Subject, err)
		}
		switch {
		case ev.SchemaObserved != nil:
			defs = append(defs, ev.SchemaObserved)
		case ev.Invocation != nil:
			invs = append(invs, ev.Invocation)
			if ev.ID != ev.Invocation.TraceID+"-"+ev.Invocation.SpanID || ev.Extensions[ExtensionProvider] != "openai" {
				t.Errorf("invocation id %q, extensions %v", ev.ID, ev.Extensions)
			}
		case ev.WorkflowObserved != nil:
			runs = append(runs, ev.WorkflowObserved)
		}
	}
	if len(defs) != 1 || defs[0].ToolID != "crm.lookup" || string(defs[0].Tool.InputSchema) != `{"properties":{"user_id":{"type":"string"}},"required":["user_id"],"type":"object"}` {
		t.Errorf("definitions: %+v", defs)
	}
	type inv struct {
		Tool, Agent, Status, ErrorType, Workflow string
		Correct                                  *bool
		Args                                     []string
	}
	var got []inv
	for _, i := range invs {
		got = append(got, inv{i.ToolID, i.AgentID, i.Outcome.Status, i.Outcome.ErrorType, i.WorkflowID, i.Outcome.Correct, i.ArgumentTypes.Paths()})
	}
	no := false
	want := []inv{
		{"crm.lookup", "support-bot", "ok", "", "support-bot", nil, []string{"options", "options.limit", "user_id"}},
		{"kb.search", "support-bot", "ok", "", "support-bot", &no, []string{"query"}},
		{"billing.balance", "support-bot", "ok", "", "support-bot", nil, nil},
		{"mail.send", "support-bot", "error", "tool_error", "support-bot", nil, nil},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("invocations (-want +got):\n%s", diff)
	}
	if len(runs) != 1 {
		t.Fatalf("%d observed runs, want 1", len(runs))
	}
	r := runs[0]
	wantStructure := workflow.Chain(workflow.Tool("crm.lookup"), workflow.ParallelAll(workflow.Tool("kb.search"), workflow.Tool("billing.balance")), workflow.Tool("mail.send"))
	if diff := cmp.Diff(wantStructure, r.Structure); diff != "" {
		t.Errorf("structure (-want +got):\n%s", diff)
	}
	if r.CompositionID != "support-bot" || r.AgentID != "support-bot" || r.Success || len(r.Calls) != 4 || r.Calls[3].Status != "error" || r.Calls[1].Correct == nil {
		t.Errorf("observed run %+v", r)
	}
}

// TestGoSDKStdoutExporter: spans written by the Go SDK's stdout exporter
// (compact and pretty-printed) read back through ReadFile.
func TestGoSDKStdoutExporter(t *testing.T) {
	for _, pretty := range []bool{false, true} {
		var buf bytes.Buffer
		opts := []stdouttrace.Option{stdouttrace.WithWriter(&buf)}
		if pretty {
			opts = append(opts, stdouttrace.WithPrettyPrint())
		}
		exp, err := stdouttrace.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		tp := newProvider(sdktrace.WithSyncer(exp))
		agentRun(tp.Tracer("test"), runStart, "u-secret-1")
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		req, format, err := ReadFile(buf.Bytes())
		if err != nil {
			t.Fatalf("pretty %v: %v", pretty, err)
		}
		if format != FormatGoStdout {
			t.Errorf("format %q", format)
		}
		res := Translate(req, Options{})
		if res.Spans != 8 {
			t.Errorf("%d spans, want 8", res.Spans)
		}
		checkAgentRun(t, res, "u-secret-1")
	}
}

// TestGoSDKOTLPExporter: the Go SDK's OTLP/HTTP exporter posts protobuf;
// what it sends parses and translates.
func TestGoSDKOTLPExporter(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("%s %s", r.URL.Path, r.Header.Get("Content-Type"))
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	if err != nil {
		t.Fatal(err)
	}
	tp := newProvider(sdktrace.WithBatcher(exp))
	agentRun(tp.Tracer("test"), runStart, "u-secret-2")
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 1 {
		t.Fatalf("%d exports, want 1", len(bodies))
	}
	req, err := ParseProtobuf(bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	checkAgentRun(t, Translate(req, Options{}), "u-secret-2")
}
