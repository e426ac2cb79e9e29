package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/events/otlp"
	"github.com/toolsentry/toolsentry/publisher"
)

// supportDeclared: the support agent's declared workflow. Each tool claims
// 99%, so the tools predict about 98% end to end; 80% is required.
const supportDeclared = `{"composition_id":"support-bot","workflow_quality_requirement":0.8,"introduction_of_nondeterminism_acceptable":false,
	"policy":{"require_schema_compatibility":false},
	"tools":{"crm.lookup":{"accuracy":0.99,"determinism":"DETERMINISTIC"},"kb.search":{"accuracy":0.99,"determinism":"DETERMINISTIC"}},
	"structure":{"chain":["crm.lookup","kb.search"]}}`

// supportRuns records n runs of the support agent with the Go SDK: per run
// an invoke_agent span with crm.lookup (and the MCP client span of the same
// call, as its child) then kb.search. Every tool call succeeds, but in the
// runs where failed(i) the agent's answer is wrong (status ERROR, error.type
// wrong_answer): the failures the per-tool accuracy does not see.
func supportRuns(tr trace.Tracer, n int, failed func(int) bool) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	op := func(o string) attribute.KeyValue { return attribute.String("gen_ai.operation.name", o) }
	tool := func(n string) attribute.KeyValue { return attribute.String("gen_ai.tool.name", n) }
	for i := 0; i < n; i++ {
		t0 := base.Add(time.Duration(i) * time.Second)
		at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
		ctx, agent := tr.Start(context.Background(), "invoke_agent support-bot", trace.WithTimestamp(at(0)), trace.WithAttributes(
			op("invoke_agent"), attribute.String("gen_ai.agent.name", "support-bot"), attribute.String("gen_ai.provider.name", "openai")))
		cctx, lookup := tr.Start(ctx, "execute_tool crm.lookup", trace.WithTimestamp(at(10)), trace.WithAttributes(op("execute_tool"), tool("crm.lookup"),
			attribute.String("gen_ai.tool.call.id", fmt.Sprintf("call-%d-1", i)),
			attribute.Map("gen_ai.tool.call.arguments", attribute.String("user_id", "u-secret-42"))))
		_, mcp := tr.Start(cctx, "tools/call crm.lookup", trace.WithTimestamp(at(11)), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("mcp.method.name", "tools/call"), tool("crm.lookup"), op("execute_tool")))
		mcp.End(trace.WithTimestamp(at(18)))
		lookup.End(trace.WithTimestamp(at(20)))
		_, kb := tr.Start(ctx, "execute_tool kb.search", trace.WithTimestamp(at(30)), trace.WithAttributes(op("execute_tool"), tool("kb.search"),
			attribute.String("gen_ai.tool.call.arguments", `{"query":"u-secret-42 invoice"}`)))
		kb.End(trace.WithTimestamp(at(40)))
		if failed(i) {
			agent.SetAttributes(attribute.String("error.type", "wrong_answer"))
			agent.SetStatus(codes.Error, "wrong answer")
		}
		agent.End(trace.WithTimestamp(at(50)))
	}
}

func declareSupport(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	msg, err := events.Names{}.NewWorkflow(events.Meta{ID: "decl-support", Source: "test"}, []byte(supportDeclared))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: msg.Subject, Header: nats.Header(msg.Header), Data: msg.Data}); err != nil {
		t.Fatal(err)
	}
}

