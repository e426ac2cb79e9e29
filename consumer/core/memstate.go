package core

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// MemState is a State in memory: the audit replay rebuilds state in one,
// and tests use it. It is safe for concurrent use.
type MemState struct {
	mu        sync.RWMutex
	baselines map[string]*BaselineRecord
	usage     map[string]map[string]*UsageRecord // tool → agent → record
	quality   map[string]*QualityRecord
	outcomes  map[string]*OutcomeRecord
	workflows map[string]*WorkflowRecord
}

// NewMemState returns an empty state.
func NewMemState() *MemState {
	return &MemState{
		baselines: map[string]*BaselineRecord{},
		usage:     map[string]map[string]*UsageRecord{},
		quality:   map[string]*QualityRecord{},
		outcomes:  map[string]*OutcomeRecord{},
		workflows: map[string]*WorkflowRecord{},
	}
}

// Store applies the writes of effects.
func (m *MemState) Store(writes []Write) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range writes {
		if w.Delete {
			if err := m.delete(w); err != nil {
				return err
			}
			continue
		}
		switch r := w.Record.(type) {
		case *BaselineRecord:
			m.baselines[r.ToolID] = r
		case *UsageRecord:
			if m.usage[r.ToolID] == nil {
				m.usage[r.ToolID] = map[string]*UsageRecord{}
			}
			m.usage[r.ToolID][r.AgentID] = r
		case *QualityRecord:
			m.quality[r.ToolID] = r
		case *OutcomeRecord:
			m.outcomes[r.ToolID] = r
		case *WorkflowRecord:
			m.workflows[r.CompositionID] = r
		default:
			return fmt.Errorf("core: cannot store %T", w.Record)
		}
	}
	return nil
}

// delete applies a deletion; the caller holds the lock.
func (m *MemState) delete(w Write) error {
	switch {
	case w.Bucket == Baselines && len(w.IDs) == 1:
		delete(m.baselines, w.IDs[0])
	case w.Bucket == Usage && len(w.IDs) == 2:
		delete(m.usage[w.IDs[0]], w.IDs[1])
	default:
		return fmt.Errorf("core: cannot delete a %s record %q", w.Bucket, w.IDs)
	}
	return nil
}

func (m *MemState) Baseline(toolID string) (*BaselineRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.baselines[toolID]
	return r, ok
}

func (m *MemState) Usage(toolID, agentID string) (*UsageRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.usage[toolID][agentID]
	return r, ok
}

func (m *MemState) UsageOfTool(toolID string) []*UsageRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*UsageRecord, 0, len(m.usage[toolID]))
	for _, r := range m.usage[toolID] {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *UsageRecord) int { return strings.Compare(a.AgentID, b.AgentID) })
	return out
}

func (m *MemState) Quality(toolID string) (*QualityRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.quality[toolID]
	return r, ok
}

func (m *MemState) Outcomes(toolID string) (*OutcomeRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.outcomes[toolID]
	return r, ok
}

func (m *MemState) Workflow(compositionID string) (*WorkflowRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.workflows[compositionID]
	return r, ok
}

func (m *MemState) WorkflowsUsing(toolID string) []*WorkflowRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*WorkflowRecord
	for _, r := range m.workflows {
		if slices.Contains(r.Tools, toolID) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *WorkflowRecord) int { return strings.Compare(a.CompositionID, b.CompositionID) })
	return out
}
