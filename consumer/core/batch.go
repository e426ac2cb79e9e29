package core

import (
	"slices"
	"strings"
)

// Batch applies consecutive inputs of one ordering key over one State, in
// stream order, with the writes of the inputs applied so far laid over it:
// input k+1 reads what input k wrote, as if k had been stored. The shell
// reads the store once per batch and writes each record once (Commits),
// instead of once per input.
//
// What the shell stores is a list of commits, to be written in order, each
// after the verdicts and telemetry of the whole batch were stored:
//
//   - A run of inputs that publish no verdict is one commit holding the
//     last write of each record (merged). Each record goes where its last
//     write was, so that a record that guards an input against being
//     applied twice (written last by the input: the quality record of a
//     contract, the outcome record of an invocation) is stored after the
//     writes of the input it guards. A crash between two writes of a
//     merged commit leaves records of the run before and after it: applied
//     again, those inputs recompute what they write (a usage record grows
//     again, a workflow is evaluated again against the stored state),
//     publish nothing (they published nothing the first time), and the
//     records that count (outcome, baseline, observed runs) skip what they
//     counted by their LastSeq.
//   - An input that publishes verdicts, or an operator's action, is a
//     commit of its own, with its writes as the core ordered them: those
//     orders are what makes such an input safe to apply again after a
//     crash between its writes (the chain head stored first, see
//     redoWrites; an operator's result first and last, see applyOperator).
//     The commits before it are stored first, so that it is applied again
//     on the state it was applied on.
//
// A Batch is used by one goroutine; the Core may serve many batches.
type Batch struct {
	core    *Core
	base    State
	records map[recordKey]batchRecord
	commits [][]Write
	run     []Write // the merged writes of the current run
}

// batchRecord is the last write of a record in the batch.
type batchRecord struct {
	record  any
	deleted bool
}

// NewBatch starts a batch of inputs over st.
func (c *Core) NewBatch(st State) *Batch {
	return &Batch{core: c, base: st, records: map[recordKey]batchRecord{}}
}

// Apply applies one input over the state and the batch's writes so far,
// and returns its effects. On an error (bad input, as Core.Apply) the
// input changes nothing and the batch goes on with the next.
func (b *Batch) Apply(in Input) (Effects, error) {
	eff, err := b.core.Apply(b, in)
	if err != nil {
		return Effects{}, err
	}
	for _, w := range eff.Writes {
		b.records[overlayKey(w.Bucket, w.IDs...)] = batchRecord{record: w.Record, deleted: w.Delete}
	}
	if len(eff.Verdicts) > 0 || in.Event.Operator != nil || writesTwice(eff.Writes) {
		b.flush()
		if len(eff.Writes) > 0 {
			b.commits = append(b.commits, eff.Writes)
		}
		return eff, nil
	}
	for _, w := range eff.Writes {
		b.merge(w)
	}
	return eff, nil
}

// Commits returns the writes to store, commit by commit, in order.
func (b *Batch) Commits() [][]Write {
	b.flush()
	return b.commits
}

// merge adds w to the current run: it replaces an earlier write of the
// same record and moves to the end. The merged write is deferred only if
// every write of the record in the run was.
func (b *Batch) merge(w Write) {
	k := overlayKey(w.Bucket, w.IDs...)
	if i := slices.IndexFunc(b.run, func(x Write) bool { return overlayKey(x.Bucket, x.IDs...) == k }); i >= 0 {
		w.Deferred = w.Deferred && b.run[i].Deferred
		b.run = slices.Delete(b.run, i, i+1)
	}
	b.run = append(b.run, w)
}

// flush ends the current run.
func (b *Batch) flush() {
	if len(b.run) > 0 {
		b.commits = append(b.commits, b.run)
		b.run = nil
	}
}

// writesTwice reports whether writes hold two writes of one record: their
// order matters, so they are not merged.
func writesTwice(writes []Write) bool {
	for i, w := range writes {
		k := overlayKey(w.Bucket, w.IDs...)
		for _, x := range writes[:i] {
			if overlayKey(x.Bucket, x.IDs...) == k {
				return true
			}
		}
	}
	return false
}

