package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

// Store is the processor's state: one View per state bucket, kept current
// by KV watches, with each record decoded once per revision. Reads never
// make a round trip; writes are compare-and-set against the revision that
// was read, so that no update is lost to another writer (a second worker
// process during a handover, a workflow re-evaluated by another key's
// event). Operators do not write the buckets: their actions are inputs
// (core/operator.go).
type Store struct {
	views map[core.Bucket]*View

	mu      sync.RWMutex
	decoded map[core.Bucket]map[string]decodedRecord
	// usageKeys indexes the usage bucket by tool token: tool → usage keys.
	usageKeys map[string]map[string]struct{}
	// workflowKeys are the keys of the workflows bucket.
	workflowKeys map[string]struct{}

	// Deferred outcome records (outcomes.go): log reads the stream for a
	// rebuild (nil: every write is stored at once); pending holds the
	// records as the live worker has them, by key; gen counts the times
	// they were all forgotten.
	log     *outcomeLog
	logger  zerolog.Logger
	pmu     sync.Mutex
	pending map[string]*pendingOutcome
	gen     uint64
}

type decodedRecord struct {
	rev    uint64
	record any
}

// OpenStore starts a View on every state bucket of res and waits until
// each has loaded its initial values (or ctx ends). ctx bounds the loading
// only: the views follow their buckets until Close, so that a caller may
// open the store under a start-up deadline.
func OpenStore(ctx context.Context, res *Resources, opts ViewOptions) (*Store, error) {
	s := &Store{
		views:        map[core.Bucket]*View{},
		decoded:      map[core.Bucket]map[string]decodedRecord{},
		usageKeys:    map[string]map[string]struct{}{},
		workflowKeys: map[string]struct{}{},
		pending:      map[string]*pendingOutcome{},
		logger:       zerolog.Ctx(ctx).With().Str("component", "state").Logger(),
	}
	if res.Telemetry != nil {
		names, err := events.NewNames(res.Config.Prefix)
		if err != nil {
			return nil, err
		}
		s.log = &outcomeLog{stream: res.Telemetry, names: names, readTimeout: opts.EffectiveWriteTimeout()}
	}
	buckets := map[core.Bucket]jetstream.KeyValue{
		core.Baselines: res.Baselines,
		core.Usage:     res.Usage,
		core.Quality:   res.Quality,
		core.Outcomes:  res.Outcomes,
		core.Workflows: res.Workflows,
	}
	for b, kv := range buckets {
		s.decoded[b] = map[string]decodedRecord{}
		o := opts
		switch b {
		case core.Usage:
			o.OnChange = s.indexUsage
		case core.Workflows:
			o.OnChange = s.indexWorkflow
		}
		v, err := NewView(context.WithoutCancel(ctx), kv, o)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.views[b] = v
	}
	for _, v := range s.views {
		if err := v.WaitReady(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// CatchUp waits until every view of the store has caught up with its
// bucket (View.CatchUp), and forgets the outcome counts held in memory of
// the tools for which of(toolID) is true (all when of is nil): another
// worker may have counted invocations of the lane's tools since.
func (s *Store) CatchUp(ctx context.Context, of func(toolID string) bool) error {
	for _, v := range s.views {
		if err := v.CatchUp(ctx); err != nil {
			return err
		}
	}
	if of == nil {
		s.ForgetOutcomes()
	} else {
		s.ForgetOutcomesOf(of)
	}
	return nil
}

// Close stops every view. It is idempotent.
func (s *Store) Close() {
	for _, v := range s.views {
		v.Close()
	}
}

// Staleness is the largest staleness of the store's views.
func (s *Store) Staleness() time.Duration {
	var worst time.Duration
	for _, v := range s.views {
		worst = max(worst, v.Staleness())
	}
	return worst
}

func (s *Store) indexUsage(key string, present bool) {
	tool, _, ok := strings.Cut(key, ".")
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if present {
		if s.usageKeys[tool] == nil {
			s.usageKeys[tool] = map[string]struct{}{}
		}
		s.usageKeys[tool][key] = struct{}{}
		return
	}
	delete(s.usageKeys[tool], key)
	delete(s.decoded[core.Usage], key)
}

func (s *Store) indexWorkflow(key string, present bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if present {
		s.workflowKeys[key] = struct{}{}
		return
	}
	delete(s.workflowKeys, key)
	delete(s.decoded[core.Workflows], key)
}

// get returns the record under key, decoded, and its revision (0 when the
// key has no value).
func (s *Store) get(b core.Bucket, key string) (any, uint64, error) {
	v := s.views[b]
	rev, ok := v.Revision(key)
	if !ok {
		return nil, 0, nil
	}
	s.mu.RLock()
	d, hit := s.decoded[b][key]
	s.mu.RUnlock()
	if hit && d.rev == rev {
		return d.record, rev, nil
	}
	e, ok := v.Get(key)
	if !ok {
		return nil, 0, nil
	}
	rec := newRecord(b)
	if err := json.Unmarshal(e.Value, rec); err != nil {
		return nil, 0, fmt.Errorf("%w: decoding %s record %s at revision %d: %w", ErrCorruptState, b, key, e.Revision, err)
	}
	s.mu.Lock()
	if cur, ok := s.decoded[b][key]; !ok || cur.rev < e.Revision {
		s.decoded[b][key] = decodedRecord{rev: e.Revision, record: rec}
	}
	s.mu.Unlock()
	return rec, e.Revision, nil
}

// ErrCorruptState is returned when a state record cannot be decoded: it was
// written by something other than toolsentry, or by a newer version.
var ErrCorruptState = errors.New("corrupt state record")

func newRecord(b core.Bucket) any {
	switch b {
	case core.Baselines:
		return new(core.BaselineRecord)
	case core.Usage:
		return new(core.UsageRecord)
	case core.Quality:
		return new(core.QualityRecord)
	case core.Outcomes:
		return new(core.OutcomeRecord)
	case core.Workflows:
		return new(core.WorkflowRecord)
	}
	panic("consumer: unknown bucket " + string(b))
}

// Txn is one application of the core: it implements core.State over the
// store, remembers the revision of every record it read, and writes the
// core's effects with compare-and-set against those revisions.
type Txn struct {
	s    *Store
	read map[readKey]uint64 // revision read (0: absent)
	err  error              // the first read error (a corrupt record)
	seq  uint64             // the input's stream sequence (0: not known)
	gen  uint64             // Store.gen at the start
}

// Begin starts a transaction that stores every write at once (no input:
// outcome records are read as stored).
func (s *Store) Begin() *Txn { return s.BeginAt(0) }

// BeginAt starts the transaction of the input at stream sequence seq:
// outcome records are read as the live worker has them before that input,
// and deferred writes are kept in memory (see outcomes.go).
func (s *Store) BeginAt(seq uint64) *Txn {
	s.pmu.Lock()
	gen := s.gen
	s.pmu.Unlock()
	return &Txn{s: s, read: make(map[readKey]uint64, 4), seq: seq, gen: gen}
}

// Err is the first error a read met; the core saw the record as absent.
func (t *Txn) Err() error { return t.err }

// readKey names a record a transaction read: its bucket and KV key.
type readKey struct {
	bucket core.Bucket
	key    string
}

func (t *Txn) lookup(b core.Bucket, ids ...string) (any, bool) {
	key, err := core.Key(ids...)
	if err != nil {
		t.fail(err)
		return nil, false
	}
	return t.lookupKey(b, key)
}

func (t *Txn) lookupKey(b core.Bucket, key string) (any, bool) {
	rec, rev, err := t.s.get(b, key)
	if err != nil {
		t.fail(err)
		return nil, false
	}
	if _, seen := t.read[readKey{b, key}]; !seen {
		t.read[readKey{b, key}] = rev
	}
	return rec, rec != nil
}

func (t *Txn) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// Baseline implements core.State.
func (t *Txn) Baseline(toolID string) (*core.BaselineRecord, bool) {
	r, ok := t.lookup(core.Baselines, toolID)
	if !ok {
		return nil, false
	}
	return r.(*core.BaselineRecord), true
}

// Usage implements core.State.
func (t *Txn) Usage(toolID, agentID string) (*core.UsageRecord, bool) {
	r, ok := t.lookup(core.Usage, toolID, agentID)
	if !ok {
		return nil, false
	}
	return r.(*core.UsageRecord), true
}

// UsageOfTool implements core.State.
func (t *Txn) UsageOfTool(toolID string) []*core.UsageRecord {
	tok, err := events.KeyToken(toolID)
	if err != nil {
		t.fail(err)
		return nil
	}
	t.s.mu.RLock()
	keys := make([]string, 0, len(t.s.usageKeys[tok]))
	for k := range t.s.usageKeys[tok] {
		keys = append(keys, k)
	}
	t.s.mu.RUnlock()
	var out []*core.UsageRecord
	for _, k := range keys {
		if r, ok := t.lookupKey(core.Usage, k); ok {
			out = append(out, r.(*core.UsageRecord))
		}
	}
	slices.SortFunc(out, func(a, b *core.UsageRecord) int { return strings.Compare(a.AgentID, b.AgentID) })
	return out
}

// Quality implements core.State.
func (t *Txn) Quality(toolID string) (*core.QualityRecord, bool) {
	r, ok := t.lookup(core.Quality, toolID)
	if !ok {
		return nil, false
	}
	return r.(*core.QualityRecord), true
}

// Outcomes implements core.State.
func (t *Txn) Outcomes(toolID string) (*core.OutcomeRecord, bool) { return t.outcomes(toolID) }

// Workflow implements core.State.
func (t *Txn) Workflow(compositionID string) (*core.WorkflowRecord, bool) {
	r, ok := t.lookup(core.Workflows, compositionID)
	if !ok {
		return nil, false
	}
	return r.(*core.WorkflowRecord), true
}

// WorkflowsUsing implements core.State.
func (t *Txn) WorkflowsUsing(toolID string) []*core.WorkflowRecord {
	t.s.mu.RLock()
	keys := make([]string, 0, len(t.s.workflowKeys))
	for k := range t.s.workflowKeys {
		keys = append(keys, k)
	}
	t.s.mu.RUnlock()
	var out []*core.WorkflowRecord
	for _, k := range keys {
		r, _, err := t.s.get(core.Workflows, k)
		if err != nil {
			t.fail(err)
			continue
		}
		if w, ok := r.(*core.WorkflowRecord); ok && slices.Contains(w.Tools, toolID) {
			t.lookupKey(core.Workflows, k) // remember the revision read
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *core.WorkflowRecord) int { return strings.Compare(a.CompositionID, b.CompositionID) })
	return out
}

// Commit writes the records with compare-and-set against the revisions
// this transaction read. A conflict (another writer came first) returns an
// error matching ErrConflict, after refreshing the views of the keys
// concerned, so that the caller can apply the input again on fresh state.
func (t *Txn) Commit(ctx context.Context, writes []core.Write) error {
	for _, w := range writes {
		key, err := core.Key(w.IDs...)
		if err != nil {
			return err
		}
		if w.Deferred && w.Bucket == core.Outcomes && t.s.log != nil && t.seq != 0 {
			t.deferOutcome(key, w.Record.(*core.OutcomeRecord))
			continue
		}
		v := t.s.views[w.Bucket]
		rev, read := t.read[readKey{w.Bucket, key}]
		if !read {
			rev, _ = v.Revision(key)
		}
		if w.Delete {
			if err := t.delete(ctx, v, w.Bucket, key, rev); err != nil {
				return err
			}
			continue
		}
		data, err := json.Marshal(w.Record)
		if err != nil {
			return fmt.Errorf("encoding %s record %s: %w", w.Bucket, key, err)
		}
		newRev, err := v.CompareAndSet(ctx, key, data, rev)
		if errors.Is(err, ErrConflict) {
			if w.Bucket == core.Outcomes {
				t.s.forgetOutcome(key)
			}
			if rerr := v.Refresh(ctx, key); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
		if err != nil {
			return err
		}
		t.read[readKey{w.Bucket, key}] = newRev
		if o, ok := w.Record.(*core.OutcomeRecord); ok {
			t.s.storedOutcome(key, o, newRev, t.gen)
		}
		t.s.mu.Lock()
		if cur, ok := t.s.decoded[w.Bucket][key]; !ok || cur.rev < newRev {
			t.s.decoded[w.Bucket][key] = decodedRecord{rev: newRev, record: w.Record}
		}
		t.s.mu.Unlock()
	}
	return nil
}

// delete deletes a record at the revision read (nothing to do when it was
// absent); a conflict is handled as Commit's.
func (t *Txn) delete(ctx context.Context, v *View, b core.Bucket, key string, rev uint64) error {
	if rev == 0 {
		return nil
	}
	err := v.DeleteAt(ctx, key, rev)
	if errors.Is(err, ErrConflict) {
		if rerr := v.Refresh(ctx, key); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err != nil {
		return err
	}
	t.read[readKey{b, key}] = 0
	t.s.mu.Lock()
	delete(t.s.decoded[b], key)
	t.s.mu.Unlock()
	return nil
}
