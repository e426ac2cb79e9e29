package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

const (
	searchV1 = `{"name":"search_issues","inputSchema":{"type":"object","properties":{"q":{"type":"string"},"per_page":{"type":"integer"}},"required":["q"]}}`
	searchV2 = `{"name":"search_issues","inputSchema":{"type":"object","properties":{"q":{"type":"string"},"perPage":{"type":"integer"}},"required":["q"]}}`
	searchV3 = `{"name":"search_issues","inputSchema":{"type":"object","properties":{"query":{"type":"string"},"perPage":{"type":"integer"}},"required":["query"]}}`
)

// listFrom publishes a tools/list result of server github from source (an MCP
// proxy, a session) and returns the verdicts its per-tool observations
// yield.
func (h *harness) listFrom(source, tool string) []*events.SchemaVerdict {
	h.t.Helper()
	h.seq++
	const subject = "toolsentry.telemetry.schema.github"
	data := `{"server":"github","tools":{"tools":[` + tool + `]}}`
	body := fmt.Sprintf(`{"specversion":"1.0","id":"list-%d","source":%q,"type":%q,"time":"2026-10-03T10:00:00Z","data":%s}`, h.seq, source, events.TypeSchemaObserved, data)
	var out []*events.SchemaVerdict
	for _, ev := range h.apply(h.seq, subject, nil, []byte(body)) {
		if ev.SchemaVerdict == nil {
			h.t.Fatalf("not a schema verdict: %+v", ev)
		}
		out = append(out, ev.SchemaVerdict)
	}
	return out
}

// TestOneAlertPerDrift is issue 18's "three sessions re-listing one drift":
// every new MCP session, every re-listing after list_changed and every
// proxy of the same server lists the tools again. A drift is reported once
// per agent when the tool comes to present it; the re-listings are counted
// in the baseline record, and publish nothing (the count of
// DRIFT_ON_USED_FIELDS went 3, 6, 9 over three sessions). Going on to a
// third version, or back to the baseline, is news again.
func TestOneAlertPerDrift(t *testing.T) {
	h := newHarness(t)
	first := h.listFrom("proxy-1", searchV1)
	if len(first) != 1 || first[0].Verdict != guards.NoBaseline {
		t.Fatalf("first listing: %+v", first)
	}
	tool := first[0].ToolID // the id the split gave the tool
	agents := []string{"release-bot", "triage-bot", "weekly-report"}
	for _, a := range agents {
		h.invoke(tool, a, `,"arguments":{"q":"is:open","per_page":5}`)
	}

	drift := h.listFrom("proxy-1", searchV2) // a silent upgrade: per_page → perPage
	if len(drift) != len(agents) {
		t.Fatalf("the upgrade: %d verdicts, want one per agent: %+v", len(drift), drift)
	}
	for i, v := range drift {
		if v.Verdict != guards.DriftOnUsedFields || v.AgentID != agents[i] {
			t.Errorf("verdict %d: %s for %q, want DRIFT_ON_USED_FIELDS for %q", i, v.Verdict, v.AgentID, agents[i])
		}
	}
	rec, _ := h.state.Baseline(tool)
	if !rec.Held || rec.Seen != 1 {
		t.Fatalf("after the upgrade: held %v, seen %d; want held, seen once", rec.Held, rec.Seen)
	}

	// Sessions 2 and 3 through the same proxy, a re-listing after
	// list_changed, a second proxy of the same server: nothing new.
	for i, source := range []string{"proxy-1", "proxy-1", "proxy-1", "proxy-2"} {
		if got := h.listFrom(source, searchV2); len(got) != 0 {
			t.Fatalf("re-listing %d (%s): %d verdicts, want none: %+v", i+1, source, len(got), got)
		}
	}
	rec, _ = h.state.Baseline(tool)
	if !rec.Held || rec.Seen != 5 || rec.LastSeq != h.seq {
		t.Errorf("after the re-listings: held %v, seen %d, last_seq %d; want held, seen 5 times, last_seq %d", rec.Held, rec.Seen, rec.LastSeq, h.seq)
	}
	// The agents, still sending per_page, were told when it came.
	for _, a := range agents {
		if got := h.invoke(tool, a, `,"arguments":{"q":"is:open","per_page":5}`); len(got) != 0 {
			t.Errorf("%s told again on its call: %+v", a, got)
		}
	}

	// A third version: its own verdict per agent, once.
	third := h.listFrom("proxy-2", searchV3)
	if len(third) != len(agents) || third[0].CurrentFingerprint == drift[0].CurrentFingerprint || third[0].BaselineFingerprint != drift[0].BaselineFingerprint {
		t.Fatalf("third version: %+v", third)
	}
	if got := h.listFrom("proxy-1", searchV3); len(got) != 0 {
		t.Fatalf("third version again: %+v", got)
	}
	// Back to the baseline: one SCHEMA_MATCH, once.
	back := h.listFrom("proxy-1", searchV1)
	if len(back) != 1 || back[0].Verdict != guards.SchemaMatch || back[0].AgentID != "" {
		t.Fatalf("back to the baseline: %+v", back)
	}
	if got := h.listFrom("proxy-2", searchV1); len(got) != 0 {
		t.Fatalf("the baseline again: %+v", got)
	}
	// And the upgrade again after the revert: news again, since the agents
	// were told to proceed in between.
	if again := h.listFrom("proxy-1", searchV2); len(again) != len(agents) {
		t.Fatalf("the upgrade after the revert: %d verdicts, want %d", len(again), len(agents))
	}

	counts := map[guards.SchemaVerdict]int{}
	for _, ev := range h.all {
		counts[ev.SchemaVerdict.Verdict]++
	}
	want := map[guards.SchemaVerdict]int{guards.NoBaseline: 1, guards.DriftOnUsedFields: 3 * len(agents), guards.SchemaMatch: 1}
	for v, n := range want {
		if counts[v] != n {
			t.Errorf("%d %s verdicts in all, want %d (all: %v)", counts[v], v, n, counts)
		}
	}
}

