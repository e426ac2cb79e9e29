package core

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// applyInvocation handles one tool call.
//
//   - The agent's used surface grows by the paths (and types) it sent and
//     the output paths it read; the usage record is written only when it
//     grows or when the agent is told of a drift.
//   - An agent integrated against another fingerprint than the tool's
//     current one, or sending fields the current schema lacks (the seed's
//     silent rename) or types it does not accept, gets DRIFT_ON_USED_FIELDS
//     with the migration of its payload, once per (agent, tool, fingerprint
//     pair), not per call.
//   - An outcome counts towards the tool's measured quality; every
//     QualityEvery outcomes, the counts are published as a quality
//     checkpoint, which the composition lane applies to the workflows that
//     use the tool (see applyCheckpoint).
func (c *Core) applyInvocation(st State, in Input) (eff Effects, err error) {
	inv := in.Event.Invocation
	ov := newOverlay(st)
	if o, ok := st.Outcomes(inv.ToolID); ok && o.ChainSeq == in.Seq {
		defer redoWrites(&eff, inv.ToolID)() // the drift verdict it told went out
	}

	// u is the store's record as long as nothing may change it (an agent
	// calling as it always did), else a copy.
	prev, found := st.Usage(inv.ToolID, inv.AgentID)
	u, grew := prev, false
	own := func() {
		if found {
			u = cloneUsage(prev)
		} else {
			u = &UsageRecord{ToolID: inv.ToolID, AgentID: inv.AgentID, Input: map[string][]string{}, SendsRecorded: true}
		}
		grew = u.grow(inv, !found)
	}
	if !found || prev.grows(inv) {
		own()
	}
	dirty := grew

	if rec, ok := st.Baseline(inv.ToolID); ok {
		if u == prev && mayTell(rec, u, inv, grew) {
			own()
		}
		notified, err := c.checkAgentDrift(ov, in, rec, u, grew, &eff)
		if err != nil {
			return Effects{}, err
		}
		dirty = dirty || notified
	}
	if dirty {
		ov.write(&eff, Write{Bucket: Usage, IDs: []string{u.ToolID, u.AgentID}, Record: u})
	}

	if inv.Outcome != nil {
		// Read through the overlay: a drift verdict above moved the
		// tool's chain head into it.
		o := &OutcomeRecord{ToolID: inv.ToolID}
		if prev, ok := ov.Outcomes(inv.ToolID); ok {
			o = cloneOutcomes(prev)
		}
		if o.Count(inv, in.Seq) {
			// Only the count changed: the shell may keep the record in
			// memory (the stream holds the invocation), except at a
			// checkpoint, which records the counts as they stand.
			checkpoint := o.Calls%c.opts.QualityEvery == 0
			ov.write(&eff, Write{Bucket: Outcomes, IDs: []string{inv.ToolID}, Record: o,
				Deferred: !checkpoint && len(eff.Verdicts) == 0})
			if checkpoint {
				if err := c.checkpoint(&eff, in, events.QualityCheckpoint{
					ToolID: inv.ToolID, Calls: o.Calls, Successes: o.Successes, ThroughSequence: in.Seq,
				}); err != nil {
					return Effects{}, err
				}
			}
		}
	}
	return eff, nil
}

// checkpoint adds a quality checkpoint for the composition lane.
func (c *Core) checkpoint(eff *Effects, in Input, k events.QualityCheckpoint) error {
	msg, err := c.opts.Names.NewQualityCheckpoint(k, in.Event.Time)
	if err != nil {
		return fmt.Errorf("encoding quality checkpoint: %w", err)
	}
	eff.Telemetry = append(eff.Telemetry, msg)
	return nil
}

// Count adds the invocation's outcome, if it has one, to the counts of
// r, unless the input at seq was counted already (seq at or below
// LastSeq). It reports whether it counted. The live core and a shell that
// rebuilds a deferred outcome record from the stream count the same way.
func (r *OutcomeRecord) Count(inv *events.Invocation, seq uint64) bool {
	if inv.Outcome == nil || seq <= r.LastSeq {
		return false
	}
	r.Calls++
	if succeeded(inv.Outcome) {
		r.Successes++
	}
	r.LastSeq = seq
	return true
}

// succeeded is the agent's judgement when it gave one, else the status.
func succeeded(o *events.Outcome) bool {
	if o.Correct != nil {
		return *o.Correct
	}
	return o.Status == "ok"
}

