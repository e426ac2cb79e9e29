package guards

// This file maps a verdict to what an agent must do about it: the action
// of a directive in force (package events, Directive), which agents read
// before they call a tool or run a workflow.

// Action is what a directive tells an agent to do before its next call.
type Action string

// The actions.
const (
	// ActionProceed: call the tool (run the workflow) as the agent would.
	ActionProceed Action = "PROCEED"
	// ActionMigrate: rewrite the payload with the directive's migration
	// plan (MigrationPlan.Apply), then call the tool with the result. A
	// payload the plan cannot migrate (a *MigrationError) must not be sent:
	// for that payload the directive is a HALT.
	ActionMigrate Action = "MIGRATE"
	// ActionHalt: do not call the tool (do not run the workflow); a human or
	// a changed integration must act first.
	ActionHalt Action = "HALT"
)

// Valid reports whether a is one of the three actions.
func (a Action) Valid() bool {
	return a == ActionProceed || a == ActionMigrate || a == ActionHalt
}

// The action of every verdict, in one table. The seeds' directives start
// with PROCEED or HALT; the action follows them except where toolsentry does
// itself what the seed's HALT asks for:
//
//	guard        verdict                    action    why
//	schema       SCHEMA_MATCH               PROCEED   the seed's PROCEED
//	schema       DRIFT_ON_UNUSED_FIELDS     PROCEED   the seed's PROCEED: the drift touches nothing the agent uses
//	schema       NO_BASELINE                PROCEED   the seed says HALT: capture the baseline; the processor
//	                                                  captures this observation as the baseline itself
//	schema       DRIFT_ON_USED_FIELDS       MIGRATE   the seed's HALT says "Apply migration": when the plan
//	                                                  addresses every affected input field and no blocker
//	                                                  stands on one of them
//	                                        HALT      otherwise: a blocker on a used field (a removed field,
//	                                                  an unmapped enum value, a new required field without
//	                                                  default), an affected output or tool field (no payload
//	                                                  rewrite fixes what the agent reads or what the tool
//	                                                  now means), or an affected field no step addresses
//	composition  SINGLE_TOOL                PROCEED   the seed's PROCEED
//	composition  COMPOSITION_MEETS_QUALITY  PROCEED   the seed's PROCEED
//	composition  COMPOSITION_DEGRADED       HALT      the seed's HALT (quality below requirement, or
//	                                                  non-determinism introduced)
//	composition  SEMANTIC_INCOMPATIBLE      HALT      the seed's HALT
//	either       any other verdict          HALT      unknown to this version: fail safe
var (
	schemaActions = map[SchemaVerdict]Action{
		SchemaMatch:         ActionProceed,
		DriftOnUnusedFields: ActionProceed,
		NoBaseline:          ActionProceed,
		DriftOnUsedFields:   ActionMigrate, // if executable: see SchemaAction
	}
	compositionActions = map[CompositionVerdict]Action{
		SingleTool:              ActionProceed,
		CompositionMeetsQuality: ActionProceed,
		CompositionDegraded:     ActionHalt,
		SemanticIncompatible:    ActionHalt,
	}
)

// SchemaVerdictAction returns the table's action for a schema verdict, and
// false for a verdict the table does not know. Its MIGRATE holds only where
// SchemaAction (package guards/toolschema) finds the migration plan
// executable for the agent's affected fields.
func SchemaVerdictAction(verdict SchemaVerdict) (Action, bool) {
	a, ok := schemaActions[verdict]
	return a, ok
}

// CompositionAction returns the action of a composition verdict (see the
// table above).
func CompositionAction(verdict CompositionVerdict) Action {
	if a, ok := compositionActions[verdict]; ok {
		return a
	}
	return ActionHalt
}