// A replay applies the same stream with a new core to a new state: it
// re-derives the same verdicts, byte for byte, repeats included.
func TestOneAlertPerDriftReplays(t *testing.T) {
	run := func() []string {
		h := newHarness(t)
		var out []string
		h.onVerdict = func(m events.Message) { out = append(out, m.ID+" "+string(m.Data)) }
		tool := h.listFrom("proxy-1", searchV1)[0].ToolID
		h.invoke(tool, "triage-bot", `,"arguments":{"q":"x","per_page":5}`)
		for _, v := range []string{searchV2, searchV2, searchV2, searchV3, searchV3, searchV1, searchV1} {
			h.listFrom("proxy-1", v)
		}
		return out
	}
	live, replay := run(), run()
	if len(live) != 4 { // NO_BASELINE, two drifts, SCHEMA_MATCH
		t.Fatalf("%d verdicts, want 4:\n%v", len(live), live)
	}
	for i := range live {
		if live[i] != replay[i] {
			t.Fatalf("verdict %d differs:\n%s\n%s", i, live[i], replay[i])
		}
	}
}

// TestVerdictsSayWhatToDo: every verdict carries the action its directive
// in force takes (one mapping: events.DirectiveOf reads the same fields)
// and a one-line summary in words, with no argument value in it.
func TestVerdictsSayWhatToDo(t *testing.T) {
	h := newHarness(t)
	nb := h.listFrom("proxy-1", searchV1)
	tool := nb[0].ToolID
	h.invoke(tool, "triage-bot", `,"arguments":{"q":"secret-query-value","per_page":5}`)
	drift := h.listFrom("proxy-1", searchV2)
	// per_page removed outright: no migration, a HALT.
	removed := `{"name":"search_issues","inputSchema":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}`
	halt := h.listFrom("proxy-1", removed)
	back := h.listFrom("proxy-1", searchV1)

	want := []struct {
		v       *events.SchemaVerdict
		action  guards.Action
		summary string
	}{
		{nb[0], guards.ActionProceed, "new tool " + tool + ", baselined"},
		{drift[0], guards.ActionMigrate, "triage-bot must send perPage instead of per_page; migration available"},
		{halt[0], guards.ActionHalt, "triage-bot must not call " + tool + ": cannot migrate per_page: field per_page was removed without a counterpart: its value would be lost"},
		{back[0], guards.ActionProceed, tool + " matches its baseline"},
	}
	for _, w := range want {
		if w.v.Action != w.action || w.v.Summary != w.summary {
			t.Errorf("%s: action %q, summary %q; want %q, %q", w.v.Verdict, w.v.Action, w.v.Summary, w.action, w.summary)
		}
	}
	for i, ev := range h.all {
		d, err := events.DirectiveOf(ev, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if d.Action != ev.SchemaVerdict.Action {
			t.Errorf("verdict %s: action %s, its directive's %s", ev.SchemaVerdict.Verdict, ev.SchemaVerdict.Action, d.Action)
		}
		if strings.Contains(ev.SchemaVerdict.Summary, "secret-query-value") {
			t.Errorf("summary %q holds an argument value", ev.SchemaVerdict.Summary)
		}
	}
}
