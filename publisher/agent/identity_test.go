package agent_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

const (
	githubGetIssue   = `{"name":"get_issue","inputSchema":{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issue_number":{"type":"integer"}},"required":["owner","repo","issue_number"]}}`
	githubGetIssueV2 = `{"name":"get_issue","inputSchema":{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issueNumber":{"type":"integer"}},"required":["owner","repo","issueNumber"]}}`
	jiraGetIssue     = `{"name":"get_issue","inputSchema":{"type":"object","properties":{"issueIdOrKey":{"type":"string"}},"required":["issueIdOrKey"]}}`
)

// listTools publishes a tools/list result of server, as the proxy and
// `emit --server` do.
func (l *loop) listTools(server string, tools ...string) {
	l.t.Helper()
	var names events.Names
	msg, _, err := names.NewToolsListObserved(meta(), server, json.RawMessage(`{"tools":[`+strings.Join(tools, ",")+`]}`))
	l.publish(msg, err)
}

// TestAgentNamesTheServersTool: an invocation with Server carries the
// qualified tool id, so a drift of github's get_issue migrates the agent's
// calls of github/get_issue and leaves jira/get_issue, a tool of its own,
// alone.
func TestAgentNamesTheServersTool(t *testing.T) {
	l := startLoop(t)
	a := l.agent("triage-bot", agent.AgentOptions{})
	const args = `{"owner":"acme","repo":"web","issue_number":42}`
	github := events.QualifiedToolID("github", "get_issue")

	l.listTools("github", githubGetIssue)
	l.listTools("jira", jiraGetIssue)
	if err := a.Emit(agent.Invocation{Server: "github", Tool: "get_issue", Arguments: json.RawMessage(args), Outcome: &events.Outcome{Status: "ok"}}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "invocation published", func() bool { return a.Stats().Published == 1 })
	stored, err := l.res.Telemetry.GetLastMsgForSubject(l.ctx, "toolsentry.telemetry.invocation.0.github/get_issue") // stored in partition 0 of 1
	if err != nil {
		t.Fatalf("no invocation on github/get_issue's subject: %v", err)
	}
	if !strings.Contains(string(stored.Data), `"tool_id":"github/get_issue"`) {
		t.Errorf("published invocation %s: want tool_id github/get_issue", stored.Data)
	}

	l.listTools("github", githubGetIssueV2)
	out, _ := waitGuard(t, a, github, args, "Guard migrates issue_number on github/get_issue", func(out json.RawMessage, err error) bool {
		return err == nil && strings.Contains(string(out), `"issueNumber"`)
	})
	if string(out) != `{"issueNumber":42,"owner":"acme","repo":"web"}` {
		t.Errorf("migrated payload %s", out)
	}
	// Jira's get_issue is another tool: its own directive (new, PROCEED),
	// none of github's. Verdicts of two tools are not ordered with each
	// other: wait for jira's.
	var jira agent.Decision
	var jerr error
	natstest.Eventually(t, 10*time.Second, "jira/get_issue's directive", func() bool {
		jira, jerr = a.Decide(l.ctx, "jira/get_issue", json.RawMessage(`{"issueIdOrKey":"OPS-1"}`))
		return jerr != nil || jira.Directive != nil
	})
	if jerr != nil || jira.Migrated || jira.Directive == nil || jira.Directive.ToolID != "jira/get_issue" || jira.Directive.Action != guards.ActionProceed {
		t.Errorf("jira/get_issue: %+v, %v", jira, jerr)
	}
	// The bare name is no tool of either server.
	if d, err := a.Decide(l.ctx, "get_issue", json.RawMessage(args)); err != nil || d.Directive != nil {
		t.Errorf("bare get_issue: %+v, %v", d, err)
	}
}

// TestAgentInvocationServer: Server and Tool make the tool id; an already
// qualified Tool is kept as it is; a server without a tool is refused.
func TestAgentInvocationServer(t *testing.T) {
	l := startBare(t)
	a := l.agent("a", agent.AgentOptions{Fingerprints: map[string]string{"github/get_issue": "sha256:ab"}})
	for _, inv := range []agent.Invocation{
		{Server: "github", Tool: "get_issue"},
		{Tool: "github/get_issue"},
	} {
		if err := a.Emit(inv); err != nil {
			t.Fatalf("%+v: %v", inv, err)
		}
	}
	natstest.Eventually(t, 10*time.Second, "invocations published", func() bool { return a.Stats().Published == 2 })
	info, err := l.res.Telemetry.Info(l.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := l.res.Telemetry.GetMsg(l.ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != "toolsentry.telemetry.invocation.0.github/get_issue" || !strings.Contains(string(m.Data), `"tool_id":"github/get_issue"`) || !strings.Contains(string(m.Data), `"schema_fingerprint":"sha256:ab"`) {
			t.Errorf("invocation %d on %s: %s", seq, m.Subject, m.Data)
		}
	}
	if err := a.Emit(agent.Invocation{Server: "github"}); !errors.Is(err, events.ErrBadKey) {
		t.Errorf("a server without a tool: %v", err)
	}
}
