package core

import (
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
)

// BenchmarkApplyInvocation is the hot path of the processor without NATS:
// an invocation of a known tool by a known agent whose surface does not
// grow, with an outcome to count.
func BenchmarkApplyInvocation(b *testing.B) {
	h := newHarness(b)
	h.core = New(Options{QualityEvery: 1 << 40})
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"},"outcome":{"status":"ok"}`)
	body := []byte(`{"specversion":"1.0","id":"x","source":"bench","type":"io.toolsentry.tool.invocation.v1","data":{"tool_id":"crm.lookup","agent_id":"agent-a","arguments":{"user_id":"u","limit":"5"},"outcome":{"status":"ok"}}}`)
	const subject = "toolsentry.telemetry.invocation.crm=2Elookup"
	ev, err := events.Decode(subject, nil, body)
	if err != nil {
		b.Fatal(err)
	}
	applyLoop(b, h, subject, []events.Event{ev}, "events/s", func(eff Effects) bool {
		return len(eff.Verdicts) == 0 && len(eff.Writes) == 1
	})
}

// applyLoop applies evs in turn, each at a new stream sequence, stores
// their writes, fails on effects that want refuses, and reports the rate in
// unit.
func applyLoop(b *testing.B, h *harness, subject string, evs []events.Event, unit string, want func(Effects) bool) {
	b.ReportAllocs()
	seq := uint64(100)
	for b.Loop() {
		seq++
		eff, err := h.core.Apply(h.state, Input{Event: evs[(seq-101)%uint64(len(evs))], Subject: subject, Seq: seq})
		if err != nil {
			b.Fatal(err)
		}
		if !want(eff) {
			b.Fatalf("effects %+v", eff)
		}
		if err := h.state.Store(eff.Writes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkApplySchema is a schema observation of a known tool without
// NATS: one that repeats the tool's version (no verdict, the baseline
// record counts it), and drifts on a field an agent uses while the
// baseline is held, to another version each time (DRIFT_ON_USED_FIELDS,
// the full diff and migration, every time).
func BenchmarkApplySchema(b *testing.B) {
	for _, bc := range []struct {
		name     string
		next     []string
		verdicts int
	}{
		{"case=repeat", []string{crmV1}, 0},
		{"case=drift", []string{crmRenamed, crmDefault}, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b)
			h.core = New(Options{QualityEvery: 1 << 40})
			h.observe("crm.lookup", "1", crmV1)
			h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`)
			subject := "toolsentry.telemetry.schema.crm=2Elookup"
			var evs []events.Event
			for _, next := range bc.next {
				h.observe("crm.lookup", "1", next)
				body := []byte(`{"specversion":"1.0","id":"x","source":"bench","type":"io.toolsentry.tool.schema.observed.v1","time":"2026-10-03T10:00:00Z","data":{"tool_id":"crm.lookup","version":"1","tool":` + next + `}}`)
				ev, err := events.Decode(subject, nil, body)
				if err != nil {
					b.Fatal(err)
				}
				evs = append(evs, ev)
			}
			unit := "verdicts/s"
			if bc.verdicts == 0 {
				unit = "events/s"
			}
			applyLoop(b, h, subject, evs, unit, func(eff Effects) bool {
				return len(eff.Verdicts) == bc.verdicts && (bc.verdicts == 0 || strings.Contains(eff.Verdicts[0].Subject, "drift_on_used_fields"))
			})
		})
	}
}
