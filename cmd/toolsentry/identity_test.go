package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// A GitHub-like and a Jira-like MCP server that both list get_issue.
const (
	githubToolsList   = `{"tools":[{"name":"get_issue","inputSchema":{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issue_number":{"type":"integer"}},"required":["owner","repo","issue_number"]}}]}`
	githubToolsListV2 = `{"tools":[{"name":"get_issue","inputSchema":{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issueNumber":{"type":"integer"}},"required":["owner","repo","issueNumber"]}}]}`
	jiraToolsList     = `{"tools":[{"name":"get_issue","inputSchema":{"type":"object","properties":{"issueIdOrKey":{"type":"string"}},"required":["issueIdOrKey"]}}]}`
	githubCall        = `{"owner":"acme","repo":"web","issue_number":42}`
)

// schemaVerdictsOf returns the schema verdicts in the verdict stream.
func schemaVerdictsOf(t *testing.T, ctx context.Context, js jetstream.JetStream, names events.Names) []*events.SchemaVerdict {
	t.Helper()
	var out []*events.SchemaVerdict
	for _, m := range streamMessages(t, ctx, js, names, names.VerdictsStream()) {
		if sv := m.event.SchemaVerdict; sv != nil {
			out = append(out, sv)
		}
	}
	return out
}

// TestServeTwoServersGetIssue is the issue's first scenario through serve
// on its embedded server: `emit --server github` and `emit --server jira`
// of tools/list results that both hold get_issue, an agent that calls
// github's only. Jira's listing is a new tool (NO_BASELINE for
// jira/get_issue), never DRIFT_ON_USED_FIELDS for that agent; a drift of
// github's get_issue is, for github/get_issue, and every guard (Go client,
// POST /v1/guard, toolsentry guard) answers per tool.
func TestServeTwoServersGetIssue(t *testing.T) {
	s := startServe(t, "")
	ctx := testCtx(t, 90*time.Second)
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var names events.Names
	emitList := func(server, list string) {
		t.Helper()
		if out, errOut, code := runCtx(ctx, list, "emit", "--server", server, "--nats-url", s.natsURL); code != 0 {
			t.Fatalf("emit --server %s: exit %d, %s %s", server, code, out, errOut)
		}
	}
	waitVerdict := func(what string, ok func(*events.SchemaVerdict) bool) {
		t.Helper()
		t.Logf("waiting: %s", what)
		consumerWait(t, func() bool {
			for _, sv := range schemaVerdictsOf(t, ctx, js, names) {
				if ok(sv) {
					return true
				}
			}
			return false
		})
	}

	client, err := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "triage-bot"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)

	emitList("github", githubToolsList)
	waitVerdict("github/get_issue is new", func(sv *events.SchemaVerdict) bool {
		return sv.ToolID == "github/get_issue" && sv.Verdict == guards.NoBaseline
	})
	if err := client.Emit(agent.Invocation{Server: "github", Tool: "get_issue", Arguments: json.RawMessage(githubCall), Outcome: &events.Outcome{Status: "ok"}}); err != nil {
		t.Fatal(err)
	}
	consumerWait(t, func() bool { return client.Stats().Published == 1 })
	emitList("jira", jiraToolsList)
	waitVerdict("jira/get_issue is new", func(sv *events.SchemaVerdict) bool {
		return sv.ToolID == "jira/get_issue" && sv.Verdict == guards.NoBaseline
	})
	emitList("github", githubToolsListV2)
	waitVerdict("github/get_issue drifted for triage-bot", func(sv *events.SchemaVerdict) bool {
		return sv.ToolID == "github/get_issue" && sv.AgentID == "triage-bot" && sv.Verdict == guards.DriftOnUsedFields
	})
	for _, sv := range schemaVerdictsOf(t, ctx, js, names) {
		if sv.ToolID != "github/get_issue" && sv.ToolID != "jira/get_issue" {
			t.Errorf("a verdict about %q: %+v", sv.ToolID, sv)
		}
		if sv.ToolID == "jira/get_issue" && (sv.Verdict != guards.NoBaseline || sv.AgentID != "") {
			t.Errorf("jira's get_issue: %s for %q", sv.Verdict, sv.AgentID)
		}
	}

	const migrated = `{"issueNumber":42,"owner":"acme","repo":"web"}`
	consumerWait(t, func() bool {
		d, err := client.Decide(ctx, "github/get_issue", json.RawMessage(githubCall))
		return err == nil && d.Migrated
	})
	for _, body := range []string{
		`{"agent_id":"triage-bot","server":"github","tool_id":"get_issue","arguments":` + githubCall + `}`,
		`{"agent_id":"triage-bot","tool_id":"github/get_issue","arguments":` + githubCall + `}`,
	} {
		code, m := postGuard(t, s.httpAddr, body)
		if code != 200 || m["action"] != string(guards.ActionMigrate) || compactJSON(t, m["arguments"]) != migrated {
			t.Errorf("POST /v1/guard %s: %d %v", body, code, m)
		}
	}
	jira := `{"issueIdOrKey":"OPS-1"}`
	if code, m := postGuard(t, s.httpAddr, `{"agent_id":"triage-bot","server":"jira","tool_id":"get_issue","arguments":`+jira+`}`); code != 200 || m["action"] != string(guards.ActionProceed) || compactJSON(t, m["arguments"]) != jira {
		t.Errorf("POST /v1/guard for jira's get_issue: %d %v", code, m)
	}
	if out, errOut, code := runCtx(ctx, githubCall, "guard", "--agent", "triage-bot", "--server", "github", "--tool", "get_issue", "--nats-url", s.natsURL); code != 0 || out != migrated+"\n" {
		t.Errorf("guard --server github: exit %d, %q, %s", code, out, errOut)
	}
	if out, errOut, code := runCtx(ctx, jira, "guard", "--agent", "triage-bot", "--server", "jira", "--tool", "get_issue", "--nats-url", s.natsURL); code != 0 || out != jira+"\n" {
		t.Errorf("guard --server jira: exit %d, %q, %s", code, out, errOut)
	}
	if _, err := client.Guard(ctx, "jira/get_issue", json.RawMessage(jira)); errors.Is(err, agent.ErrHalt) {
		t.Errorf("Guard of jira/get_issue: %v", err)
	}
	// A bad server is a bad request.
	if code, m := postGuard(t, s.httpAddr, `{"agent_id":"triage-bot","server":"gith\u0000ub","tool_id":"`+strings.Repeat("x", 600)+`","arguments":{}}`); code != 400 || m["error"] == "" {
		t.Errorf("POST /v1/guard with an id too long: %d %v", code, m)
	}
}

