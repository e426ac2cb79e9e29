package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// UnversionedTool is the version of a tool observed in a tools/list
// result: MCP tools carry no version of their own.
const UnversionedTool = "unversioned"

// applySchema handles a schema observation: one tool, or every tool of a
// tools/list result.
//
//   - No baseline: NO_BASELINE, and the observation becomes the baseline.
//   - The fingerprint the tool presented at its last observation (a new
//     MCP session listing its tools again, a proxy re-listing after
//     list_changed, a second proxy of the same server): nothing new to
//     tell, so no verdict. The baseline record counts it (Seen, LastSeen).
//   - The fingerprint it presented last with other Tool fields outside the
//     fingerprint (_meta, icons; the digest ToolVersion.ToolFields): that
//     change, diffed against the last version, one verdict per agent
//     (DRIFT_ON_UNUSED_FIELDS: it breaks no call); a repeat of it is
//     counted as above. A record from before the digest takes it silently.
//   - The baseline's fingerprint after another one: SCHEMA_MATCH, and a
//     held drift that was reverted is released.
//   - Otherwise the diff against the baseline, one verdict per agent that
//     uses the tool (its affected fields and migration), or one without
//     agent when no usage is known. Drift that touches no agent's used
//     surface advances the baseline; drift on used fields holds it until an
//     operator accepts.
//
// So each (tool, agent, baseline fingerprint → current fingerprint) gets
// one verdict when the tool comes to present it; an agent that starts to
// use the tool later is judged by its invocations (applyInvocation).
//
// A tools/list result arrives on its server's subject, so in the server's
// lane; its tools belong to their own lanes. It is split into one
// observation per tool, the tool's id qualified with the server
// (events.QualifiedToolID: github's get_issue is github/get_issue, another
// tool than jira/get_issue), event ids derived from the list's id and the
// tool's id, so a redelivery republishes the same ones; published as
// telemetry, each tool's lane applies its own: one writer per tool, in
// stream order.
func (c *Core) applySchema(st State, in Input) (Effects, error) {
	obs := in.Event.SchemaObserved
	var eff Effects
	if !obs.IsList() {
		return eff, c.observeTool(newOverlay(st), in, obs.ToolID, obs.Version, *obs.Tool, &eff)
	}
	for _, tool := range obs.Tools {
		// Parsed here, so that a bad tool dead-letters the list it came in.
		if _, err := c.definition(ToolVersion{Tool: rawJSON(tool)}); err != nil {
			return Effects{}, fmt.Errorf("tool %q: %w", tool.Name, err)
		}
		t := tool
		// The tool is the server's: its id is qualified, and so is the
		// derived event id (a list of no server, if one came, keeps the
		// ids it had).
		id := events.QualifiedToolID(obs.Server, tool.Name)
		msg, err := c.opts.Names.NewSchemaObserved(events.Meta{
			ID:     events.DerivedID(in.Event.ID, "tools/list", id),
			Source: c.opts.Names.Prefix(),
			Time:   in.Event.Time,
		}, events.SchemaObserved{ToolID: id, Version: UnversionedTool, Server: obs.Server, Tool: &t})
		if err != nil {
			return Effects{}, fmt.Errorf("tool %q: %w", tool.Name, err)
		}
		eff.Telemetry = append(eff.Telemetry, msg)
	}
	return eff, nil
}

