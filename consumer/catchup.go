package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// A lane's catch-up. The telemetry stream records the first sequence its
// layout stored (Resources.Layout.Since). Below it, messages may be stored
// under an earlier layout: the 4-token published form of a stream that had
// no transform, or another partition count, whose token no lane of this
// layout reads. A lane whose checkpoint is below Since reads that range
// first, with the filters of its kinds in every form, applies the messages
// of its own keys (a tool lane's: those whose key token KeyPartition gives
// its partition) and skips the others' and everything at or above Since;
// it commits at most Since, then runs on its own filters from there. Per
// key the order holds: a key's messages below Since, then the rest.
//
// Where the catch-up starts is fixed once per layout, before any lane of it
// commits (layoutStart): the lowest checkpoint of the earlier layout's
// lanes, or, with none, after the ack floor of the workers before lanes.

// catchUpSpec is what a lane reads below since.
type catchUpSpec struct {
	since   uint64
	filters []string
	// mine reports whether a message below since is this lane's to apply.
	mine func(m *engine.Message) bool
}

// newCatchUp returns the catch-up of lane under layout, whose stream
// stores under it from since; nil when nothing precedes it.
func newCatchUp(layout engine.Layout, lane engine.Lane, since uint64) *catchUpSpec {
	if since <= 1 {
		return nil
	}
	kinds := layout.ToolKinds
	if lane.Composition {
		kinds = layout.CompositionKinds
	}
	c := &catchUpSpec{since: since, mine: func(*engine.Message) bool { return true }}
	for _, k := range kinds {
		base := layout.Prefix + ".telemetry." + k
		c.filters = append(c.filters, base+".*.*", base+".*")
	}
	if !lane.Composition {
		n, p := layout.Partitions, lane.Partition
		c.mine = func(m *engine.Message) bool { return engine.KeyPartition(engine.LastToken(m), n) == p }
	}
	return c
}

// catchUpCheckpointer commits at most since: what the catch-up skipped at
// or above it is the lane's own filters' to read.
type catchUpCheckpointer struct {
	*engine.Lease
	since uint64
}

func (c catchUpCheckpointer) Commit(ctx context.Context, checkpoint uint64) error {
	return c.Lease.Commit(ctx, min(checkpoint, c.since))
}

// catchUpPoll is how often a catch-up checks whether it is done.
const catchUpPoll = 200 * time.Millisecond

// catchUp runs the lane's catch-up on lease until everything of the lane
// below since is applied, then commits since.
func (l *Lanes) catchUp(ctx context.Context, lease *engine.Lease, r *laneRun, opts engine.Options) error {
	c := r.spec.catchUp
	log := zerolog.Ctx(ctx)
	start := lease.Checkpoint()
	log.Info().Uint64("from", start).Uint64("until", c.since).Msg("reading what the stream stored under its earlier layout first")
	h := engine.BatchFunc(func(ctx context.Context, key string, msgs []*engine.Message) []error {
		// One call holds one key: its messages are all this lane's or none.
		var mine []*engine.Message
		at := make([]int, 0, len(msgs))
		for i, m := range msgs {
			if m.StreamSeq < c.since && c.mine(m) {
				mine = append(mine, m)
				at = append(at, i)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		res := r.spec.h.HandleBatch(ctx, key, mine)
		if res == nil {
			return nil
		}
		out := make([]error, len(msgs))
		for j, i := range at {
			out[i] = res[j]
		}
		// Skipped messages after a transient failure wait with it.
		for j, i := range at {
			if res[j] != nil && !errors.Is(res[j], engine.ErrPermanent) {
				for k := i + 1; k < len(msgs); k++ {
					if out[k] == nil {
						out[k] = res[j]
					}
				}
				break
			}
		}
		return out
	})
	src := engine.Source{Stream: r.spec.src.Stream, FilterSubjects: c.filters}
	eng, err := engine.New(l.js, src, catchUpCheckpointer{lease, c.since}, h, opts)
	if err != nil {
		return err
	}
	r.setEngine(eng)
	defer r.setEngine(nil)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t := time.NewTicker(catchUpPoll)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			if err == nil && ctx.Err() == nil {
				err = errors.New("the catch-up's engine stopped")
			}
			return cmpOr(err, ctx.Err())
		case <-t.C:
		}
		if !l.caughtUp(ctx, eng, c.since) {
			continue
		}
		if err := eng.Close(); err != nil {
			return err
		}
		<-done
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := lease.Commit(cctx, max(lease.Checkpoint(), c.since))
		cancel()
		if err != nil {
			return fmt.Errorf("committing the end of the catch-up: %w", err)
		}
		log.Info().Uint64("checkpoint", lease.Checkpoint()).Msg("caught up with the earlier layout")
		return nil
	}
}

