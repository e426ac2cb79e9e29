//go:build unix

package main

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// emitBenchLines writes n JSON Lines in the proportions of the bench mix
// (benchmix.Mix): 8% schema observations of one tool, 1% contracts,
// 0.5% workflow declarations, the rest invocations with their arguments,
// as an agent writes them before emit summarises them.
func emitBenchLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		tool := fmt.Sprintf("crm.tool%d", i%50)
		switch r := i % 200; {
		case r < 16:
			fmt.Fprintf(&b, `{"specversion":"1.0","id":"obs-%d","source":"mcp/crm","type":"io.toolsentry.tool.schema.observed.v1","time":"2026-11-29T10:00:00Z",`+
				`"data":{"tool_id":%q,"version":"%d","server":"crm-mcp","tool":{"name":%q,"description":"Looks up a customer record by id.",`+
				`"inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"the customer"},"limit":{"type":"integer","minimum":1,"default":10},`+
				`"fields":{"type":"array","items":{"type":"string","enum":["name","email","phone"]}},"include_deleted":{"type":"boolean"}},"required":["user_id"]}}}}`+"\n",
				i, tool, i%3, tool)
		case r < 18:
			fmt.Fprintf(&b, `{"specversion":"1.0","id":"con-%d","source":"ops","type":"io.toolsentry.tool.contract.v1","data":{"tool_id":%q,"accuracy":0.95,"determinism":"DETERMINISTIC"}}`+"\n", i, tool)
		case r < 19:
			fmt.Fprintf(&b, `{"specversion":"1.0","id":"wf-%d","source":"ops","type":"io.toolsentry.workflow.declared.v1","data":{"composition_id":"checkout%d","workflow_quality_requirement":0.9,`+
				`"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":[%q,"billing.charge"]}}}`+"\n", i, i%7, tool)
		default:
			fmt.Fprintf(&b, `{"specversion":"1.0","id":"inv-%d","source":"agents/billing-7","type":"io.toolsentry.tool.invocation.v1","time":"2026-11-29T10:00:00.123Z",`+
				`"data":{"agent_id":"agent-%d","tool_id":%q,"tool_version":"2.1.0","arguments":{"user_id":"u-%d","options":{"limit":10,"fields":["name","email"],"include_deleted":false}},`+
				`"outcome":{"status":"ok","correct":true},"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","latency_ms":41.5}}`+"\n",
				i, i%13, tool, i)
		}
	}
	return b.Bytes()
}

// BenchmarkEmitLines measures what emit does to JSON Lines before it
// publishes anything (the path of --dry-run): split the input, check every
// event as the processor will, and encode it, with and without --server.
func BenchmarkEmitLines(b *testing.B) {
	const n = 10000
	data := emitBenchLines(n)
	for _, server := range []string{"", "crm-mcp"} {
		b.Run("server="+server, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				r := &emitReader{server: server, source: emitDefaultSource, now: time.Now}
				r.read("bench.jsonl", data)
				if len(r.problems) > 0 || len(r.events) != n {
					b.Fatalf("%d events, %d problems, first %v", len(r.events), len(r.problems), r.problems[:min(1, len(r.problems))])
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			// On a loaded machine, wall time says little: events per
			// second of the process's CPU (GC workers included) is what
			// one core would do.
			b.ReportMetric(float64(n)*float64(b.N)/(processCPU()-cpu0).Seconds(), "events/cpu-s")
		})
	}
}

// processCPU is the user and system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
