package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

// Deferred outcome records.
//
// Every invocation with an outcome changes its tool's outcome record (the
// counts behind measured quality), and storing it each time would cost a
// compare-and-set per invocation: the largest part of the pipeline's cost.
// The core marks those writes Deferred (core.Write) between quality
// checkpoints, and the store keeps them in memory instead. What makes that
// safe is that the telemetry stream is the log of every count: a stored
// outcome record counts exactly the invocations up to its LastSeq, and the
// invocations of one tool after it are the messages on the tool's
// invocation subject. So when the store has no record of a tool in memory
// (after a start, a crash, a handover of its partition, a conflict) it
// rebuilds it: the stored record, plus every invocation of the tool between
// its LastSeq and the input being applied, read from the stream and counted
// as the core counts them (core.OutcomeRecord.Count). Every input of the
// tool's lane before the current one has been applied (per-key order), so
// the rebuilt record is the one the live worker had.
//
// The record is stored at every quality checkpoint (every QualityEvery
// outcomes), whenever a schema verdict moves the tool's chain head, every
// ServiceOptions.OutcomeFlushInterval (30s) and at a graceful stop
// (Store.Flush); a rebuild reads at most the invocations since the last of
// those, which the stream's retention must keep. One case counts differently: an invocation that
// decodes but that was dead-lettered by the core or after MaxDeliver
// transient failures was not counted live, and a rebuild counts it.

// outcomeLog reads a tool's invocations from the telemetry stream.
type outcomeLog struct {
	stream jetstream.Stream
	names  events.Names
	// readTimeout bounds each read of the stream (the store's
	// ViewOptions.WriteTimeout): a request whose reply was lost with its
	// connection fails fast, and the handler is retried after the
	// reconnect, instead of waiting out rebuildTimeout while every later
	// message of its key waits behind it.
	readTimeout time.Duration
}

// rebuildTimeout bounds one rebuild.
const rebuildTimeout = 30 * time.Second

// pendingOutcome is a tool's outcome record as the live worker has it: rec
// (nil when the tool has none) counts every invocation applied so far; base
// is the revision of the stored record it builds on; dirty says rec holds
// counts the stored record does not.
type pendingOutcome struct {
	rec   *core.OutcomeRecord
	base  uint64
	dirty bool
}

// rebuild counts the invocations of the tool after the stored record (nil:
// none) and before sequence before. They are stored on two subjects: the
// stored form <prefix>.telemetry.invocation.<p>.<tool> and, for messages
// stored before the stream had its subject transform, the published form
// (events.Names.StoredTelemetryFilters). The two are read side by side and
// counted in stream order.
func (l *outcomeLog) rebuild(ctx context.Context, toolID string, stored *core.OutcomeRecord, before uint64) (*core.OutcomeRecord, int, error) {
	filters, err := l.names.StoredTelemetryFilters(events.KindInvocation, toolID)
	if err != nil {
		return nil, 0, err
	}
	rec := &core.OutcomeRecord{ToolID: toolID}
	if stored != nil {
		c := *stored
		rec = &c
	}
	// next[i] is the next message on filters[i] below before, nil when
	// there is none.
	next := make([]*jetstream.RawStreamMsg, len(filters))
	fetch := func(i int, from uint64) error {
		next[i] = nil
		if from >= before {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, l.readTimeout)
		raw, err := l.stream.GetMsg(rctx, from, jetstream.WithGetMsgSubject(filters[i]))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rebuilding the outcome counts of %q from %s: %w", toolID, filters[i], err)
		}
		if raw.Sequence < before {
			next[i] = raw
		}
		return nil
	}
	for i := range filters {
		if err := fetch(i, rec.LastSeq+1); err != nil {
			return nil, 0, err
		}
	}
	read := 0
	for {
		i := -1
		for j, m := range next {
			if m != nil && (i < 0 || m.Sequence < next[i].Sequence) {
				i = j
			}
		}
		if i < 0 {
			return rec, read, nil
		}
		raw := next[i]
		read++
		// An invocation that does not decode was dead-lettered live, not
		// counted.
		if ev, err := l.names.Decode(raw.Subject, raw.Header, raw.Data); err == nil && ev.Invocation != nil {
			rec.Count(ev.Invocation, raw.Sequence)
		}
		if err := fetch(i, raw.Sequence+1); err != nil {
			return nil, read, err
		}
	}
}

// outcomes returns the tool's outcome record as it stands before the
// transaction's input, and remembers the stored revision it builds on: from
// memory, else the stored record rebuilt from the stream (and then kept in
// memory).
func (t *Txn) outcomes(toolID string) (*core.OutcomeRecord, bool) {
	key, err := core.Key(toolID)
	if err != nil {
		t.fail(err)
		return nil, false
	}
	rk := readKey{core.Outcomes, key}
	s := t.s
	if s.log == nil || t.seq == 0 {
		r, ok := t.lookupKey(core.Outcomes, key)
		if !ok {
			return nil, false
		}
		return r.(*core.OutcomeRecord), true
	}
	s.pmu.Lock()
	p, ok := s.pending[key]
	s.pmu.Unlock()
	if !ok {
		r, rev, err := s.get(core.Outcomes, key)
		if err != nil {
			t.fail(err)
			return nil, false
		}
		stored, _ := r.(*core.OutcomeRecord)
		ctx, cancel := context.WithTimeout(context.Background(), rebuildTimeout)
		rec, read, err := s.log.rebuild(ctx, toolID, stored, t.seq)
		cancel()
		if err != nil {
			t.fail(err)
			return nil, false
		}
		p = &pendingOutcome{rec: rec, base: rev, dirty: read > 0}
		if stored == nil && rec.Calls == 0 && rec.LastSeq == 0 {
			p.rec = nil
		}
		s.pmu.Lock()
		if s.gen == t.gen {
			if _, raced := s.pending[key]; !raced {
				s.pending[key] = p
			}
		}
		s.pmu.Unlock()
		if read > 0 {
			s.logger.Debug().Str("tool", toolID).Int("invocations", read).Uint64("before_seq", t.seq).
				Msg("rebuilt the outcome counts from the stream")
		}
	}
	if _, seen := t.read[rk]; !seen {
		t.read[rk] = p.base
	}
	if p.rec == nil {
		return nil, false
	}
	return p.rec, true
}

