package agent_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

const (
	searchV1 = `{"type":"object","properties":{"q":{"type":"string"},"per_page":{"type":"integer"},"state":{"type":"string"}},"required":["q"]}`
	// per_page became perPage and state went: the agent's directive is a
	// HALT (state cannot be carried over), with the rename's migration.
	searchV2 = `{"type":"object","properties":{"q":{"type":"string"},"perPage":{"type":"integer"}},"required":["q"]}`
)

// TestGuardJudgesThePayload is issue 18's "a directive answers a payload":
// under the agent's HALT, a payload that already fits the tool's current
// schema goes as given, one on the old surface that the migration carries
// over goes migrated, and one that fits neither is halted with the reason.
func TestGuardJudgesThePayload(t *testing.T) {
	l := startLoop(t)
	a := l.agent("triage-bot", agent.AgentOptions{})
	const tool = "search_issues"
	l.observe(tool, searchV1)
	if err := a.Emit(agent.Invocation{Tool: tool, Arguments: json.RawMessage(`{"q":"x","per_page":5,"state":"open"}`)}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "invocation published", func() bool { return a.Stats().Published == 1 })
	l.observe(tool, searchV2)
	_, err := waitGuard(t, a, tool, `{"q":"x","per_page":5,"state":"open"}`, "the old payload halts", func(_ json.RawMessage, err error) bool { return err != nil })
	var halt *agent.HaltError
	if errors.As(err, &halt) {
		// The baselines watch may trail the directives': until the view
		// holds the version the directive is about, the directive applies
		// as it is.
		natstest.Eventually(t, 10*time.Second, "the view holds the current version", func() bool {
			st, ok := a.View().ToolState(tool)
			return ok && st.Current.Fingerprint == halt.Directive.ToFingerprint
		})
		_, err = a.Guard(l.ctx, tool, json.RawMessage(`{"q":"x","per_page":5,"state":"open"}`))
	}
	var merr *toolschema.MigrationError
	if !errors.As(err, &halt) || halt.Directive.Action != guards.ActionHalt || !errors.As(err, &merr) || merr.Path != "state" {
		t.Fatalf("old payload: %v, want a HALT directive and the blocker at state", err)
	}

	for _, c := range []struct {
		name, payload string
		action        guards.Action
		arguments     string // "" on HALT
		fits          bool
		cause         string // on HALT: in the error
	}{
		{"already on the new surface", `{"q":"x","perPage":5}`, guards.ActionProceed, `{"q":"x","perPage":5}`, true, ""},
		{"old surface, migratable", `{"q":"x","per_page":5}`, guards.ActionMigrate, `{"perPage":5,"q":"x"}`, true, ""},
		{"old surface, blocked", `{"q":"x","per_page":5,"state":"open"}`, guards.ActionHalt, "", false, "cannot migrate state"},
		{"new surface, required field missing", `{"perPage":5}`, guards.ActionHalt, "", false, `missing required "q"`},
		{"new surface, wrong type", `{"q":"x","perPage":"five"}`, guards.ActionHalt, "", false, "perPage"},
	} {
		dec, err := a.Decide(l.ctx, tool, json.RawMessage(c.payload))
		if dec.Action != c.action || string(dec.Arguments) != c.arguments || dec.Fits != c.fits {
			t.Errorf("%s: Decide = action %s, arguments %s, fits %v, err %v; want %s, %s, %v", c.name, dec.Action, dec.Arguments, dec.Fits, err, c.action, c.arguments, c.fits)
		}
		if dec.Directive == nil || dec.Directive.Action != guards.ActionHalt || dec.CurrentFingerprint != dec.Directive.ToFingerprint {
			t.Errorf("%s: the decision names directive %+v and current %s", c.name, dec.Directive, dec.CurrentFingerprint)
		}
		if c.action != guards.ActionHalt {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, agent.ErrHalt) || !strings.Contains(err.Error(), c.cause) || !strings.Contains(dec.Reason, c.cause) {
			t.Errorf("%s: %v (reason %q), want a HALT naming %q", c.name, err, dec.Reason, c.cause)
		}
		if strings.Contains(err.Error(), "five") {
			t.Errorf("%s: the error quotes the payload's value: %v", c.name, err)
		}
	}
	if _, err := a.Decide(l.ctx, tool, json.RawMessage(`{"perPage":5}`)); !errors.Is(err, agent.ErrDoesNotFit) {
		t.Errorf("a payload that fits neither way: %v, want ErrDoesNotFit", err)
	}

	// Another agent, with no directive of its own, is not judged.
	b := l.agent("other-bot", agent.AgentOptions{})
	if d, err := b.Decide(l.ctx, tool, json.RawMessage(`{"anything":1}`)); err != nil || d.Action == guards.ActionHalt {
		t.Errorf("no directive for the agent: %+v, %v", d, err)
	}
	// The view holds the tool's state.
	st, ok := a.View().ToolState(tool)
	if !ok || st.ToolID != tool || !st.Held || st.Current.Fingerprint == st.Baseline.Fingerprint || !strings.Contains(string(st.Current.InputSchema()), "perPage") {
		t.Errorf("ToolState = %+v, %v", st, ok)
	}
}
