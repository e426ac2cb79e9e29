package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// TestGuardAnswersThePayload reproduces issue 18 §2 through `toolsentry
// serve`: after a drift that halts the agent, a payload that fits the
// tool's current schema proceeds as given from `toolsentry guard` and POST
// /v1/guard, before and after `baseline accept`, and one on the old
// surface is still halted with the reason.
func TestGuardAnswersThePayload(t *testing.T) {
	s := startServe(t, "")
	ctx := testCtx(t, 60*time.Second)
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var names events.Names
	observe := func(id, tool, schema string) {
		t.Helper()
		m, err := names.NewSchemaObserved(events.Meta{ID: id, Source: "test"}, events.SchemaObserved{ToolID: tool, Version: "1",
			Tool: &events.MCPTool{Name: tool, InputSchema: json.RawMessage(schema)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "triage-bot"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	drift := func(tool, oldSchema, newSchema, used string) {
		t.Helper()
		observe(tool+"-1", tool, oldSchema)
		published := client.Stats().Published
		if err := client.Emit(agent.Invocation{Tool: tool, Arguments: json.RawMessage(used)}); err != nil {
			t.Fatal(err)
		}
		consumerWait(t, func() bool { return client.Stats().Published == published+1 })
		observe(tool+"-2", tool, newSchema)
		consumerWait(t, func() bool {
			// Halted, and judged against the version the directive is
			// about (the baselines watch may trail the directives').
			d, err := client.Decide(ctx, tool, json.RawMessage(used))
			return errors.Is(err, agent.ErrHalt) && d.Directive != nil && d.CurrentFingerprint == d.Directive.ToFingerprint
		})
	}
	cli := func(tool, payload string) (string, string, int) {
		return runCtx(ctx, payload, "guard", "--agent", "triage-bot", "--tool", tool, "--nats-url", s.natsURL)
	}

	// per_page became perPage, and state went: the agent's directive halts.
	drift("search_issues",
		`{"type":"object","properties":{"q":{"type":"string"},"per_page":{"type":"integer"},"state":{"type":"string"}},"required":["q"]}`,
		`{"type":"object","properties":{"q":{"type":"string"},"perPage":{"type":"integer"}},"required":["q"]}`,
		`{"q":"x","per_page":5,"state":"open"}`)
	const fresh = `{"q":"x","perPage":5}`
	if out, errOut, code := cli("search_issues", fresh); code != 0 || out != fresh+"\n" {
		t.Errorf("guard < %s: exit %d, %q, %s; want exit 0 and the payload as given", fresh, code, out, errOut)
	}
	if code, m := postGuard(t, s.httpAddr, `{"agent_id":"triage-bot","tool_id":"search_issues","arguments":`+fresh+`}`); code != 200 ||
		m["action"] != "PROCEED" || m["fits"] != true || m["verdict"] != "DRIFT_ON_USED_FIELDS" || !strings.Contains(m["reason"].(string), "fits the tool's current schema") {
		t.Errorf("POST /v1/guard %s: %d %v", fresh, code, m)
	}
	// The old surface is halted with its reason: state cannot be carried over.
	if out, errOut, code := cli("search_issues", `{"q":"x","per_page":5,"state":"open"}`); code != exitHalt || out != "" || !strings.Contains(errOut, "cannot be migrated at state") {
		t.Errorf("guard < old payload: exit %d, %q, %q; want exit 3 naming state", code, out, errOut)
	}
	// A payload that fits neither way: halted, with the place.
	if out, errOut, code := cli("search_issues", `{"perPage":5}`); code != exitHalt || out != "" || !strings.Contains(errOut, `missing required "q"`) {
		t.Errorf("guard < payload without q: exit %d, %q, %q", code, out, errOut)
	}

	// The agent moves on to perPage: its calls fit the current schema, so
	// it is integrated (a SCHEMA_MATCH of its own), its directive says
	// PROCEED, and replay re-derives that verdict.
	published := client.Stats().Published
	if err := client.Emit(agent.Invocation{Tool: "search_issues", Arguments: json.RawMessage(fresh)}); err != nil {
		t.Fatal(err)
	}
	consumerWait(t, func() bool { return client.Stats().Published == published+1 })
	consumerWait(t, func() bool {
		d, err := client.Decide(ctx, "search_issues", json.RawMessage(`{"q":"x","per_page":5,"state":"open"}`))
		return err == nil && d.Directive != nil && d.Directive.Verdict.Name == "SCHEMA_MATCH" && d.Directive.AgentID == "triage-bot" && d.Directive.Action == "PROCEED"
	})
	if out, errOut, code := runCtx(ctx, "", "replay", "--nats-url", s.natsURL); code != 0 || !strings.Contains(out, "RESULT: every verdict matches") {
		t.Errorf("replay after the agent integrated: exit %d\n%s%s", code, out, errOut)
	}

	// The operator accepts the new version: the fresh payload still goes.
	if out, errOut, code := runCtx(ctx, "", "baseline", "accept", "search_issues", "--nats-url", s.natsURL); code != 0 {
		t.Fatalf("baseline accept: exit %d, %q, %s", code, out, errOut)
	}
	consumerWait(t, func() bool { st, ok := client.View().ToolState("search_issues"); return ok && !st.Held })
	if out, errOut, code := cli("search_issues", fresh); code != 0 || out != fresh+"\n" {
		t.Errorf("after accept, guard < %s: exit %d, %q, %s", fresh, code, out, errOut)
	}

	// A required field replaced: issue_number went, issueIdOrKey is
	// required. A payload on the new schema gets 200, the old one 409.
	drift("get_issue",
		`{"type":"object","properties":{"owner":{"type":"string"},"issue_number":{"type":"integer"}},"required":["owner","issue_number"]}`,
		`{"type":"object","properties":{"owner":{"type":"string"},"issueIdOrKey":{"type":"string"}},"required":["owner","issueIdOrKey"]}`,
		`{"owner":"o","issue_number":42}`)
	if code, m := postGuard(t, s.httpAddr, `{"agent_id":"triage-bot","tool_id":"get_issue","arguments":{"owner":"o","issueIdOrKey":"PROJ-42"}}`); code != 200 ||
		m["action"] != "PROCEED" || compactJSON(t, m["arguments"]) != `{"issueIdOrKey":"PROJ-42","owner":"o"}` {
		t.Errorf("POST /v1/guard with the new required field: %d %v", code, m)
	}
	if code, m := postGuard(t, s.httpAddr, `{"agent_id":"triage-bot","tool_id":"get_issue","arguments":{"owner":"o","issue_number":42}}`); code != 409 ||
		m["action"] != "HALT" || m["blocked_path"] == nil {
		t.Errorf("POST /v1/guard with the old field: %d %v", code, m)
	}
}