func (c *Core) observeTool(st *overlay, in Input, toolID, version string, tool events.MCPTool, eff *Effects) error {
	raw, err := tool.AppendJSON(nil) // json.Marshal(tool), without reflection
	if err != nil {
		return fmt.Errorf("%w: tool: %v", guards.ErrInvalid, err)
	}
	v := ToolVersion{Version: version, Tool: raw, Seq: in.Seq, EventID: in.Event.ID}
	def, fp, err := c.fingerprinted(v)
	if err != nil {
		return err
	}
	if v.ToolFields, err = c.toolFields(v); err != nil {
		return err
	}
	def.ID = toolID
	v.Fingerprint = fp

	prev, found := st.Baseline(toolID)
	if found && prev.LastSeq >= in.Seq {
		return nil // applied before this redelivery: its verdicts went out first
	}
	if found && prev.Current.Fingerprint == v.Fingerprint && !toolFieldsChanged(prev.Current, v) {
		eff.Writes = append(eff.Writes, Write{Bucket: Baselines, IDs: []string{toolID}, Record: countRepeat(prev, in, v)})
		return nil
	}
	if o, ok := st.Outcomes(toolID); ok && o.ChainSeq == in.Seq {
		defer redoWrites(eff, toolID)()
	}
	j := &judgement{c: c, st: st, in: in, eff: eff, toolID: toolID, v: v, def: def, prev: prev,
		current: guards.ToolSchema{ToolID: toolID, Version: version, SchemaFingerprint: v.Fingerprint}}
	var next *BaselineRecord
	seen := uint64(1)
	switch {
	case !found:
		next, err = j.firstVersion()
	case prev.Current.Fingerprint == v.Fingerprint:
		next, err = j.toolFieldsChange()
		seen = max(prev.Seen, 1) + 1 // the same fingerprint: counted on
	case prev.Baseline.Fingerprint == v.Fingerprint:
		next, err = j.backToBaseline()
	default:
		next, err = j.drift()
	}
	if err != nil {
		return err
	}
	next.LastSeq, next.LastEventID, next.Seen, next.LastSeen = in.Seq, in.Event.ID, seen, in.Event.Time
	next.remember(v)
	eff.Writes = append(eff.Writes, Write{Bucket: Baselines, IDs: []string{toolID}, Record: next})
	if !found || prev.Current.Fingerprint != v.Fingerprint {
		// A new version: the composition lane learns its schemas, for stage
		// compatibility, with the outcome counts as they stand.
		k := events.QualityCheckpoint{ToolID: toolID, ThroughSequence: in.Seq, Fingerprint: v.Fingerprint,
			InputSchema: tool.InputSchema, OutputSchema: tool.OutputSchema}
		if o, ok := st.Outcomes(toolID); ok {
			k.Calls, k.Successes = o.Calls, o.Successes
		}
		if err := c.checkpoint(eff, in, k); err != nil {
			return err
		}
	}
	return nil
}

// countRepeat is the baseline record after the version the tool presented
// last came again: its pair was judged when it came, so only the record
// changes, to count it (one write, no verdict, whatever the chain head). A
// current version recorded without its tool fields digest takes this one's.
func countRepeat(prev *BaselineRecord, in Input, v ToolVersion) *BaselineRecord {
	next := cloneBaseline(prev)
	next.Seen = max(prev.Seen, 1) + 1 // a record from before Seen: its current version was seen once at least
	next.LastSeen, next.LastSeq, next.LastEventID = in.Event.Time, in.Seq, in.Event.ID
	if !sameVersion(prev.Current, v) { // another label or Tool object of the same fingerprint
		next.Current = v
		next.remember(v)
	}
	return next
}

// judgement is one observation of a tool's version v (definition def) that
// is not a repeat, judged against the baseline record prev: each method
// publishes the verdicts of one case and returns the record that follows.
type judgement struct {
	c       *Core
	st      *overlay
	in      Input
	eff     *Effects
	toolID  string
	v       ToolVersion
	def     toolschema.ToolDefinition
	prev    *BaselineRecord // nil for a tool never observed
	current guards.ToolSchema
}

func (j *judgement) schemaVerdict(m guards.SchemaManifest, agent, baselineFP string, rep *toolschema.DriftReport) events.SchemaVerdict {
	return newSchemaVerdict(j.in, m, j.toolID, agent, baselineFP, j.v, rep)
}

func (j *judgement) publish(sv events.SchemaVerdict) error { return j.c.verdict(j.st, j.eff, j.in, sv) }

// perAgent runs judge for each agent whose usage of the tool is recorded,
// in order, or once for the tool (agent "", u nil) when none is.
func (j *judgement) perAgent(judge func(agent string, u *UsageRecord) error) error {
	agents := j.st.UsageOfTool(j.toolID)
	if len(agents) == 0 {
		return judge("", nil)
	}
	for _, u := range agents {
		if err := judge(u.AgentID, u); err != nil {
			return fmt.Errorf("agent %q: %w", u.AgentID, err)
		}
	}
	return nil
}

// surfaceOf is what agent usage u sends; nothing for no agent.
func surfaceOf(u *UsageRecord) toolschema.UsedSurface {
	if u == nil {
		return toolschema.UsedSurface{}
	}
	return u.Surface()
}

