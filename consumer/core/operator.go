package core

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// This file applies the operators' actions (events.OperatorAction): they
// arrive on the tool's subject, so the tool's lane applies them in stream
// order with the tool's observations and invocations, and a replay of the
// stream re-derives every verdict after them.
//
//	baseline_accepted  the current version, if it is still the one the
//	                   operator saw, becomes the baseline; the hold is
//	                   released; a SCHEMA_MATCH verdict for the tool
//	                   follows (the directives projector marks the agents'
//	                   directives about that version accepted)
//	baseline_reset     the baseline record is deleted: the next
//	                   observation is NO_BASELINE; no verdict
//	agent_migrated     the agent's recorded surface moves to the current
//	                   version (its migration applied, what the version
//	                   does not declare dropped) and a SCHEMA_MATCH
//	                   verdict for the agent clears its directive
//	agent_forgotten    the agent's usage record is deleted; no verdict
//
// The result, applied or refused and why, is recorded in the tool's
// outcome record (OutcomeRecord.Operator), which the command that
// published the action polls until it is Done. Effectively once: the outcome record keeps
// the sequence of the last action applied, and every input of the tool at
// or below it was applied before (the lane applies a tool's inputs in
// order, each fully before the next), so a redelivery of any of them
// changes nothing.

// The results of an operator action (OperatorResult.Result).
const (
	OperatorApplied   = "applied"   // the state changed as asked
	OperatorUnchanged = "unchanged" // nothing to do: the state was already so
	OperatorRefused   = "refused"   // the state is not what the operator saw
)

// OperatorResult is the last operator action applied to a tool, in its
// outcome record.
type OperatorResult struct {
	Seq      uint64 `json:"seq"`      // the action's stream sequence
	EventID  string `json:"event_id"` // its CloudEvent id
	Action   string `json:"action"`   // its kind: baseline_accepted, baseline_reset, agent_migrated, agent_forgotten
	AgentID  string `json:"agent_id,omitempty"`
	Operator string `json:"operator"`
	Reason   string `json:"reason,omitempty"`
	Result   string `json:"result"`  // OperatorApplied, OperatorUnchanged or OperatorRefused
	Message  string `json:"message"` // what happened, in words
	// Verdict is the id of the verdict the action published, if any.
	Verdict string `json:"verdict,omitempty"`
	// Done says every write of the action is stored (applyOperator).
	Done bool `json:"done,omitempty"`
}

// afterOperator reports whether in is an input of a tool's lane that was
// applied before the last operator action applied to the tool (see the
// file comment): it changes nothing again.
func afterOperator(st State, in Input) bool {
	if in.Seq == 0 {
		return false
	}
	var tool string
	switch ev := in.Event; {
	case ev.Operator != nil:
		tool = ev.Operator.ToolID
	case ev.Invocation != nil:
		tool = ev.Invocation.ToolID
	case ev.SchemaObserved != nil && !ev.SchemaObserved.IsList():
		tool = ev.SchemaObserved.ToolID
	default:
		return false
	}
	o, ok := st.Outcomes(tool)
	return ok && o.Operator != nil && o.Operator.Seq > in.Seq
}

// applyOperator applies one operator action.
//
// Its writes begin and end with the tool's outcome record: first with the
// result (Done false), which marks the action applied, then the baseline or
// usage writes, then the result again with Done true, which says every
// write is stored (the command that published the action waits for it).
// A redelivery of an action whose first write was stored but not the rest
// applies it again for those writes, without publishing its verdict again
// and keeping the result recorded first.
func (c *Core) applyOperator(st State, in Input) (Effects, error) {
	op := in.Event.Operator
	ov := newOverlay(st)
	res := OperatorResult{Seq: in.Seq, EventID: in.Event.ID, Action: in.Event.Kind.String(), AgentID: op.AgentID,
		Operator: op.Operator, Reason: op.Reason}
	var eff Effects
	var err error
	switch in.Event.Kind {
	case events.KindBaselineAccepted:
		err = c.acceptBaseline(ov, in, &eff, &res)
	case events.KindBaselineReset:
		resetBaseline(ov, op, &eff, &res)
	case events.KindAgentMigrated:
		err = c.markMigrated(ov, in, &eff, &res)
	case events.KindAgentForgotten:
		forgetAgent(ov, op, &eff, &res)
	default:
		return Effects{}, fmt.Errorf("%w: %s", ErrUnsupported, in.Event.Type)
	}
	if err != nil {
		return Effects{}, err
	}
	for _, v := range eff.Verdicts {
		res.Verdict = v.ID
	}
	o := &OutcomeRecord{ToolID: op.ToolID}
	if prev, ok := ov.Outcomes(op.ToolID); ok {
		o = cloneOutcomes(prev)
	}
	o.Operator = &res
	if prev, ok := st.Outcomes(op.ToolID); ok && prev.Operator != nil && prev.Operator.Seq == in.Seq {
		o = prev // applied before, up to some of its writes: what it recorded stands
		eff.Verdicts = nil
	}
	writes := slices.DeleteFunc(eff.Writes, func(w Write) bool { return w.Bucket == Outcomes && w.IDs[0] == op.ToolID })
	done := cloneOutcomes(o)
	r := *o.Operator
	r.Done = true
	done.Operator = &r
	eff.Writes = slices.Concat([]Write{{Bucket: Outcomes, IDs: []string{op.ToolID}, Record: o}}, writes,
		[]Write{{Bucket: Outcomes, IDs: []string{op.ToolID}, Record: done}})
	return eff, nil
}

