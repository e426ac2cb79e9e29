package events

// This file says what a verdict tells its reader to do, in words: the
// action (toolschema.SchemaAction, guards.CompositionAction: the mapping the
// directives in force use too) and a one-line summary. Both are functions
// of the verdict's own fields, so that the core writes them into every
// verdict and a replay re-derives them bit for bit. A summary names tools,
// agents, workflows and field paths; never a value an agent sent (verdicts
// hold none).

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// MaxSummaryLen is the longest summary, in characters (verdict schemas'
// maxLength): a longer one is cut, with an ellipsis.
const MaxSummaryLen = 300

// plan returns the verdict's affected fields and migration plan, decoded
// (empty when there are none).
func (v *SchemaVerdict) plan(id string) ([]string, toolschema.MigrationPlan, error) {
	affected := []string{}
	plan := toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{}, Blocked: []toolschema.MigrationBlocker{}}
	if len(v.Migration) > 0 && string(v.Migration) != "null" && !noSteps(v.Migration) {
		if err := json.Unmarshal(v.Migration, &plan); err != nil {
			return nil, toolschema.MigrationPlan{}, fmt.Errorf("%w: verdict %s: migration: %v", ErrBadEvent, id, err)
		}
	}
	if len(v.Affected) > 0 && string(v.Affected) != "null" && string(v.Affected) != "[]" {
		if err := json.Unmarshal(v.Affected, &affected); err != nil {
			return nil, toolschema.MigrationPlan{}, fmt.Errorf("%w: verdict %s: affected: %v", ErrBadEvent, id, err)
		}
	}
	if plan.Steps == nil {
		plan.Steps = []toolschema.MigrationStep{}
	}
	if plan.Blocked == nil {
		plan.Blocked = []toolschema.MigrationBlocker{}
	}
	return affected, plan, nil
}

// Describe returns what the verdict tells its agent to do: the action (the
// one its directive in force takes, DirectiveOf) and a one-line summary,
// such as "new tool github/get_issue, baselined" or "triage-bot must send
// perPage instead of per_page; migration available". It fails when the
// verdict's affected fields or migration do not decode.
func (v *SchemaVerdict) Describe() (guards.Action, string, error) {
	affected, plan, err := v.plan(v.InputEventID)
	if err != nil {
		return "", "", err
	}
	action, reason := toolschema.SchemaAction(v.Verdict, affected, plan)
	return action, clip(v.summary(action, reason, affected, plan)), nil
}

func (v *SchemaVerdict) summary(action guards.Action, reason string, affected []string, plan toolschema.MigrationPlan) string {
	who := v.AgentID
	if who == "" {
		who = "agents"
	}
	switch v.Verdict {
	case guards.NoBaseline:
		return "new tool " + v.ToolID + ", baselined"
	case guards.SchemaMatch:
		if v.AgentID != "" {
			// Only an agent that moved on to the current version gets a
			// SCHEMA_MATCH of its own (core's integrated).
			return v.AgentID + " integrated " + v.ToolID + "'s current version; its directive clears"
		}
		return v.ToolID + " matches its baseline"
	case guards.DriftOnUnusedFields:
		if v.AgentID == "" {
			return v.ToolID + " changed (" + changeCount(v.Changes) + "); no agent's usage is known"
		}
		return v.ToolID + " changed (" + changeCount(v.Changes) + "), on nothing " + v.AgentID + " uses"
	case guards.DriftOnUsedFields:
		if action == guards.ActionMigrate {
			return who + " must " + stepsInWords(affected, plan) + "; migration available"
		}
		return who + " must not call " + v.ToolID + ": " + reason
	}
	return v.ToolID + ": unknown verdict " + string(v.Verdict) + ", " + reason
}

// stepsInWords says what the migration's steps for the affected fields
// ask of the agent ("send perPage instead of per_page, send limit as
// integer"); never a value, not even a default the plan pins.
func stepsInWords(affected []string, plan toolschema.MigrationPlan) string {
	var out []string
	for _, s := range plan.Steps {
		if !touches(affected, s) {
			continue
		}
		switch s.Op {
		case toolschema.OpMove:
			out = append(out, "send "+s.To+" instead of "+s.Path)
		case toolschema.OpConvert:
			out = append(out, "send "+s.Path+" as "+s.Type)
		case toolschema.OpMapEnum:
			out = append(out, "send the new values of "+s.Path)
		case toolschema.OpAddIfAbsent:
			out = append(out, "send "+s.Path+" explicitly (its default changed)")
		default:
			out = append(out, string(s.Op)+" "+s.Path)
		}
	}
	if len(out) == 0 {
		return "migrate its payload"
	}
	return strings.Join(out, ", ")
}

// touches reports whether a step addresses one of the affected fields.
func touches(affected []string, s toolschema.MigrationStep) bool {
	for _, a := range affected {
		if a == s.Path || a == s.To || strings.HasPrefix(s.Path, a+".") || strings.HasPrefix(a, s.Path+".") {
			return true
		}
	}
	return false
}

// changeCount is "1 change" or "N changes" of a verdict's changes.
func changeCount(changes json.RawMessage) string {
	var list []json.RawMessage
	if json.Unmarshal(changes, &list) != nil || len(list) == 0 {
		return "no change listed"
	}
	if len(list) == 1 {
		return "1 change"
	}
	return fmt.Sprintf("%d changes", len(list))
}

// Describe returns what a composition verdict tells agents to do: the
// action (guards.CompositionAction) and a one-line summary, such as
// "workflow etl must not run: composed quality 77.38% < requirement
// 95.00%".
func (v *CompositionVerdict) Describe() (guards.Action, string) {
	action := guards.CompositionAction(v.Verdict)
	verb := "may run"
	if action != guards.ActionProceed {
		verb = "must not run"
	}
	why := v.Directive
	for _, p := range []string{"PROCEED: ", "HALT: "} {
		why = strings.TrimPrefix(why, p)
	}
	why = strings.TrimSuffix(lowerFirst(why), ".")
	return action, clip("workflow " + v.CompositionID + " " + verb + ": " + why)
}

// lowerFirst lower-cases a leading capitalised word ("Composed quality" →
// "composed quality"), not an acronym or an id.
func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	next, _ := utf8.DecodeRuneInString(s[n:])
	if unicode.IsUpper(r) && unicode.IsLower(next) {
		return string(unicode.ToLower(r)) + s[n:]
	}
	return s
}

// clip makes s one line of at most MaxSummaryLen characters.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= MaxSummaryLen {
		return s
	}
	r := []rune(s)
	return string(r[:MaxSummaryLen-1]) + "…"
}