// grows reports whether grow would add anything, reading u only.
func (u *UsageRecord) grows(inv *events.Invocation) bool {
	if u.omits(inv) {
		return true
	}
	for p, t := range inv.ArgumentTypes {
		names, seen := u.Input[p]
		if !seen || t&toolschema.TypeAny&^typeSetOf(names) != 0 {
			return true
		}
	}
	for _, p := range inv.UsedFields {
		if _, seen := u.Input[p]; !seen {
			return true
		}
	}
	for _, p := range inv.OutputFieldsRead {
		if !slices.Contains(u.Output, p) {
			return true
		}
	}
	return false
}

// typeSetOf is the set of the type names that are names of types.
func typeSetOf(names []string) toolschema.TypeSet {
	var t toolschema.TypeSet
	for _, n := range names {
		if ts, err := toolschema.ParseType(n); err == nil {
			t |= ts
		}
	}
	return t
}

// mayTell reports whether checkAgentDrift may change u: the agent names
// another fingerprint than the current one, or what it sends was not yet
// judged against the current version. Otherwise checkAgentDrift only reads
// u, and applyInvocation lets it read the store's record.
func mayTell(rec *BaselineRecord, u *UsageRecord, inv *events.Invocation, grew bool) bool {
	fp := inv.SchemaFingerprint
	return fp != "" && fp != rec.Current.Fingerprint || u.CheckedAgainst != rec.Current.Fingerprint || grew
}

// sends reports whether the invocation sent the input path p.
func sends(inv *events.Invocation, p string) bool {
	_, ok := inv.ArgumentTypes[p]
	return ok || slices.Contains(inv.UsedFields, p)
}

// omits reports whether the invocation leaves out an input path that
// every recorded call sent so far (see UsageRecord.Omitted).
func (u *UsageRecord) omits(inv *events.Invocation) bool {
	if !u.SendsRecorded {
		return false
	}
	for p := range u.Input {
		if _, omitted := slices.BinarySearch(u.Omitted, p); !omitted && !sends(inv, p) {
			return true
		}
	}
	return false
}

// omit records that a call did not send the input path p.
func (u *UsageRecord) omit(p string) bool {
	i, omitted := slices.BinarySearch(u.Omitted, p)
	if !omitted {
		u.Omitted = slices.Insert(u.Omitted, i, p)
	}
	return !omitted
}

// grow adds what the invocation shows of the agent's surface and reports
// whether anything was new; first says it is the agent's first recorded
// call, so that a path it sends was not omitted before.
func (u *UsageRecord) grow(inv *events.Invocation, first bool) bool {
	grew := false
	if u.SendsRecorded {
		for p := range u.Input {
			if !sends(inv, p) && u.omit(p) {
				grew = true
			}
		}
	}
	add := func(path string, t toolschema.TypeSet) {
		names, seen := u.Input[path]
		if !seen && !first && u.SendsRecorded {
			u.omit(path) // the calls before this one did not send it
		}
		merged := names
		for _, n := range t.Names() {
			if !slices.Contains(merged, n) {
				merged = append(merged, n)
			}
		}
		if !seen || len(merged) != len(names) {
			slices.Sort(merged)
			if merged == nil {
				merged = []string{}
			}
			u.Input[path] = merged
			grew = true
		}
	}
	for p, t := range inv.ArgumentTypes {
		add(p, t)
	}
	for _, p := range inv.UsedFields {
		add(p, 0)
	}
	for _, p := range inv.OutputFieldsRead {
		if !slices.Contains(u.Output, p) {
			u.Output = append(u.Output, p)
			grew = true
		}
	}
	slices.Sort(u.Output)
	return grew
}

