package core

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

const (
	githubGetIssue = `{"name":"get_issue","description":"Get an issue of a repository.","inputSchema":{"type":"object","properties":{"owner":{"type":"string"},"repo":{"type":"string"},"issue_number":{"type":"integer"}},"required":["owner","repo","issue_number"]}}`
	jiraGetIssue   = `{"name":"get_issue","description":"Get a Jira issue.","inputSchema":{"type":"object","properties":{"issueIdOrKey":{"type":"string"}},"required":["issueIdOrKey"]}}`
)

// list sends a tools/list result of server on the server's subject.
func (h *harness) list(server string, tools ...string) []events.Event {
	h.t.Helper()
	list := `{"server":` + fmt.Sprintf("%q", server) + `,"tools":{"tools":[`
	for i, tool := range tools {
		if i > 0 {
			list += ","
		}
		list += tool
	}
	return h.send("schema", server, events.TypeSchemaObserved, list+`]}}`)
}

type toolVerdict struct {
	Tool, Agent string
	Verdict     guards.SchemaVerdict
}

func toolVerdicts(t *testing.T, evs []events.Event) []toolVerdict {
	t.Helper()
	var out []toolVerdict
	for _, sv := range schemaVerdicts(t, evs) {
		out = append(out, toolVerdict{sv.ToolID, sv.AgentID, sv.Verdict})
	}
	return out
}

// TestTwoServersGetIssueAreTwoTools: a GitHub-like and a Jira-like server
// both list get_issue. They are two tools, github/get_issue and
// jira/get_issue: the Jira one is new (NO_BASELINE), never a drift of the
// GitHub one for an agent that only ever called GitHub's.
func TestTwoServersGetIssueAreTwoTools(t *testing.T) {
	h := newHarness(t)
	if diff := cmp.Diff([]toolVerdict{{"github/get_issue", "", guards.NoBaseline}}, toolVerdicts(t, h.list("github", githubGetIssue))); diff != "" {
		t.Fatalf("github's list (-want +got):\n%s", diff)
	}
	if got := h.invoke("github/get_issue", "triage-bot", `,"arguments":{"owner":"acme","repo":"web","issue_number":42}`); len(got) != 0 {
		t.Fatalf("a conforming call: %+v", got)
	}
	if diff := cmp.Diff([]toolVerdict{{"jira/get_issue", "", guards.NoBaseline}}, toolVerdicts(t, h.list("jira", jiraGetIssue))); diff != "" {
		t.Fatalf("jira's list (-want +got):\n%s", diff)
	}
	// Each server's next session lists the same tools: each is its own
	// baseline's version again, counted in its own record, with no verdict
	// (one alert per drift: a repeat publishes nothing).
	for _, l := range []struct{ server, tool, id string }{{"github", githubGetIssue, "github/get_issue"}, {"jira", jiraGetIssue, "jira/get_issue"}} {
		if got := toolVerdicts(t, h.list(l.server, l.tool)); len(got) != 0 {
			t.Fatalf("%s's list again: %+v, want no verdict", l.server, got)
		}
		if rec, ok := h.state.Baseline(l.id); !ok || rec.Seen != 2 || rec.Held {
			t.Fatalf("%s after its list again: %+v, want seen twice, nothing held", l.id, rec)
		}
	}
	for _, id := range []string{"github/get_issue", "jira/get_issue"} {
		if _, ok := h.state.Baseline(id); !ok {
			t.Errorf("no baseline of %s", id)
		}
	}
	if _, ok := h.state.Baseline("get_issue"); ok {
		t.Error("a baseline under the bare name get_issue")
	}
	if u := h.state.UsageOfTool("github/get_issue"); len(u) != 1 || u[0].AgentID != "triage-bot" {
		t.Errorf("usage of github/get_issue: %+v", u)
	}
	if u := h.state.UsageOfTool("jira/get_issue"); len(u) != 0 {
		t.Errorf("usage of jira/get_issue: %+v", u)
	}
	// A drift of jira's get_issue is judged against jira's baseline and
	// names no agent: nobody uses it.
	jiraV2 := `{"name":"get_issue","description":"Get a Jira issue.","inputSchema":{"type":"object","properties":{"issueKey":{"type":"string"}},"required":["issueKey"]}}`
	for _, v := range toolVerdicts(t, h.list("jira", jiraV2)) {
		if v.Tool != "jira/get_issue" || v.Agent != "" || v.Verdict == guards.DriftOnUsedFields {
			t.Errorf("jira's drift: %+v", v)
		}
	}
}

// TestBareToolIDsStayValid: records written before tools were qualified
// (bare ids, as a tool observed with no server still has) keep working: a
// bare observation and bare invocations meet the bare baseline and usage.
func TestBareToolIDsStayValid(t *testing.T) {
	h := newHarness(t)
	h.observe("get_issue", "1", githubGetIssue)
	h.invoke("get_issue", "triage-bot", `,"arguments":{"owner":"acme","repo":"web","issue_number":42}`)
	if got := toolVerdicts(t, h.observe("get_issue", "1", githubGetIssue)); len(got) != 0 {
		t.Fatalf("bare observation again: %+v, want no verdict (a repeat)", got)
	}
	if rec, ok := h.state.Baseline("get_issue"); !ok || rec.Seen != 2 {
		t.Fatalf("the bare record after the repeat: %+v, want seen twice", rec)
	}
	got := toolVerdicts(t, h.observe("get_issue", "2", jiraGetIssue))
	if len(got) != 1 || got[0] != (toolVerdict{"get_issue", "triage-bot", guards.DriftOnUsedFields}) {
		t.Fatalf("a drift of the bare tool: %+v", got)
	}
	// The server's list after the upgrade names the server's own tool:
	// new under its qualified id, the bare records untouched.
	if diff := cmp.Diff([]toolVerdict{{"github/get_issue", "", guards.NoBaseline}}, toolVerdicts(t, h.list("github", githubGetIssue))); diff != "" {
		t.Fatalf("github's list (-want +got):\n%s", diff)
	}
	if b, ok := h.state.Baseline("get_issue"); !ok || !b.Held {
		t.Errorf("the bare baseline after the list: %+v, %v", b, ok)
	}
}