// lookup returns the batch's last write of a record: found says the batch
// wrote it, rec is nil when it deleted it.
func (b *Batch) lookup(k recordKey) (rec any, found bool) {
	r, ok := b.records[k]
	if !ok {
		return nil, false
	}
	if r.deleted {
		return nil, true
	}
	return r.record, true
}

// Baseline implements State.
func (b *Batch) Baseline(toolID string) (*BaselineRecord, bool) {
	if r, ok := b.lookup(overlayKey(Baselines, toolID)); ok {
		rec, _ := r.(*BaselineRecord)
		return rec, rec != nil
	}
	return b.base.Baseline(toolID)
}

// Usage implements State.
func (b *Batch) Usage(toolID, agentID string) (*UsageRecord, bool) {
	if r, ok := b.lookup(overlayKey(Usage, toolID, agentID)); ok {
		rec, _ := r.(*UsageRecord)
		return rec, rec != nil
	}
	return b.base.Usage(toolID, agentID)
}

// UsageOfTool implements State.
func (b *Batch) UsageOfTool(toolID string) []*UsageRecord {
	list := b.base.UsageOfTool(toolID)
	if len(b.records) == 0 {
		return list
	}
	out := make([]*UsageRecord, 0, len(list))
	seen := map[string]bool{}
	for _, u := range list {
		seen[u.AgentID] = true
		if r, ok := b.lookup(overlayKey(Usage, toolID, u.AgentID)); ok {
			if r == nil {
				continue // deleted by the batch
			}
			u = r.(*UsageRecord)
		}
		out = append(out, u)
	}
	for k, r := range b.records {
		if k.bucket != Usage || k.id != toolID || r.deleted {
			continue
		}
		if u := r.record.(*UsageRecord); !seen[u.AgentID] {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b *UsageRecord) int { return strings.Compare(a.AgentID, b.AgentID) })
	return out
}

// Quality implements State.
func (b *Batch) Quality(toolID string) (*QualityRecord, bool) {
	if r, ok := b.lookup(overlayKey(Quality, toolID)); ok {
		rec, _ := r.(*QualityRecord)
		return rec, rec != nil
	}
	return b.base.Quality(toolID)
}

// Outcomes implements State.
func (b *Batch) Outcomes(toolID string) (*OutcomeRecord, bool) {
	if r, ok := b.lookup(overlayKey(Outcomes, toolID)); ok {
		rec, _ := r.(*OutcomeRecord)
		return rec, rec != nil
	}
	return b.base.Outcomes(toolID)
}

// Workflow implements State.
func (b *Batch) Workflow(compositionID string) (*WorkflowRecord, bool) {
	if r, ok := b.lookup(overlayKey(Workflows, compositionID)); ok {
		rec, _ := r.(*WorkflowRecord)
		return rec, rec != nil
	}
	return b.base.Workflow(compositionID)
}

// WorkflowsUsing implements State.
func (b *Batch) WorkflowsUsing(toolID string) []*WorkflowRecord {
	list := b.base.WorkflowsUsing(toolID)
	if len(b.records) == 0 {
		return list
	}
	out := make([]*WorkflowRecord, 0, len(list))
	seen := map[string]bool{}
	for _, w := range list {
		seen[w.CompositionID] = true
		if r, ok := b.lookup(overlayKey(Workflows, w.CompositionID)); ok {
			if r == nil {
				continue
			}
			w = r.(*WorkflowRecord)
		}
		if slices.Contains(w.Tools, toolID) {
			out = append(out, w)
		}
	}
	for k, r := range b.records {
		if k.bucket != Workflows || r.deleted {
			continue
		}
		if w := r.record.(*WorkflowRecord); !seen[w.CompositionID] && slices.Contains(w.Tools, toolID) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *WorkflowRecord) int { return strings.Compare(a.CompositionID, b.CompositionID) })
	return out
}
