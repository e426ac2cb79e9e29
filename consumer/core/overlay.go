package core

import (
	"slices"
	"strings"
)

// overlay is a State with the writes of the input being applied laid over
// it, so that a later step of the same input reads what an earlier step
// wrote (a contract, then the workflows evaluated with it).
type overlay struct {
	State
	records map[recordKey]any // nil until the first write
}

func newOverlay(st State) *overlay { return &overlay{State: st} }

// recordKey names a record by bucket and ids: [tool], [tool, agent] or
// [composition]; more ids (none are written) would be joined in rest.
type recordKey struct {
	bucket   Bucket
	id, rest string
}

func overlayKey(b Bucket, ids ...string) recordKey {
	k := recordKey{bucket: b}
	if len(ids) > 0 {
		k.id = ids[0]
	}
	if len(ids) > 1 {
		k.rest = strings.Join(ids[1:], "\x00")
	}
	return k
}

// write records w in the effects, replacing an earlier write of the same
// record, and makes it visible to reads.
func (o *overlay) write(eff *Effects, w Write) {
	k := overlayKey(w.Bucket, w.IDs...)
	if _, ok := o.records[k]; ok {
		i := slices.IndexFunc(eff.Writes, func(x Write) bool { return overlayKey(x.Bucket, x.IDs...) == k })
		eff.Writes[i] = w
	} else {
		eff.Writes = append(eff.Writes, w)
	}
	if o.records == nil {
		o.records = map[recordKey]any{}
	}
	o.records[k] = w.Record
}

func (o *overlay) Baseline(toolID string) (*BaselineRecord, bool) {
	if r, ok := o.records[overlayKey(Baselines, toolID)]; ok {
		return r.(*BaselineRecord), true
	}
	return o.State.Baseline(toolID)
}

func (o *overlay) Usage(toolID, agentID string) (*UsageRecord, bool) {
	if r, ok := o.records[overlayKey(Usage, toolID, agentID)]; ok {
		return r.(*UsageRecord), true
	}
	return o.State.Usage(toolID, agentID)
}

func (o *overlay) UsageOfTool(toolID string) []*UsageRecord {
	list := o.State.UsageOfTool(toolID)
	out := make([]*UsageRecord, 0, len(list))
	seen := map[string]bool{}
	for _, u := range list {
		if r, ok := o.Usage(toolID, u.AgentID); ok {
			u = r
		}
		seen[u.AgentID] = true
		out = append(out, u)
	}
	for _, r := range o.records {
		if u, ok := r.(*UsageRecord); ok && u.ToolID == toolID && !seen[u.AgentID] {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b *UsageRecord) int { return strings.Compare(a.AgentID, b.AgentID) })
	return out
}

func (o *overlay) Quality(toolID string) (*QualityRecord, bool) {
	if r, ok := o.records[overlayKey(Quality, toolID)]; ok {
		return r.(*QualityRecord), true
	}
	return o.State.Quality(toolID)
}

func (o *overlay) Outcomes(toolID string) (*OutcomeRecord, bool) {
	if r, ok := o.records[overlayKey(Outcomes, toolID)]; ok {
		return r.(*OutcomeRecord), true
	}
	return o.State.Outcomes(toolID)
}

func (o *overlay) Workflow(compositionID string) (*WorkflowRecord, bool) {
	if r, ok := o.records[overlayKey(Workflows, compositionID)]; ok {
		return r.(*WorkflowRecord), true
	}
	return o.State.Workflow(compositionID)
}

func (o *overlay) WorkflowsUsing(toolID string) []*WorkflowRecord {
	list := o.State.WorkflowsUsing(toolID)
	out := make([]*WorkflowRecord, 0, len(list))
	seen := map[string]bool{}
	for _, w := range list {
		if r, ok := o.Workflow(w.CompositionID); ok {
			w = r
		}
		seen[w.CompositionID] = true
		if slices.Contains(w.Tools, toolID) {
			out = append(out, w)
		}
	}
	for _, r := range o.records {
		if w, ok := r.(*WorkflowRecord); ok && !seen[w.CompositionID] && slices.Contains(w.Tools, toolID) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *WorkflowRecord) int { return strings.Compare(a.CompositionID, b.CompositionID) })
	return out
}