// checkSupportVerdict waits for the observed-runs checkpoint's verdict and
// checks the telemetry the runs became: 30 calls of each tool (the MCP span
// of crm.lookup counted with its framework span), 30 observed runs, no
// argument value anywhere.
func checkSupportVerdict(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	verdicts, err := js.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	var v *events.CompositionVerdict
	natstest.Eventually(t, 30*time.Second, "a composition verdict at the observed checkpoint", func() bool {
		m, err := verdicts.GetLastMsgForSubject(ctx, "toolsentry.verdicts.composition.composition_degraded.support-bot")
		if err != nil {
			return false
		}
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		v = ev.CompositionVerdict
		return true
	})
	o := v.Observed
	if o == nil || o.Runs != core.ObservedCheckpoint || o.Successes != 18 || !o.CorrelatedErrors || o.PredictedQuality < 0.95 {
		t.Fatalf("observed %+v", o)
	}
	if !strings.HasPrefix(v.Directive, "HALT: Observed quality 60.00% < requirement 80.00% over 30 runs; errors are correlated") {
		t.Errorf("directive %q", v.Directive)
	}
	// The verdict cites its input as stored, with the partition token.
	if pub, err := (events.Names{}).Published(v.InputSubject); err != nil || !strings.HasPrefix(v.InputSubject, "toolsentry.telemetry.observed.0.") ||
		!strings.HasPrefix(pub, "toolsentry.telemetry.observed.support-bot") {
		t.Errorf("input subject %q (published on %q, %v)", v.InputSubject, pub, err)
	}

	count := map[string]int{}
	for _, m := range streamMessages(t, ctx, js, events.Names{}, "TOOLSENTRY_TELEMETRY") {
		if bytes.Contains(m.data, []byte("u-secret-42")) {
			t.Fatalf("an argument value reached the stream: %s", m.data)
		}
		switch ev := m.event; {
		case ev.Invocation != nil:
			count[ev.Invocation.ToolID]++
			if ev.Invocation.AgentID != "support-bot" || ev.Invocation.Outcome.Status != "ok" || ev.Extensions["genaiprovider"] != "openai" {
				t.Errorf("invocation %+v %v", ev.Invocation, ev.Extensions)
			}
		case ev.WorkflowObserved != nil:
			count["observed"]++
			if got, _ := ev.WorkflowObserved.Structure.MarshalJSON(); string(got) != `{"chain":["crm.lookup","kb.search"]}` {
				t.Errorf("structure %s", got)
			}
		}
	}
	want := map[string]int{"crm.lookup": 30, "kb.search": 30, "observed": 30}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("telemetry %v, want %v", count, want)
	}
}

func supportProvider(opt sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(opt, sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "support-svc"))))
}

// TestOTLPHTTPEndToEnd: the Go SDK's OTLP/HTTP exporter posts to serve's
// /v1/traces; the runs become invocations and observed workflows, and the
// checkpoint's verdict says errors are correlated.
func TestOTLPHTTPEndToEnd(t *testing.T) {
	s := startServe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := natstest.JetStream(t, s.natsURL)
	declareSupport(t, ctx, js)

	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL("http://"+s.httpAddr+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := supportProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxExportBatchSize(4096), sdktrace.WithMaxQueueSize(4096)))
	supportRuns(tp.Tracer("support-framework"), core.ObservedCheckpoint, func(i int) bool { return i%5 < 2 })
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export: %v\n%s", err, s.logs)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	checkSupportVerdict(t, ctx, js)
}