// acceptBaseline makes the tool's current version its baseline if it is
// the version the operator accepted.
func (c *Core) acceptBaseline(ov *overlay, in Input, eff *Effects, res *OperatorResult) error {
	op := in.Event.Operator
	rec, found := ov.Baseline(op.ToolID)
	switch {
	case !found:
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("%s has no baseline: nothing accepted", op.ToolID)
		return nil
	case rec.Current.Fingerprint != op.Fingerprint:
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("the current version of %s is %s, not %s that was accepted: nothing accepted; look again (toolsentry baseline show %s) and accept again",
			op.ToolID, rec.Current.Fingerprint, op.Fingerprint, op.ToolID)
		return nil
	case !rec.Held && rec.Baseline.Fingerprint == rec.Current.Fingerprint:
		res.Result, res.Message = OperatorUnchanged, fmt.Sprintf("nothing held: the baseline %s of %s is the current version", rec.Baseline.Fingerprint, op.ToolID)
		return nil
	}
	next := cloneBaseline(rec)
	old := next.Baseline
	next.Accept()
	next.LastSeq = in.Seq
	if err := c.matchVerdict(ov, eff, in, next.Current, ""); err != nil {
		return err
	}
	eff.Writes = append(eff.Writes, Write{Bucket: Baselines, IDs: []string{op.ToolID}, Record: next})
	res.Result = OperatorApplied
	res.Message = fmt.Sprintf("baseline of %s %s → %s", op.ToolID, old.Fingerprint, next.Baseline.Fingerprint)
	if v := next.Baseline.Version; v != "" {
		res.Message += " (version " + v + ")"
	}
	return nil
}

// matchVerdict adds the SCHEMA_MATCH verdict of the tool's version v, for
// agent or, with agent "", for the tool: what the tool's directive, or the
// agent's, becomes after an operator's action.
func (c *Core) matchVerdict(ov *overlay, eff *Effects, in Input, v ToolVersion, agent string) error {
	toolID := in.Event.Operator.ToolID
	m := guards.EvaluateSchema(guards.ToolSchema{ToolID: toolID, Version: v.Version, SchemaFingerprint: v.Fingerprint},
		&guards.SchemaBaseline{BaselineFingerprint: v.Fingerprint})
	return c.verdict(ov, eff, in, newSchemaVerdict(in, m, toolID, agent, v.Fingerprint, v, nil))
}

// resetBaseline deletes the tool's baseline record, if it is still the
// baseline the operator saw (when the action names one).
func resetBaseline(ov *overlay, op *events.OperatorAction, eff *Effects, res *OperatorResult) {
	rec, found := ov.Baseline(op.ToolID)
	switch {
	case !found:
		res.Result, res.Message = OperatorUnchanged, fmt.Sprintf("%s has no baseline: nothing to reset", op.ToolID)
		return
	case op.Fingerprint != "" && rec.Baseline.Fingerprint != op.Fingerprint:
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("the baseline of %s is %s, not %s that was to be reset: nothing reset",
			op.ToolID, rec.Baseline.Fingerprint, op.Fingerprint)
		return
	}
	eff.Writes = append(eff.Writes, Write{Bucket: Baselines, IDs: []string{op.ToolID}, Delete: true})
	res.Result = OperatorApplied
	res.Message = fmt.Sprintf("baseline %s of %s deleted; the next observation becomes the baseline", rec.Baseline.Fingerprint, op.ToolID)
	if rec.Held {
		res.Message += "; the drift to " + rec.Current.Fingerprint + " that was held is forgotten"
	}
}

