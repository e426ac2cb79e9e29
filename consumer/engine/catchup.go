package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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

// CatchUp is what a lane reads below since.
type CatchUp struct {
	// Since is the first sequence the stream stored under the current
	// layout.
	Since uint64
	// Filters select the lane's kinds below Since in every subject form.
	Filters []string
	// Mine reports whether a message below Since is this lane's to apply.
	Mine func(m *Message) bool
}

// NewCatchUp returns the catch-up of lane under layout, whose stream
// stores under it from since; nil when nothing precedes it.
func NewCatchUp(layout Layout, lane Lane, since uint64) *CatchUp {
	if since <= 1 {
		return nil
	}
	kinds := layout.ToolKinds
	if lane.Composition {
		kinds = layout.CompositionKinds
	}
	c := &CatchUp{Since: since, Mine: func(*Message) bool { return true }}
	for _, k := range kinds {
		base := layout.Prefix + ".telemetry." + k
		c.Filters = append(c.Filters, base+".*.*", base+".*")
	}
	if !lane.Composition {
		n, p := layout.Partitions, lane.Partition
		c.Mine = func(m *Message) bool { return KeyPartition(LastToken(m), n) == p }
	}
	return c
}

// catchUpCheckpointer commits at most since: what the catch-up skipped at
// or above it is the lane's own filters' to read.
type catchUpCheckpointer struct {
	*Lease
	since uint64
}

func (c catchUpCheckpointer) Commit(ctx context.Context, checkpoint uint64) error {
	return c.Lease.Commit(ctx, min(checkpoint, c.since))
}

// catchUpPoll is how often a catch-up checks whether it is done.
const catchUpPoll = 200 * time.Millisecond

// catchUp runs the lane's catch-up on lease until everything of the lane
// below since is applied, then commits since.
func (l *Lanes) catchUp(ctx context.Context, lease *Lease, r *laneRun, opts Options) error {
	c := r.spec.CatchUp
	log := zerolog.Ctx(ctx)
	start := lease.Checkpoint()
	log.Info().Uint64("from", start).Uint64("until", c.Since).Msg("reading what the stream stored under its earlier layout first")
	h := BatchFunc(func(ctx context.Context, key string, msgs []*Message) []error {
		// One call holds one key: its messages are all this lane's or none.
		var mine []*Message
		at := make([]int, 0, len(msgs))
		for i, m := range msgs {
			if m.StreamSeq < c.Since && c.Mine(m) {
				mine = append(mine, m)
				at = append(at, i)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		res := r.spec.Handler.HandleBatch(ctx, key, mine)
		if res == nil {
			return nil
		}
		out := make([]error, len(msgs))
		for j, i := range at {
			out[i] = res[j]
		}
		// Skipped messages after a transient failure wait with it.
		for j, i := range at {
			if res[j] != nil && !errors.Is(res[j], ErrPermanent) {
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
	src := Source{Stream: r.spec.Source.Stream, FilterSubjects: c.Filters}
	eng, err := New(l.js, src, catchUpCheckpointer{lease, c.Since}, h, opts)
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
		if !l.caughtUp(ctx, eng, c.Since) {
			continue
		}
		if err := eng.Close(); err != nil {
			return err
		}
		<-done
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := lease.Commit(cctx, max(lease.Checkpoint(), c.Since))
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
func (l *Lanes) caughtUp(ctx context.Context, eng *Engine, since uint64) bool {
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

// LayoutStartValue is the entry under layoutKey: where the tool lanes
// and the composition lane of Layout start when they have no checkpoint
// under it.
type LayoutStartValue struct {
	Layout          string `json:"layout"`
	ToolsFrom       uint64 `json:"tools_from"`
	CompositionFrom uint64 `json:"composition_from"`
}

// LayoutStart reads, or fixes once, where the lanes of layout start when
// they have no checkpoint under it: the lowest checkpoint of the tool
// lanes (and of the composition lane) of any other layout, or initial()
// when there are none.
func LayoutStart(ctx context.Context, leases jetstream.KeyValue, layout string, initial func(context.Context) (uint64, error)) (LayoutStartValue, error) {
	for range 5 {
		e, err := leases.Get(ctx, layoutKey)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return LayoutStartValue{}, fmt.Errorf("reading %s: %w", layoutKey, err)
		default:
			var v LayoutStartValue
			if json.Unmarshal(e.Value(), &v) == nil && v.Layout == layout {
				return v, nil
			}
			rev = e.Revision()
		}
		v, err := earlierCheckpoints(ctx, leases, layout, initial)
		if err != nil {
			return LayoutStartValue{}, err
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
			return LayoutStartValue{}, fmt.Errorf("writing %s: %w", layoutKey, err)
		}
		// Another worker fixed it first: read theirs.
	}
	return LayoutStartValue{}, fmt.Errorf("writing %s: too many conflicts", layoutKey)
}

func earlierCheckpoints(ctx context.Context, leases jetstream.KeyValue, layout string, initial func(context.Context) (uint64, error)) (LayoutStartValue, error) {
	v := LayoutStartValue{Layout: layout}
	lister, err := leases.ListKeys(ctx)
	if err != nil {
		return v, fmt.Errorf("listing the leases: %w", err)
	}
	for k := range lister.Keys() {
		if k != "composition" && !strings.HasPrefix(k, "tools.") {
			continue
		}
		st, ok, err := ReadLease(ctx, leases, k)
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