// deferOutcome keeps a deferred outcome record in memory, over the stored
// revision the transaction read. It is dropped if the store forgot its
// records since the transaction began: a rebuild then counts it.
func (t *Txn) deferOutcome(key string, rec *core.OutcomeRecord) {
	s := t.s
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.gen != t.gen {
		return
	}
	s.pending[key] = &pendingOutcome{rec: rec, base: t.read[readKey{core.Outcomes, key}], dirty: true}
}

// storedOutcome records that rec is stored at revision rev (by a
// transaction begun at gen).
func (s *Store) storedOutcome(key string, rec *core.OutcomeRecord, rev uint64, gen uint64) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.log == nil {
		return
	}
	if s.gen != gen {
		delete(s.pending, key)
		return
	}
	s.pending[key] = &pendingOutcome{rec: rec, base: rev}
}

// forgetOutcome drops the tool's record from memory (after a conflict): the
// next read rebuilds it.
func (s *Store) forgetOutcome(key string) {
	s.pmu.Lock()
	delete(s.pending, key)
	s.pmu.Unlock()
}

// ForgetOutcomes drops every outcome record held in memory; the next read
// of each rebuilds it from the stored record and the stream. A worker that
// takes over a partition calls it (through CatchUp): another worker may
// have counted its tools' invocations meanwhile.
func (s *Store) ForgetOutcomes() {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.gen++
	clear(s.pending)
}

// ForgetOutcomesOf forgets the outcome records held in memory of the tools
// for which of(toolID) is true, and those it cannot tell (no record).
func (s *Store) ForgetOutcomesOf(of func(toolID string) bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.gen++ // a transaction begun before does not store its record in memory
	for k, p := range s.pending {
		if p.rec == nil || of(p.rec.ToolID) {
			delete(s.pending, k)
		}
	}
}

// Flush stores every outcome record that holds counts the stored one does
// not, with compare-and-set on the revision it builds on (a conflict means
// another worker stored a newer one: a rebuild covers the difference). The
// service calls it every OutcomeFlushInterval while it runs, and at a
// graceful stop after the engine drained, so that the next start reads the
// counts instead of rebuilding them. It is safe while inputs are applied.
// It reports how many it stored.
func (s *Store) Flush(ctx context.Context) (int, error) {
	s.pmu.Lock()
	dirty := map[string]*pendingOutcome{}
	for k, p := range s.pending {
		if p.dirty && p.rec != nil {
			dirty[k] = p
		}
	}
	s.pmu.Unlock()
	v := s.views[core.Outcomes]
	var (
		mu     sync.Mutex
		n      int
		failed int
		first  error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failed++; first == nil {
			first = err
		}
	}
	// The writes are independent round trips: a few at a time, so that a
	// fleet of tools is stored within flushTimeout on a busy server.
	wp := pool.New().WithMaxGoroutines(flushConcurrency)
	for key, p := range dirty {
		if ctx.Err() != nil {
			fail(fmt.Errorf("storing the outcome counts of %s: %w", key, ctx.Err()))
			continue
		}
		wp.Go(func() {
			data, err := json.Marshal(p.rec)
			if err != nil {
				fail(err)
				return
			}
			rev, err := v.CompareAndSet(ctx, key, data, p.base)
			if err != nil {
				if !errors.Is(err, ErrConflict) {
					fail(fmt.Errorf("storing the outcome counts of %s: %w", key, err))
				}
				return
			}
			s.pmu.Lock()
			switch cur := s.pending[key]; {
			case cur == p:
				s.pending[key] = &pendingOutcome{rec: p.rec, base: rev}
			case cur != nil && cur.base == p.base:
				// Counted on meanwhile, over what was just stored: the
				// stored record is a prefix of it.
				s.pending[key] = &pendingOutcome{rec: cur.rec, base: rev, dirty: cur.dirty}
			}
			s.pmu.Unlock()
			mu.Lock()
			n++
			mu.Unlock()
		})
	}
	wp.Wait()
	switch {
	case failed == 1:
		return n, first
	case failed > 1:
		// One line however large the fleet: the count and the first cause.
		return n, fmt.Errorf("the outcome counts of %d of %d tools were not stored; the first: %w", failed, len(dirty), first)
	}
	return n, nil
}

// flushConcurrency bounds the outcome writes of one Flush in flight.
const flushConcurrency = 16

// PendingOutcomes is the number of tools whose outcome counts are held in
// memory and not stored yet.
func (s *Store) PendingOutcomes() int {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	n := 0
	for _, p := range s.pending {
		if p.dirty {
			n++
		}
	}
	return n
}