// forgetAgent deletes the agent's usage record of the tool.
func forgetAgent(ov *overlay, op *events.OperatorAction, eff *Effects, res *OperatorResult) {
	u, found := ov.Usage(op.ToolID, op.AgentID)
	if !found {
		res.Result, res.Message = OperatorUnchanged, fmt.Sprintf("no usage of %s by %s recorded: nothing to forget", op.ToolID, op.AgentID)
		return
	}
	eff.Writes = append(eff.Writes, Write{Bucket: Usage, IDs: []string{op.ToolID, op.AgentID}, Delete: true})
	res.Result = OperatorApplied
	res.Message = fmt.Sprintf("usage of %s by %s forgotten (%d input and %d output paths); its next call records it anew",
		op.ToolID, op.AgentID, len(u.Input), len(u.Output))
}

// markMigrated moves the agent's recorded surface to the tool's current
// version and clears its directive with a SCHEMA_MATCH verdict for the
// agent.
//
// The surface moves along the migration of the drift the agent was told
// of last (its notified fingerprint pair ending at the current version,
// when that older version is still known): moved fields take their new
// path, converted ones their new type. Then every path the current version
// does not declare, or declares with a type that refuses what was seen, is
// dropped: the agent's next calls record what it really sends.
func (c *Core) markMigrated(ov *overlay, in Input, eff *Effects, res *OperatorResult) error {
	op := in.Event.Operator
	rec, found := ov.Baseline(op.ToolID)
	if !found {
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("%s has no baseline: no version to migrate to", op.ToolID)
		return nil
	}
	cur := rec.Current
	if op.Fingerprint != "" && op.Fingerprint != cur.Fingerprint {
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("the current version of %s is %s, not %s that %s was to be migrated to: nothing changed",
			op.ToolID, cur.Fingerprint, op.Fingerprint, op.AgentID)
		return nil
	}
	prev, found := ov.Usage(op.ToolID, op.AgentID)
	if !found {
		res.Result, res.Message = OperatorRefused, fmt.Sprintf("no usage of %s by %s recorded: nothing to migrate", op.ToolID, op.AgentID)
		return nil
	}
	curDef, err := c.definition(cur)
	if err != nil {
		return fmt.Errorf("current version of %q: %w", op.ToolID, err)
	}
	curDef.ID = op.ToolID
	u := cloneUsage(prev)
	moved := 0
	if from, ok := lastDriftTo(rec, u, cur.Fingerprint); ok {
		fromDef, err := c.definition(from)
		if err != nil {
			return fmt.Errorf("version %s of %q: %w", from.Fingerprint, op.ToolID, err)
		}
		fromDef.ID = op.ToolID
		rep, err := toolschema.EvaluateDrift(fromDef, curDef, u.Surface())
		if err != nil {
			return err
		}
		moved = u.migrate(rep.Migration)
	}
	deviations, err := toolschema.InputDeviations(curDef.Input, u.InputTypes())
	if err != nil {
		return err
	}
	for _, p := range deviations {
		delete(u.Input, p)
	}
	u.CheckedAgainst = cur.Fingerprint
	if err := c.matchVerdict(ov, eff, in, cur, op.AgentID); err != nil {
		return err
	}
	ov.write(eff, Write{Bucket: Usage, IDs: []string{op.ToolID, op.AgentID}, Record: u})
	res.Result = OperatorApplied
	res.Message = fmt.Sprintf("%s marked migrated to %s of %s: %d field(s) moved, %d dropped", op.AgentID, cur.Fingerprint, op.ToolID, moved, len(deviations))
	if len(deviations) > 0 {
		res.Message += " (" + strings.Join(deviations, ", ") + ")"
	}
	return nil
}

// lastDriftTo returns the known version the agent was last told it
// drifted from to the version fp (its notified pairs, newest last).
func lastDriftTo(rec *BaselineRecord, u *UsageRecord, fp string) (ToolVersion, bool) {
	for i := len(u.Notified) - 1; i >= 0; i-- {
		old, cur, ok := strings.Cut(u.Notified[i], ">")
		if !ok || cur != fp || old == fp {
			continue
		}
		if v, ok := rec.known(old); ok {
			return v, true
		}
	}
	if rec.Baseline.Fingerprint != fp {
		return rec.Baseline, true // held: the agent is judged against the baseline
	}
	return ToolVersion{}, false
}

// migrate applies a migration plan's moves and conversions to the input
// surface and returns how many paths it changed.
func (u *UsageRecord) migrate(plan toolschema.MigrationPlan) int {
	n := 0
	for _, s := range plan.Steps {
		types, ok := u.Input[s.Path]
		switch {
		case !ok:
		case s.Op == toolschema.OpMove && s.To != "":
			delete(u.Input, s.Path)
			u.Input[s.To] = types
			n++
		case s.Op == toolschema.OpConvert && s.Type != "":
			u.Input[s.Path] = []string{s.Type}
			n++
		}
	}
	return n
}