// TestEmitOTLPFromGoSDKStdout: the Go SDK's stdout exporter writes a file;
// `emit --otlp FILE` publishes it, and emitting it again stores nothing.
func TestEmitOTLPFromGoSDKStdout(t *testing.T) {
	s := startServe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := natstest.JetStream(t, s.natsURL)
	declareSupport(t, ctx, js)

	path := filepath.Join(t.TempDir(), "spans.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
	if err != nil {
		t.Fatal(err)
	}
	tp := supportProvider(sdktrace.WithSyncer(exp))
	supportRuns(tp.Tracer("support-framework"), core.ObservedCheckpoint, func(i int) bool { return i%5 < 2 })
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for round, want := range []string{"published 90 events (0 duplicates)", "published 90 events (90 duplicates)"} {
		var stderr bytes.Buffer
		err := run(ctx, []string{"emit", "--otlp", path, "--nats-url", s.natsURL}, stdio{in: strings.NewReader(""), out: io.Discard, err: &stderr})
		if err != nil || !strings.Contains(stderr.String(), want) {
			t.Fatalf("round %d: %v\n%s", round, err, stderr.String())
		}
	}
	checkSupportVerdict(t, ctx, js)
}

func TestEmitOTLPRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"hello":"world"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"emit", "--dry-run", "--otlp", bad}, stdio{in: strings.NewReader(""), out: io.Discard, err: &stderr})
	if err == nil || !strings.Contains(stderr.String(), bad+": not OTLP trace data: line 1: neither an OTLP/JSON ExportTraceServiceRequest") {
		t.Errorf("err %v, stderr %s", err, stderr.String())
	}
	// A malformed GenAI span is reported like an invalid event.
	spanLine := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0000000000000001","name":"execute_tool","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}}]}]}]}]}`
	spans := filepath.Join(dir, "spans.jsonl")
	if err := os.WriteFile(spans, []byte(spanLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	err = run(context.Background(), []string{"emit", "--dry-run", "--otlp", spans}, stdio{in: strings.NewReader(""), out: io.Discard, err: &stderr})
	if err == nil || !strings.Contains(stderr.String(), `span "execute_tool" (trace 4bf92f3577b34da6a3ce929d0e0e4736, span 0000000000000001): a tool span without gen_ai.tool.name`) {
		t.Errorf("err %v, stderr %s", err, stderr.String())
	}
}

// TestOTLPHandlerAnswers: the receiver's answers, per the OTLP/HTTP
// specification, against a real nats-server.
func TestOTLPHandlerAnswers(t *testing.T) {
	_, url := natstest.RunServer(t)
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := consumer.Provision(ctx, js, consumer.Config{}); err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(nc, publisher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(http.MethodPost+" "+otlpTracesPath, newOTLPHandler(zerolog.New(zerolog.NewTestWriter(t)).WithContext(ctx), pub, events.Names{}))

	good := `{"resourceSpans":[{"scopeSpans":[{"spans":[
		{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0000000000000001","name":"execute_tool a","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"a"}}]},
		{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0000000000000002","name":"execute_tool","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}}]},
		{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0000000000000003","name":"GET /"}]}]}]}`
	post := func(contentType, encoding string, body []byte) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, otlpTracesPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()
	}

	// JSON: partial success names the malformed span; the other span
	// that is not a tool span is no error.
	code, ct, body := post("application/json", "", []byte(good))
	var resp coltracepb.ExportTraceServiceResponse
	if code != 200 || ct != "application/json" || protojson.Unmarshal(body, &resp) != nil {
		t.Fatalf("%d %s %s", code, ct, body)
	}
	if ps := resp.GetPartialSuccess(); ps.GetRejectedSpans() != 1 || !strings.Contains(ps.GetErrorMessage(), `span "execute_tool" (trace 4bf92f3577b34da6a3ce929d0e0e4736, span 0000000000000002): a tool span without gen_ai.tool.name`) {
		t.Errorf("partial success %v", ps)
	}
	st, _ := js.Stream(ctx, "TOOLSENTRY_TELEMETRY")
	info, _ := st.Info(ctx)
	if info.State.Msgs != 1 {
		t.Errorf("%d messages stored, want 1", info.State.Msgs)
	}

	// Protobuf, gzip: the same export again is acknowledged and stored once.
	req, err := otlp.ParseJSON([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := proto.Marshal(req)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pb)
	zw.Close()
	code, ct, body = post("application/x-protobuf", "gzip", gz.Bytes())
	resp.Reset()
	if code != 200 || ct != "application/x-protobuf" || proto.Unmarshal(body, &resp) != nil || resp.GetPartialSuccess().GetRejectedSpans() != 1 {
		t.Fatalf("%d %s %v", code, ct, &resp)
	}
	if info, _ := st.Info(ctx); info.State.Msgs != 1 {
		t.Errorf("a re-sent export was stored again: %d messages", info.State.Msgs)
	}

	for _, tc := range []struct {
		name, ct, enc string
		body          []byte
		code          int
		msg           string
	}{
		{"undecodable protobuf", "application/x-protobuf", "", []byte("\xff\xff"), 400, "not OTLP trace data: protobuf"},
		{"undecodable JSON", "application/json", "", []byte("{"), 400, "not OTLP trace data: not JSON"},
		{"bad gzip", "application/json", "gzip", []byte("{}"), 400, "gzip"},
		{"other type", "text/plain", "", []byte("{}"), 415, `Content-Type "text/plain"`},
		{"other encoding", "application/json", "br", []byte("{}"), 415, `Content-Encoding "br"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ct, body := post(tc.ct, tc.enc, tc.body)
			var st statuspb.Status
			var err error
			if ct == "application/json" {
				err = protojson.Unmarshal(body, &st)
			} else {
				err = proto.Unmarshal(body, &st)
			}
			if code != tc.code || err != nil || !strings.Contains(st.GetMessage(), tc.msg) {
				t.Errorf("%d %s %q (%v), want %d naming %q", code, ct, st.GetMessage(), err, tc.code, tc.msg)
			}
		})
	}
	req2, _ := http.NewRequest(http.MethodGet, otlpTracesPath, nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req2)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", rec.Code)
	}
}

// receiverExport is one OTLP export (protobuf) of runs agent runs of trace
// set k, each an invoke_agent span and three tool calls: 4 spans, 4 events.
func receiverExport(k, runs int) []byte {
	str := func(key, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: key, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	var spans []*tracepb.Span
	for r := 0; r < runs; r++ {
		tid := make([]byte, 16)
		binary.BigEndian.PutUint64(tid, uint64(k)+1)
		binary.BigEndian.PutUint64(tid[8:], uint64(r)+1)
		sid := func(n int) []byte { b := make([]byte, 8); b[7] = byte(n); return b }
		at := uint64(1_800_000_000_000_000_000 + r*1_000_000)
		spans = append(spans, &tracepb.Span{TraceId: tid, SpanId: sid(1), Name: "invoke_agent bot", StartTimeUnixNano: at, EndTimeUnixNano: at + 900,
			Attributes: []*commonpb.KeyValue{str("gen_ai.operation.name", "invoke_agent"), str("gen_ai.agent.name", "bench-bot")}})
		for i, tool := range []string{"crm.lookup", "kb.search", "mail.send"} {
			spans = append(spans, &tracepb.Span{TraceId: tid, SpanId: sid(2 + i), ParentSpanId: sid(1), Name: "execute_tool " + tool,
				StartTimeUnixNano: at + uint64(10+i*100), EndTimeUnixNano: at + uint64(60+i*100),
				Attributes: []*commonpb.KeyValue{str("gen_ai.operation.name", "execute_tool"), str("gen_ai.tool.name", tool),
					str("gen_ai.tool.call.arguments", `{"user_id":"u","options":{"limit":5}}`)}})
		}
	}
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkOTLPReceiver: POST /v1/traces with 100 runs per export (400
// spans, 400 events), answered after JetStream acknowledged every event,
// against a real nats-server with file storage. Each export is new.
func BenchmarkOTLPReceiver(b *testing.B) {
	_, url := natstest.RunServer(b)
	nc := natstest.Connect(b, url)
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	if _, err := consumer.Provision(ctx, js, consumer.Config{}); err != nil {
		b.Fatal(err)
	}
	pub, err := publisher.New(nc, publisher.Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := newOTLPHandler(ctx, pub, events.Names{})
	const runs = 100
	bodies := make([][]byte, 0, 64)
	for k := 0; k < cap(bodies); k++ {
		bodies = append(bodies, receiverExport(k, runs))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i == len(bodies) {
			b.StopTimer()
			bodies = append(bodies, receiverExport(i, runs))
			b.StartTimer()
		}
		req := httptest.NewRequest(http.MethodPost, otlpTracesPath, bytes.NewReader(bodies[i]))
		req.Header.Set("Content-Type", "application/x-protobuf")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	b.ReportMetric(float64(b.N*runs*4)/b.Elapsed().Seconds(), "spans/s")
}
