package events

import "fmt"

// The operators' CloudEvents types. Operators act on a tool's state through
// the telemetry stream, like every other input, so that the tool's lane
// applies their actions in stream order between the tool's observations and
// invocations, and a replay of the stream re-derives what follows them.
const (
	TypeBaselineAccepted = "io.toolsentry.operator.baseline.accepted.v1"
	TypeBaselineReset    = "io.toolsentry.operator.baseline.reset.v1"
	TypeAgentMigrated    = "io.toolsentry.operator.agent.migrated.v1"
	TypeAgentForgotten   = "io.toolsentry.operator.agent.forgotten.v1"
)

// OperatorAction is the data of the four operator types; the event's Kind
// says which action it is:
//
//	KindBaselineAccepted  toolsentry baseline accept   Fingerprint: the current version accepted (required)
//	KindBaselineReset     toolsentry baseline reset    Fingerprint: the baseline reset (optional)
//	KindAgentMigrated     toolsentry agent migrated    AgentID; Fingerprint: the version migrated to (optional)
//	KindAgentForgotten    toolsentry agent forget      AgentID
//
// Each is published on the tool's subject,
// toolsentry.telemetry.<kind token>.<tool>, so its ordering key and its
// partition are the tool's. Operator and Reason say who did it and why;
// the CloudEvent's source names the program that published it.
type OperatorAction struct {
	ToolID      string `json:"tool_id"`
	AgentID     string `json:"agent_id,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Operator    string `json:"operator"`
	Reason      string `json:"reason,omitempty"`
}

// Operator reports whether k is one of the operators' kinds.
func (k Kind) Operator() bool {
	switch k {
	case KindBaselineAccepted, KindBaselineReset, KindAgentMigrated, KindAgentForgotten:
		return true
	}
	return false
}

// NewOperatorAction builds an operator event of kind on the tool's subject,
// e.g. toolsentry.telemetry.baseline_accepted.<tool>.
func (n Names) NewOperatorAction(meta Meta, kind Kind, p OperatorAction) (Message, error) {
	if !kind.Operator() {
		return Message{}, fmt.Errorf("%w: %s is not an operator kind", ErrBadEvent, kind)
	}
	return n.Encode(meta.event(kind, p.ToolID, Event{Operator: &p}))
}

// check says, in words, what the schema of kind refuses: an agent id where
// none belongs or missing where one does, a fingerprint an accept lacks or
// a forget does not take.
func (p *OperatorAction) check(kind Kind) error {
	agent := kind == KindAgentMigrated || kind == KindAgentForgotten
	switch {
	case agent && p.AgentID == "":
		return fmt.Errorf("%w: %s: an agent id is required", ErrBadEvent, kind)
	case !agent && p.AgentID != "":
		return fmt.Errorf("%w: %s: names a tool, not an agent (agent %q)", ErrBadEvent, kind, p.AgentID)
	case kind == KindBaselineAccepted && p.Fingerprint == "":
		return fmt.Errorf("%w: %s: the fingerprint of the version accepted is required", ErrBadEvent, kind)
	case kind == KindAgentForgotten && p.Fingerprint != "":
		return fmt.Errorf("%w: %s takes no fingerprint", ErrBadEvent, kind)
	case p.Operator == "":
		return fmt.Errorf("%w: %s: the operator is required", ErrBadEvent, kind)
	}
	return nil
}
