package otlp

import (
	"fmt"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// benchExport is one export of runs agent runs, each an invoke_agent span
// with three tool calls (two of them in parallel, one with arguments and
// an MCP child span) and a chat span: 6 spans per run.
func benchExport(runs int) []byte {
	var spans []*tracepb.Span
	for r := 0; r < runs; r++ {
		s := func(n, p int, name string, start, end uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
			x := sp(byte(n), 0, name, uint64(r)*1000+start, uint64(r)*1000+end, attrs...)
			x.TraceId[0] = byte(r >> 8)
			x.TraceId[1] = byte(r)
			x.SpanId[5], x.SpanId[6] = byte(r>>8), byte(r)
			if p > 0 {
				x.ParentSpanId = append([]byte(nil), x.SpanId...)
				x.ParentSpanId[7] = byte(p)
			}
			return x
		}
		spans = append(spans,
			s(1, 0, "invoke_agent bot", 0, 100, opAgent, kv(AttrAgentName, "bot"), kv(AttrProviderName, "openai")),
			s(2, 1, "chat m", 1, 5, kv(AttrOperationName, "chat")),
			s(3, 1, "execute_tool a", 10, 20, opTool, kv(AttrToolName, "a"), kv(AttrToolCallArgs, `{"user_id":"u","options":{"limit":5,"tags":["x"]}}`)),
			s(4, 3, "tools/call a", 11, 19, mcpCall, kv(AttrToolName, "a")),
			s(5, 1, "execute_tool b", 20, 40, opTool, kv(AttrToolName, "b")),
			s(6, 1, "execute_tool c", 25, 35, opTool, kv(AttrToolName, "c"), kv(AttrErrorType, "timeout")),
		)
	}
	b, err := proto.Marshal(request(spans...))
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkTranslate: protobuf bytes of an export to encoded events, the
// receiver's work per request before publishing.
func BenchmarkTranslate(b *testing.B) {
	for _, runs := range []int{1, 100} {
		body := benchExport(runs)
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := ParseProtobuf(body)
				if err != nil {
					b.Fatal(err)
				}
				res := Translate(req, Options{})
				if len(res.Messages) != runs*4 || len(res.Rejected) != 0 {
					b.Fatalf("%d messages, %v", len(res.Messages), res.Rejected)
				}
			}
			b.ReportMetric(float64(b.N*runs*6)/b.Elapsed().Seconds(), "spans/s")
		})
	}
}
