package core

import (
	"errors"
	"fmt"
	"slices"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// applyContract stores a tool's declared quality contract and evaluates
// every workflow that uses the tool, publishing a verdict for each whose
// verdict or composed quality changed.
func (c *Core) applyContract(st State, in Input) (Effects, error) {
	k := in.Event.Contract
	var eff Effects
	ov := newOverlay(st)
	q := &QualityRecord{ToolID: k.ToolID}
	if prev, ok := st.Quality(k.ToolID); ok {
		if prev.Contract != nil && prev.Contract.Seq >= in.Seq {
			return eff, nil // applied before this redelivery
		}
		q = cloneQuality(prev)
	}
	q.Contract = &Contract{
		Accuracy:                k.Accuracy,
		Determinism:             k.Determinism,
		OutputSchemaHash:        k.OutputSchemaHash,
		ExpectedInputSchemaHash: k.ExpectedInputSchemaHash,
		EventID:                 in.Event.ID,
		Seq:                     in.Seq,
	}
	ov.write(&eff, Write{Bucket: Quality, IDs: []string{k.ToolID}, Record: q})
	return c.reevaluateGuarded(ov, in, k.ToolID, eff)
}

// applyCheckpoint records a tool's measured outcomes, as its lane counted
// them through one invocation, and evaluates every workflow that uses the
// tool, publishing a verdict for each whose verdict or composed quality
// changed. A checkpoint through a sequence already applied (a republished
// one, beyond the stream's duplicate window) changes nothing.
func (c *Core) applyCheckpoint(st State, in Input) (Effects, error) {
	k := in.Event.QualityCheckpoint
	var eff Effects
	ov := newOverlay(st)
	q := &QualityRecord{ToolID: k.ToolID}
	if prev, ok := st.Quality(k.ToolID); ok {
		if prev.Through >= k.ThroughSequence {
			return eff, nil
		}
		q = cloneQuality(prev)
	}
	q.Calls, q.Successes, q.Through = k.Calls, k.Successes, k.ThroughSequence
	if k.Fingerprint != "" {
		q.Fingerprint, q.InputSchema, q.OutputSchema = k.Fingerprint, k.InputSchema, k.OutputSchema
	}
	ov.write(&eff, Write{Bucket: Quality, IDs: []string{k.ToolID}, Record: q})
	return c.reevaluateGuarded(ov, in, k.ToolID, eff)
}

// applyWorkflow stores a declared workflow and publishes its verdict. A
// workflow that is malformed or meaningless is bad input; one whose tools
// have no contract or measurement yet is stored, and evaluated when they
// arrive.
func (c *Core) applyWorkflow(st State, in Input) (Effects, error) {
	decl := in.Event.Workflow
	var eff Effects
	if prev, ok := st.Workflow(decl.CompositionID); ok && prev.DeclaredSeq >= in.Seq {
		return eff, nil
	}
	w, err := workflow.DecodeWorkflow(decl.Raw)
	if err != nil {
		return Effects{}, err
	}
	if err := w.ValidateShape(); err != nil {
		return Effects{}, err
	}
	if w.CompositionID != decl.CompositionID {
		return Effects{}, fmt.Errorf("%w: composition_id %q differs from the event's key %q", guards.ErrInvalid, w.CompositionID, decl.CompositionID)
	}
	rec := &WorkflowRecord{
		CompositionID: decl.CompositionID,
		Workflow:      decl.Raw,
		Tools:         w.Structure.ToolIDs(),
		DeclaredSeq:   in.Seq,
	}
	if prev, ok := st.Workflow(decl.CompositionID); ok {
		rec.Chain = prev.Chain
		rec.Observed = prev.Observed // runs seen in traces outlive a new declaration (observed.go)
		if prev.Last != nil {
			last := *prev.Last
			rec.Last = &last
		}
	}
	m, pending, err := c.evaluate(st, w)
	var observed *workflow.ObservedQuality
	if err == nil && pending == "" {
		m, observed, err = c.withObserved(st, w, rec, m)
	}
	switch {
	case errors.Is(err, guards.ErrInvalid):
		return Effects{}, err // the declaration itself is wrong
	case err != nil:
		return Effects{}, err
	case pending != "":
		rec.Pending = pending
	default:
		// A declaration always gets its verdict: it is the receipt.
		if rec.Chain, err = c.compositionVerdict(&eff, in, decl.CompositionID, m, rec.Chain, observed); err != nil {
			return Effects{}, err
		}
		rec.Last = lastVerdict(m, in)
	}
	eff.Writes = append(eff.Writes, Write{Bucket: Workflows, IDs: []string{decl.CompositionID}, Record: rec})
	return eff, nil
}

// reevaluateGuarded reevaluates the workflows that use toolID after its
// quality record changed (in eff), and writes that record last. It is what
// makes a redelivery a no-op, and the writes are not one transaction: if a
// workflow's write failed, the redelivery must evaluate again. It then
// publishes nothing for the workflows written (their last verdict is
// current) and the same verdict, byte for byte, for the others (their
// chain head did not move), which the stream drops as a duplicate.
func (c *Core) reevaluateGuarded(ov *overlay, in Input, toolID string, eff Effects) (Effects, error) {
	if err := c.reevaluate(ov, in, toolID, &eff); err != nil {
		return Effects{}, err
	}
	i := slices.IndexFunc(eff.Writes, func(w Write) bool { return w.Bucket == Quality && w.IDs[0] == toolID })
	guard := eff.Writes[i]
	eff.Writes = append(slices.Delete(eff.Writes, i, i+1), guard)
	return eff, nil
}

// reevaluate evaluates the workflows that use toolID against the state
// (with this input's writes) and publishes the verdicts that changed.
func (c *Core) reevaluate(ov *overlay, in Input, toolID string, eff *Effects) error {
	for _, rec := range ov.WorkflowsUsing(toolID) {
		w, err := workflow.DecodeWorkflow(rec.Workflow)
		if err != nil {
			continue // stored only after it decoded: a newer guard may refuse it; its declaration said so
		}
		m, pending, err := c.evaluate(ov, w)
		var observed *workflow.ObservedQuality
		if err == nil && pending == "" {
			m, observed, err = c.withObserved(ov, w, rec, m)
		}
		if err != nil {
			pending = err.Error() // the state, not this input, makes it unevaluable
		}
		next := cloneWorkflow(rec)
		if pending != "" {
			if rec.Pending == pending {
				continue
			}
			next.Pending = pending
			ov.write(eff, Write{Bucket: Workflows, IDs: []string{rec.CompositionID}, Record: next})
			continue
		}
		if rec.Last != nil && rec.Pending == "" && rec.Last.Verdict == m.Verdict &&
			rec.Last.ManifestDigest == m.ManifestDigest &&
			guards.PyFixed(rec.Last.ComposedQuality, 3) == guards.PyFixed(m.ComposedQuality, 3) {
			continue // nothing a subscriber would act on changed
		}
		if next.Chain, err = c.compositionVerdict(eff, in, rec.CompositionID, m, rec.Chain, observed); err != nil {
			return err
		}
		next.Pending, next.Last = "", lastVerdict(m, in)
		ov.write(eff, Write{Bucket: Workflows, IDs: []string{rec.CompositionID}, Record: next})
	}
	return nil
}

func lastVerdict(m workflow.WorkflowManifest, in Input) *LastVerdict {
	return &LastVerdict{Verdict: m.Verdict, ComposedQuality: m.ComposedQuality, ManifestDigest: m.ManifestDigest, EventID: in.Event.ID}
}

// evaluate completes a workflow's tool entries from state and evaluates it.
// pending is set, with a nil error, when a tool has neither a declared entry
// nor a contract in state, or has no accuracy and no outcomes yet.
func (c *Core) evaluate(st State, w workflow.Workflow) (workflow.WorkflowManifest, string, error) {
	tools := make(map[string]workflow.WorkflowTool, len(w.Tools))
	for id, t := range w.Tools {
		tools[id] = t
	}
	for _, id := range w.Structure.ToolIDs() {
		t, declared := tools[id]
		q, measured := st.Quality(id)
		if !declared {
			if !measured || q.Contract == nil {
				return workflow.WorkflowManifest{}, fmt.Sprintf("tool %q has no quality contract yet", id), nil
			}
			acc := q.Contract.Accuracy
			t = workflow.WorkflowTool{
				Accuracy:                &acc,
				Determinism:             q.Contract.Determinism,
				OutputSchemaHash:        q.Contract.OutputSchemaHash,
				ExpectedInputSchemaHash: q.Contract.ExpectedInputSchemaHash,
			}
			if t.OutputSchemaHash == "" && t.ExpectedInputSchemaHash == "" {
				// The observed schemas, as the tool's lane checkpointed
				// them: never the tool's live baseline, which another
				// lane writes.
				t.InputSchema, t.OutputSchema = q.InputSchema, q.OutputSchema
			}
		}
		if t.Observed == nil && measured && q.Calls > 0 {
			t.Observed = &workflow.Observed{Calls: q.Calls, Successes: q.Successes}
		}
		tools[id] = t
	}
	w.Tools = tools
	m, err := workflow.EvaluateWorkflow(w)
	if errors.Is(err, workflow.ErrUnquantified) {
		return workflow.WorkflowManifest{}, err.Error(), nil
	}
	return m, "", err
}

// compositionVerdict encodes a composition verdict linked to prev, the
// digest of the workflow's previous verdict, adds it to the effects and
// returns its digest: the workflow record's new chain head.
func (c *Core) compositionVerdict(eff *Effects, in Input, compositionID string, m workflow.WorkflowManifest, prev string, observed *workflow.ObservedQuality) (string, error) {
	failureModes := m.FailureModes
	if failureModes == nil {
		failureModes = []workflow.FailureMode{}
	}
	cv := events.CompositionVerdict{
		Verdict:              m.Verdict,
		Directive:            m.Directive,
		ManifestDigest:       m.ManifestDigest,
		CompositionID:        compositionID,
		ComposedQuality:      m.ComposedQuality,
		ComposedQualityLower: m.ComposedQualityLower,
		ComposedQualityUpper: m.ComposedQualityUpper,
		Confidence:           m.Confidence,
		FailureModes:         rawJSON(failureModes),
		Observed:             observed,
		GuardVersion:         guards.Version,
	}
	cv.InputEventID, cv.InputSubject, cv.InputSequence = verdictInput(in)
	cv.Action, cv.Summary = cv.Describe()
	msg, err := c.opts.Names.NewCompositionVerdict(cv, in.Event.Time, events.WithPrevious(prev))
	if err != nil {
		return "", fmt.Errorf("encoding verdict: %w", err)
	}
	digest, err := events.VerdictDigest(msg.Data)
	if err != nil {
		return "", fmt.Errorf("digest of verdict %s: %w", msg.ID, err)
	}
	msg.Digest = digest // computed once: the signer takes it
	eff.Verdicts = append(eff.Verdicts, msg)
	return digest, nil
}