// firstVersion: NO_BASELINE, and the version becomes the baseline.
func (j *judgement) firstVersion() (*BaselineRecord, error) {
	m := guards.EvaluateSchema(j.current, nil)
	if err := j.publish(j.schemaVerdict(m, "", "", nil)); err != nil {
		return nil, err
	}
	return &BaselineRecord{ToolID: j.toolID, Baseline: j.v, Current: j.v}, nil
}

// toolFieldsChange is the current version with other Tool fields outside
// the fingerprint (_meta, icons): their change, judged against the current
// version, one verdict per agent (a drift the baseline is held on was
// reported when it came). Such a change breaks no call, and no agent's
// recorded usage depends on those fields, so it holds nothing: the
// baseline advances unless already held.
func (j *judgement) toolFieldsChange() (*BaselineRecord, error) {
	prev := j.prev
	curDef, err := j.c.definition(prev.Current)
	if err != nil {
		return nil, fmt.Errorf("current version of %q: %w", j.toolID, err)
	}
	curDef.ID = j.toolID
	err = j.perAgent(func(agent string, u *UsageRecord) error {
		rep, err := j.c.evaluateDrift(prev.Current, curDef, j.v, j.def, surfaceOf(u))
		if err != nil {
			return err
		}
		return j.publish(j.schemaVerdict(rep.Manifest, agent, prev.Current.Fingerprint, &rep))
	})
	if err != nil {
		return nil, err
	}
	next := cloneBaseline(prev)
	next.Current = j.v
	if !prev.Held {
		next.Baseline = j.v
	}
	return next, nil
}

// backToBaseline: the tool returns to its baseline from another version.
func (j *judgement) backToBaseline() (*BaselineRecord, error) {
	m := guards.EvaluateSchema(j.current, &guards.SchemaBaseline{BaselineFingerprint: j.prev.Baseline.Fingerprint})
	if err := j.publish(j.schemaVerdict(m, "", j.prev.Baseline.Fingerprint, nil)); err != nil {
		return nil, err
	}
	next := cloneBaseline(j.prev)
	next.Current, next.Held = j.v, false
	return next, nil
}

