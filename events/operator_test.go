package events

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNewOperatorAction: each operator kind is written on the tool's
// subject with its own type and read back as written.
func TestNewOperatorAction(t *testing.T) {
	for _, tc := range []struct {
		kind    Kind
		p       OperatorAction
		subject string
		typ     string
	}{
		{KindBaselineAccepted, OperatorAction{ToolID: "crm.lookup", Fingerprint: "sha256:ab", Operator: "ana@ops", Reason: "rollout 42"},
			"toolsentry.telemetry.baseline_accepted.crm=2Elookup", TypeBaselineAccepted},
		{KindBaselineReset, OperatorAction{ToolID: "crm.lookup", Operator: "ana@ops"},
			"toolsentry.telemetry.baseline_reset.crm=2Elookup", TypeBaselineReset},
		{KindAgentMigrated, OperatorAction{ToolID: "crm.lookup", AgentID: "triage-bot", Fingerprint: "sha256:ab", Operator: "ana@ops"},
			"toolsentry.telemetry.agent_migrated.crm=2Elookup", TypeAgentMigrated},
		{KindAgentForgotten, OperatorAction{ToolID: "crm.lookup", AgentID: "triage-bot", Operator: "ana@ops", Reason: "retired"},
			"toolsentry.telemetry.agent_forgotten.crm=2Elookup", TypeAgentForgotten},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			if !tc.kind.Operator() || tc.kind.Class() != ClassTelemetry {
				t.Fatalf("%s: Operator() %v, class %v", tc.kind, tc.kind.Operator(), tc.kind.Class())
			}
			msg, err := Names{}.NewOperatorAction(Meta{ID: "op-1", Source: "toolsentry-cli"}, tc.kind, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != tc.subject {
				t.Errorf("subject %q, want %q", msg.Subject, tc.subject)
			}
			ev, err := Decode(msg.Subject, msg.Header, msg.Data)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != tc.kind || ev.Type != tc.typ || ev.Source != "toolsentry-cli" {
				t.Errorf("kind %s type %q source %q", ev.Kind, ev.Type, ev.Source)
			}
			if diff := cmp.Diff(&tc.p, ev.Operator); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestOperatorActionRefused: what an operator event lacks or has too many
// is refused by the constructor with the reason, and by Decode as invalid
// against its schema or its subject (a dead letter).
func TestOperatorActionRefused(t *testing.T) {
	meta := Meta{ID: "op-1", Source: "cli"}
	for _, tc := range []struct {
		kind Kind
		p    OperatorAction
		want string
	}{
		{KindBaselineAccepted, OperatorAction{ToolID: "t", Operator: "ana"}, "fingerprint of the version accepted is required"},
		{KindBaselineAccepted, OperatorAction{ToolID: "t", AgentID: "bot", Fingerprint: "sha256:ab", Operator: "ana"}, "names a tool, not an agent"},
		{KindAgentMigrated, OperatorAction{ToolID: "t", Operator: "ana"}, "an agent id is required"},
		{KindAgentForgotten, OperatorAction{ToolID: "t", AgentID: "bot", Fingerprint: "sha256:ab", Operator: "ana"}, "takes no fingerprint"},
		{KindBaselineReset, OperatorAction{ToolID: "t"}, "the operator is required"},
		{KindInvocation, OperatorAction{ToolID: "t", Operator: "ana"}, "not an operator kind"},
	} {
		_, err := Names{}.NewOperatorAction(meta, tc.kind, tc.p)
		if !errors.Is(err, ErrBadEvent) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want ErrBadEvent saying %q", tc.kind, tc.p, err, tc.want)
		}
	}

	subject := "toolsentry.telemetry.baseline_accepted.t"
	body := func(data string) []byte {
		return structured(`"type":"`+TypeBaselineAccepted+`","source":"cli","id":"x"`, data)
	}
	for _, tc := range []struct {
		name    string
		subject string
		body    []byte
		want    error
	}{
		{"agent on an accept", subject, body(`{"tool_id":"t","fingerprint":"f","operator":"a","agent_id":"bot"}`), ErrSchemaInvalid},
		{"no fingerprint", subject, body(`{"tool_id":"t","operator":"a"}`), ErrSchemaInvalid},
		{"another tool's subject", "toolsentry.telemetry.baseline_accepted.u", body(`{"tool_id":"t","fingerprint":"f","operator":"a"}`), ErrSubjectMismatch},
		{"on the reset subject", "toolsentry.telemetry.baseline_reset.t", body(`{"tool_id":"t","fingerprint":"f","operator":"a"}`), ErrSubjectMismatch},
	} {
		if _, err := Decode(tc.subject, nil, tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
