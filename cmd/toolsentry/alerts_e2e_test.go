package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// TestThreeSessionsOneAlertThroughServe is issue 18's "three sessions
// re-listing one drift" through serve: a tool is upgraded silently (per_page
// becomes perPage) and three MCP sessions list it again. watch shows one
// drift verdict for the agent, with its action and summary in words; the
// sessions are counted in the baseline record, which `baseline show` shows.
func TestThreeSessionsOneAlertThroughServe(t *testing.T) {
	s := startServe(t, "")
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, cmdTimeout)
	n := events.Names{}
	const tool = "search_issues"
	version := func(perPage string) *events.MCPTool {
		return &events.MCPTool{Name: tool, InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"},"` + perPage + `":{"type":"integer"}},"required":["q"]}`)}
	}
	observe := func(id, session string, t2 *events.MCPTool) {
		t.Helper()
		m, err := n.NewSchemaObserved(events.Meta{ID: id, Source: session, Time: verdictTime}, events.SchemaObserved{ToolID: tool, Version: "unversioned", Tool: t2})
		if err != nil {
			t.Fatal(err)
		}
		publishMsg(t, ctx, js, m)
	}
	observe("list-0", "session-0", version("per_page"))
	args, err := events.FieldTypesOf([]byte(`{"q":"is:open","per_page":5}`))
	if err != nil {
		t.Fatal(err)
	}
	call, err := n.NewInvocation(events.Meta{ID: "call-1", Source: "triage-bot", Time: verdictTime}, events.Invocation{AgentID: "triage-bot", ToolID: tool, ArgumentTypes: args})
	if err != nil {
		t.Fatal(err)
	}
	publishMsg(t, ctx, js, call)
	for i := 1; i <= 3; i++ { // the upgrade, seen by three sessions
		observe(fmt.Sprintf("list-%d", i), fmt.Sprintf("session-%d", i), version("perPage"))
	}

	kv, err := js.KeyValue(ctx, "toolsentry-baselines")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := core.Key(tool)
	natstest.Eventually(t, cmdTimeout, "the three sessions applied", func() bool {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return false
		}
		var rec core.BaselineRecord
		return json.Unmarshal(e.Value(), &rec) == nil && rec.Seen == 3 && rec.Held
	})

	out, errOut, code := runCtx(ctx, "", "watch", "--all", "--timeout", "1s", "--nats-url", s.natsURL)
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"2026-11-29T10:00:00Z  PROCEED  schema       NO_BASELINE                search_issues   new tool search_issues, baselined  directive: HALT: No baseline schema.",
		"2026-11-29T10:00:00Z  MIGRATE  schema       DRIFT_ON_USED_FIELDS       search_issues   triage-bot must send perPage instead of per_page; migration available  directive: HALT: Drift on used fields ['per_page']. Apply migration.",
	}
	if len(lines) != len(want) {
		t.Fatalf("watch printed %d verdicts, want one per drift:\n%s", len(lines), out)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d:\n%s\nwant the prefix\n%s", i+1, lines[i], want[i])
		}
	}

	out, errOut, code = runCtx(ctx, "", "watch", "--all", "--json", "--verdict", "drift_on_used_fields", "--count", "1", "--timeout", "5s", "--nats-url", s.natsURL)
	if code != 0 || !strings.Contains(out, `"action":"MIGRATE","summary":"triage-bot must send perPage instead of per_page; migration available"`) {
		t.Errorf("watch --json: exit %d, stderr %s, output %s", code, errOut, out)
	}

	out, errOut, code = runCtx(ctx, "", "baseline", "show", tool, "--nats-url", s.natsURL)
	if code != 0 || !strings.Contains(out, `"seen": 3`) || !strings.Contains(out, `"last_seen": "2026-11-29T10:00:00Z"`) {
		t.Errorf("baseline show: exit %d, stderr %s, output %s", code, errOut, out)
	}
}