// drift is a version other than the baseline and the current one: judged
// against the baseline, one verdict per agent by what it uses (one for the
// tool when no usage is known). A drift on used fields holds the baseline,
// and each agent told of it is marked so that its invocations do not
// report it again.
func (j *judgement) drift() (*BaselineRecord, error) {
	prev := j.prev
	baseDef, err := j.c.definition(prev.Baseline)
	if err != nil {
		return nil, fmt.Errorf("baseline of %q: %w", j.toolID, err)
	}
	baseDef.ID = j.toolID
	held := false
	err = j.perAgent(func(agent string, u *UsageRecord) error {
		rep, err := j.c.evaluateDrift(prev.Baseline, baseDef, j.v, j.def, surfaceOf(u))
		if err != nil {
			return err
		}
		used := rep.Manifest.Verdict == guards.DriftOnUsedFields
		held = held || used
		if err := j.publish(j.schemaVerdict(rep.Manifest, agent, prev.Baseline.Fingerprint, &rep)); err != nil {
			return err
		}
		// The agent has been told of this pair: its invocations will
		// not report it again.
		if pair := prev.Baseline.Fingerprint + ">" + j.v.Fingerprint; u != nil && used && !u.notified(pair) {
			told := cloneUsage(u)
			told.notify(pair)
			told.CheckedAgainst = j.v.Fingerprint // what it sends was judged against this version just now
			j.eff.Writes = append(j.eff.Writes, Write{Bucket: Usage, IDs: []string{j.toolID, u.AgentID}, Record: told})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	next := cloneBaseline(prev)
	next.Current, next.Held = j.v, held
	if !held {
		next.Baseline = j.v
	}
	return next, nil
}

// redoWrites is for an input whose verdicts, and the chain head they
// moved, an earlier delivery stored before its other writes failed (they
// are not one transaction; the outcome record is written first): the
// outcome record's ChainSeq is the input's sequence. The
// input is applied again for those writes, and the func redoWrites returns
// then drops what it added to eff since: its verdicts, since a second
// copy, linked to the first, would be dropped by the stream as a duplicate
// while the chain head moved to it; and the tool's outcome record, which
// has them.
func redoWrites(eff *Effects, toolID string) func() {
	v0, w0 := len(eff.Verdicts), len(eff.Writes)
	return func() {
		eff.Verdicts = eff.Verdicts[:v0]
		eff.Writes = slices.Concat(eff.Writes[:w0], slices.DeleteFunc(eff.Writes[w0:], func(w Write) bool {
			return w.Bucket == Outcomes && w.IDs[0] == toolID
		}))
	}
}

// sameVersion reports whether b is the version a, observed again: the same
// fingerprint, version label, MCP Tool object and tool fields digest.
func sameVersion(a, b ToolVersion) bool {
	return a.Fingerprint == b.Fingerprint && a.Version == b.Version && bytes.Equal(a.Tool, b.Tool) && a.ToolFields == b.ToolFields
}

// toolFieldsChanged reports whether b, of a's fingerprint, changed the Tool
// fields outside it (_meta, icons). A version recorded without the digest
// (before it was kept) changed nothing: it takes b's, so that no deployed
// baseline reports at the upgrade what it never recorded.
func toolFieldsChanged(a, b ToolVersion) bool {
	return a.ToolFields != "" && a.ToolFields != b.ToolFields
}

// noMigration is the migration of a verdict without drift: no steps. It is
// shared by those verdicts, which only read it.
var noMigration = rawJSON(toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{}})

// newSchemaVerdict is the one place the core builds a schema verdict: m's
// decision about toolID's version cur against the baseline fingerprint
// baselineFP, for agent ("" for the tool), recording in as its input. rep,
// when not nil, gives its changes, affected fields and migration; without
// it the verdict has none (empty lists, no migration steps).
func newSchemaVerdict(in Input, m guards.SchemaManifest, toolID, agent, baselineFP string, cur ToolVersion, rep *toolschema.DriftReport) events.SchemaVerdict {
	sv := events.SchemaVerdict{
		Verdict:             m.Verdict,
		Directive:           m.Directive,
		ManifestDigest:      m.ManifestDigest,
		ToolID:              toolID,
		AgentID:             agent,
		Version:             cur.Version,
		BaselineFingerprint: baselineFP,
		CurrentFingerprint:  cur.Fingerprint,
		Changes:             json.RawMessage(`[]`),
		Affected:            json.RawMessage(`[]`),
		Migration:           noMigration,
		GuardVersion:        guards.Version,
	}
	sv.InputEventID, sv.InputSubject, sv.InputSequence = verdictInput(in)
	if rep != nil {
		sv.Changes = rawJSON(rep.Changes)
		sv.Affected = rawJSON(rep.Affected)
		sv.Migration = rawJSON(rep.Migration)
	}
	return sv
}

// verdict encodes a schema verdict, with its action and summary
// (SchemaVerdict.Describe), linked to the previous verdict about its tool,
// and adds it to the effects; the tool's outcome record takes the
// new chain head and the input's sequence (ChainSeq; ObservedSeq too for a
// schema observation).
func (c *Core) verdict(ov *overlay, eff *Effects, in Input, sv events.SchemaVerdict) error {
	var err error
	if sv.Action, sv.Summary, err = sv.Describe(); err != nil {
		return fmt.Errorf("describing verdict: %w", err)
	}
	o := &OutcomeRecord{ToolID: sv.ToolID}
	if prev, ok := ov.Outcomes(sv.ToolID); ok {
		o = cloneOutcomes(prev)
	}
	msg, err := c.opts.Names.NewSchemaVerdict(sv, in.Event.Time, events.WithPrevious(o.Chain))
	if err != nil {
		return fmt.Errorf("encoding verdict: %w", err)
	}
	if o.Chain, err = events.VerdictDigest(msg.Data); err != nil {
		return fmt.Errorf("digest of verdict %s: %w", msg.ID, err)
	}
	msg.Digest = o.Chain // computed once: the signer takes it
	o.ChainSeq = in.Seq
	if in.Event.SchemaObserved != nil {
		o.ObservedSeq = in.Seq
	}
	eff.Verdicts = append(eff.Verdicts, msg)
	ov.write(eff, Write{Bucket: Outcomes, IDs: []string{sv.ToolID}, Record: o})
	return nil
}