// TestServeKeepsBareToolIDsAcrossUpgrade: a data directory holds what the
// version before qualified tool ids wrote: github's get_issue observed
// under its bare name (the per-tool observation that version split out of
// a tools/list, with server github) and an agent's bare invocation. serve
// restarted on it keeps that baseline and usage: a drift of the bare tool
// is still judged against them. github's next tools/list names the
// server's tool, new under github/get_issue.
func TestServeKeepsBareToolIDsAcrossUpgrade(t *testing.T) {
	dataDir := t.TempDir()
	s := startServe(t, dataDir)
	ctx := testCtx(t, 90*time.Second)
	var names events.Names
	natsURL := s.natsURL
	publish := func(msg events.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: msg.Subject, Header: nats.Header(msg.Header), Data: msg.Data}); err != nil {
			t.Fatal(err)
		}
	}
	observeBare := func(id, inputSchema string) {
		t.Helper()
		publish(names.NewSchemaObserved(events.Meta{ID: id, Source: "toolsentry"}, events.SchemaObserved{
			ToolID: "get_issue", Version: "unversioned", Server: "github",
			Tool: &events.MCPTool{Name: "get_issue", InputSchema: json.RawMessage(inputSchema)}}))
	}
	const v1 = `{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issue_number":{"type":"integer"}},"required":["owner","repo","issue_number"]}`
	const v2 = `{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issueNumber":{"type":"integer"}},"required":["owner","repo","issueNumber"]}`
	observeBare("old-1", v1)
	args, err := events.FieldTypesOf(json.RawMessage(githubCall))
	if err != nil {
		t.Fatal(err)
	}
	publish(names.NewInvocation(events.Meta{ID: "old-2", Source: "agents/triage-bot"}, events.Invocation{AgentID: "triage-bot", ToolID: "get_issue", ArgumentTypes: args}))
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	consumerWait(t, func() bool {
		kv, err := js.KeyValue(ctx, names.UsageBucket())
		if err != nil {
			return false
		}
		key, _ := events.KVKey("get_issue", "triage-bot")
		_, err = kv.Get(ctx, key)
		return err == nil
	})
	nc.Close()
	s.stop(t)

	s2 := startServe(t, dataDir)
	nc2, err := nats.Connect(s2.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	natsURL = s2.natsURL
	observeBare("after-1", v2)
	if out, errOut, code := runCtx(ctx, githubToolsList, "emit", "--server", "github", "--nats-url", s2.natsURL); code != 0 {
		t.Fatalf("emit --server github: exit %d, %s %s", code, out, errOut)
	}
	var got []string
	consumerWait(t, func() bool {
		got = got[:0]
		for _, sv := range schemaVerdictsOf(t, ctx, js2, names) {
			got = append(got, sv.ToolID+" "+sv.AgentID+" "+string(sv.Verdict))
		}
		return len(got) == 3
	})
	slices.Sort(got) // two lanes: their verdicts interleave in any order
	want := []string{"get_issue  NO_BASELINE", "get_issue triage-bot DRIFT_ON_USED_FIELDS", "github/get_issue  NO_BASELINE"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("verdicts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