// checkAgentDrift compares what the agent does with the tool's current
// version and adds a DRIFT_ON_USED_FIELDS verdict for a fingerprint pair
// the agent was not told of yet; grew says the surface just grew. It
// reports whether u changed.
func (c *Core) checkAgentDrift(ov *overlay, in Input, rec *BaselineRecord, u *UsageRecord, grew bool, eff *Effects) (bool, error) {
	inv := in.Event.Invocation
	cur := rec.Current
	curDef, err := c.definition(cur)
	if err != nil {
		return false, fmt.Errorf("current version of %q: %w", rec.ToolID, err)
	}
	curDef.ID = rec.ToolID
	changed := false

	tell := func(oldFP string, oldDef toolschema.ToolDefinition) error {
		pair := oldFP + ">" + cur.Fingerprint
		if u.notified(pair) {
			return nil
		}
		rep, err := toolschema.EvaluateDrift(oldDef, curDef, u.Surface())
		if err != nil {
			return err
		}
		u.notify(pair) // judged once per pair, whatever the verdict
		changed = true
		if rep.Manifest.Verdict != guards.DriftOnUsedFields {
			return nil
		}
		return c.verdict(ov, eff, in, newSchemaVerdict(in, rep.Manifest, rec.ToolID, u.AgentID, oldFP, cur, &rep))
	}

	// The agent says which version it integrated against. When that
	// version is known, its diff is the one to report, and the check of
	// undeclared fields below does not report the same drift again.
	toldByFingerprint := false
	if fp := inv.SchemaFingerprint; fp != "" && fp != cur.Fingerprint {
		if old, ok := rec.known(fp); ok {
			oldDef, err := c.definition(old)
			if err != nil {
				return false, err
			}
			oldDef.ID = rec.ToolID
			if err := tell(fp, oldDef); err != nil {
				return false, err
			}
			toldByFingerprint = true
		}
	}

	// What the agent sends, against what the tool declares now. The answer
	// changes only when the surface grows or the tool changes.
	if u.CheckedAgainst == cur.Fingerprint && !grew {
		return changed, nil
	}
	types := u.InputTypes()
	deviations, err := toolschema.InputDeviations(curDef.Input, types)
	if err != nil {
		return false, err
	}
	if len(deviations) > 0 && !toldByFingerprint && grew {
		integrated, err := c.integrated(ov, in, rec, curDef, u, deviations, eff)
		if err != nil {
			return false, err
		}
		if integrated {
			return true, nil
		}
	}
	if len(deviations) > 0 && !toldByFingerprint {
		observed, err := toolschema.ObservedInputTool(curDef, types)
		if err != nil {
			return false, err
		}
		observedFP, err := toolschema.Fingerprint(observed)
		if err != nil {
			return false, err
		}
		if err := tell(observedFP, observed); err != nil {
			return false, err
		}
	}
	if u.CheckedAgainst != cur.Fingerprint {
		u.CheckedAgainst = cur.Fingerprint
		changed = true
	}
	return changed, nil
}

// integrated handles an agent that moved on to the tool's current version:
// this invocation, which grew the agent's surface, fits the current input
// schema (no path it sends is undeclared or of a type the schema refuses),
// while the recorded surface still holds the old fields (deviations), and
// the agent was told of a drift to the current version. Its recorded
// surface then moves to the current version (the deviating paths go, so
// later drifts are judged on what it sends now), and a SCHEMA_MATCH for the
// agent, judged against the current fingerprint, says that it integrated:
// the directive projector replaces its (tool, agent) directive with that
// PROCEED. It reports whether it did so.
func (c *Core) integrated(ov *overlay, in Input, rec *BaselineRecord, curDef toolschema.ToolDefinition, u *UsageRecord, deviations []string, eff *Effects) (bool, error) {
	inv := in.Event.Invocation
	cur := rec.Current
	if inv.SchemaFingerprint != "" && inv.SchemaFingerprint != cur.Fingerprint {
		return false, nil
	}
	told := slices.ContainsFunc(u.Notified, func(pair string) bool { return strings.HasSuffix(pair, ">"+cur.Fingerprint) })
	if !told {
		return false, nil
	}
	sent := make(map[string]toolschema.TypeSet, len(inv.ArgumentTypes)+len(inv.UsedFields))
	for p, t := range inv.ArgumentTypes {
		sent[p] = t
	}
	for _, p := range inv.UsedFields {
		if _, ok := sent[p]; !ok {
			sent[p] = 0
		}
	}
	if len(sent) == 0 {
		return false, nil
	}
	own, err := toolschema.InputDeviations(curDef.Input, sent)
	if err != nil || len(own) > 0 {
		return false, err
	}
	for _, p := range deviations {
		delete(u.Input, p)
	}
	u.Omitted = slices.DeleteFunc(u.Omitted, func(p string) bool { _, ok := u.Input[p]; return !ok })
	u.CheckedAgainst = cur.Fingerprint
	m := guards.EvaluateSchema(guards.ToolSchema{ToolID: rec.ToolID, Version: cur.Version, SchemaFingerprint: cur.Fingerprint, UsedFields: u.Surface().Input},
		&guards.SchemaBaseline{BaselineFingerprint: cur.Fingerprint})
	return true, c.verdict(ov, eff, in, newSchemaVerdict(in, m, rec.ToolID, u.AgentID, cur.Fingerprint, cur, nil))
}
