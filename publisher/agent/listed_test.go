package agent_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// TestListedProtectsTheFirstCall is issue 18 §5 in the Go client: the
// agent lists a silently upgraded tool before serve has seen the new
// version; its very first call is migrated by the client's own verdict,
// and serve's verdict, when it comes, is the same verdict with the same
// migration and digest.
func TestListedProtectsTheFirstCall(t *testing.T) {
	l := startLoop(t)
	a := l.agent("triage-bot", agent.AgentOptions{})
	const tool = "search_issues"
	const old = `{"q":"x","per_page":30}`
	renamed := `{"type":"object","properties":{"q":{"type":"string"},"perPage":{"type":"integer"}},"required":["q"]}`
	l.observe(tool, `{"type":"object","properties":{"q":{"type":"string"},"per_page":{"type":"integer"}},"required":["q"]}`)
	if err := a.Emit(agent.Invocation{Tool: tool, Arguments: json.RawMessage(old)}); err != nil {
		t.Fatal(err)
	}
	listed := events.MCPTool{Name: tool, InputSchema: json.RawMessage(renamed)}

	// The agent's recorded surface reaches its view; then it lists v2.
	var local *events.Directive
	natstest.Eventually(t, 10*time.Second, "a local verdict on the listed version", func() bool {
		d, err := a.Listed(tool, listed)
		local = d
		return err == nil && d != nil && d.Verdict.Name == string(guards.DriftOnUsedFields)
	})
	if local.Action != guards.ActionMigrate || local.AgentID != "triage-bot" || len(local.Verdict.ManifestDigest) != 64 {
		t.Fatalf("local directive %+v", local)
	}
	dec, err := a.Decide(l.ctx, tool, json.RawMessage(old))
	if err != nil || !dec.Migrated || string(dec.Arguments) != `{"perPage":30,"q":"x"}` || dec.CurrentFingerprint != local.ToFingerprint {
		t.Fatalf("the first call: %+v, %v; want it migrated by the local verdict", dec, err)
	}
	if d, err := a.Decide(l.ctx, tool, json.RawMessage(`{"q":"x","perPage":30}`)); err != nil || d.Migrated || !d.Fits {
		t.Errorf("a call on the listed surface: %+v, %v", d, err)
	}

	// serve sees the same tools/list: its verdict agrees.
	var names events.Names
	l.publish(names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: tool, Version: agent.ListedVersion, Tool: &listed}))
	var served events.Directive
	natstest.Eventually(t, 20*time.Second, "serve's directive about the listed version", func() bool {
		d, ok := a.View().Lookup("triage-bot", tool)
		served = d
		return ok && d.ToFingerprint == local.ToFingerprint
	})
	type judged struct {
		Verdict, Digest, From, To string
		Action                    guards.Action
		Migration                 toolschema.MigrationPlan
		Affected                  []string
	}
	of := func(d events.Directive) judged {
		return judged{d.Verdict.Name, d.Verdict.ManifestDigest, d.FromFingerprint, d.ToFingerprint, d.Action, d.Migration, d.Affected}
	}
	if diff := cmp.Diff(of(served), of(*local)); diff != "" {
		t.Errorf("serve's verdict and the local one differ (-serve +local):\n%s", diff)
	}
	// From now on serve's directive decides, with the same answer.
	dec, err = a.Decide(l.ctx, tool, json.RawMessage(old))
	if err != nil || dec.Directive == nil || dec.Directive.Verdict.ID == "" || string(dec.Arguments) != `{"perPage":30,"q":"x"}` {
		t.Errorf("after serve's verdict: %+v, %v", dec, err)
	}
	// A listing of the version serve knows sets nothing local.
	natstest.Eventually(t, 10*time.Second, "the listed version is the tool's current one in the view", func() bool {
		st, ok := a.View().ToolState(tool)
		return ok && st.Current.Fingerprint == local.ToFingerprint
	})
	if d, err := a.Listed(tool, listed); err != nil || d != nil {
		t.Errorf("Listed of the known version: %+v, %v", d, err)
	}
}

// TestListedJudgesAnAgentWithoutUsageByItsPayload: an agent that never
// called the tool has no recorded surface, so the local verdict on the
// listed version does not touch it; each of its payloads is judged by the
// drift for the paths it sends.
func TestListedJudgesAnAgentWithoutUsageByItsPayload(t *testing.T) {
	l := startLoop(t)
	a := l.agent("new-bot", agent.AgentOptions{})
	const tool = "search_issues"
	l.observe(tool, `{"type":"object","properties":{"q":{"type":"string"},"per_page":{"type":"integer"}},"required":["q"]}`)
	listed := events.MCPTool{Name: tool, InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"},"perPage":{"type":"integer"}},"required":["q"]}`)}
	natstest.Eventually(t, 10*time.Second, "the tool's baseline in the view", func() bool {
		_, ok := a.View().ToolState(tool)
		return ok
	})
	local, err := a.Listed(tool, listed)
	if err != nil || local == nil || local.Verdict.Name != string(guards.DriftOnUnusedFields) || local.Action != guards.ActionProceed {
		t.Fatalf("local directive for an agent without usage: %+v, %v", local, err)
	}
	dec, err := a.Decide(l.ctx, tool, json.RawMessage(`{"q":"x","per_page":30}`))
	if err != nil || !dec.Migrated || string(dec.Arguments) != `{"perPage":30,"q":"x"}` || dec.Directive == nil || dec.Directive.Verdict.Name != string(guards.DriftOnUsedFields) {
		t.Errorf("an old payload: %+v, %v; want it migrated by the drift for its own paths", dec, err)
	}
	if dec, err := a.Decide(l.ctx, tool, json.RawMessage(`{"q":"x","perPage":30}`)); err != nil || dec.Migrated || dec.Action != guards.ActionProceed {
		t.Errorf("a payload on the listed surface: %+v, %v", dec, err)
	}
}