// caughtUp reports whether eng applied everything of its filters below
// since: its checkpoint reached since, or it holds nothing and the server
// has nothing left for it.
func (l *Lanes) caughtUp(ctx context.Context, eng *engine.Engine, since uint64) bool {
	st := eng.Stats()
	if st.Checkpoint >= since {
		return true
	}
	if st.Held > 0 || st.Running > 0 {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := eng.Pending(pctx)
	return err == nil && n == 0 && eng.Stats().Held == 0
}

func cmpOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// layoutKey is the leases bucket's entry that fixes where the catch-up of
// the stream's current layout starts.
const layoutKey = "layout"

// layoutStartValue is the entry under layoutKey.
type layoutStartValue struct {
	Layout          string `json:"layout"`
	ToolsFrom       uint64 `json:"tools_from"`
	CompositionFrom uint64 `json:"composition_from"`
}

// laneStart returns the start of a telemetry lane never committed under the
// current layout: where its catch-up starts (layoutStart).
func (s *Service) laneStart(lane engine.Lane, initial func(context.Context) (uint64, error)) func(context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		v, err := layoutStart(ctx, s.Resources.Leases, s.Resources.Config.Layout().Name(), initial)
		if err != nil {
			return 0, err
		}
		if lane.Composition {
			return v.CompositionFrom, nil
		}
		return v.ToolsFrom, nil
	}
}

// layoutStart reads, or fixes once, where the lanes of layout start when
// they have no checkpoint under it: the lowest checkpoint of the tool
// lanes (and of the composition lane) of any other layout, or initial()
// when there are none.
func layoutStart(ctx context.Context, leases jetstream.KeyValue, layout string, initial func(context.Context) (uint64, error)) (layoutStartValue, error) {
	for range 5 {
		e, err := leases.Get(ctx, layoutKey)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return layoutStartValue{}, fmt.Errorf("reading %s: %w", layoutKey, err)
		default:
			var v layoutStartValue
			if json.Unmarshal(e.Value(), &v) == nil && v.Layout == layout {
				return v, nil
			}
			rev = e.Revision()
		}
		v, err := earlierCheckpoints(ctx, leases, layout, initial)
		if err != nil {
			return layoutStartValue{}, err
		}
		data, _ := json.Marshal(v)
		if rev == 0 {
			_, err = leases.Create(ctx, layoutKey, data)
		} else {
			_, err = leases.Update(ctx, layoutKey, data, rev)
		}
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return layoutStartValue{}, fmt.Errorf("writing %s: %w", layoutKey, err)
		}
		// Another worker fixed it first: read theirs.
	}
	return layoutStartValue{}, fmt.Errorf("writing %s: too many conflicts", layoutKey)
}

func earlierCheckpoints(ctx context.Context, leases jetstream.KeyValue, layout string, initial func(context.Context) (uint64, error)) (layoutStartValue, error) {
	v := layoutStartValue{Layout: layout}
	lister, err := leases.ListKeys(ctx)
	if err != nil {
		return v, fmt.Errorf("listing the leases: %w", err)
	}
	for k := range lister.Keys() {
		if k != "composition" && !strings.HasPrefix(k, "tools.") {
			continue
		}
		st, ok, err := engine.ReadLease(ctx, leases, k)
		if err != nil || !ok || st.Layout == layout || st.Checkpoint == 0 {
			continue
		}
		from := &v.ToolsFrom
		if k == "composition" {
			from = &v.CompositionFrom
		}
		if *from == 0 || st.Checkpoint < *from {
			*from = st.Checkpoint
		}
	}
	if v.ToolsFrom == 0 || v.CompositionFrom == 0 {
		start, err := initial(ctx)
		if err != nil {
			return v, err
		}
		start = max(start, 1)
		if v.ToolsFrom == 0 {
			v.ToolsFrom = start
		}
		if v.CompositionFrom == 0 {
			v.CompositionFrom = start
		}
	}
	return v, nil
}
