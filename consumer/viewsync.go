package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CatchUp waits until the view's watch has delivered every revision the
// bucket held when CatchUp was called, so that reads see every write made
// before, by any worker. A worker that takes over a partition calls it
// before it handles the partition's keys: their previous owner's last writes
// may not have reached its views yet, and a verdict decided on a stale view
// would be published before the compare-and-set write finds the conflict.
func (v *View) CatchUp(ctx context.Context) error {
	st, err := v.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the status of bucket %s: %w", v.kv.Bucket(), err)
	}
	si, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok || si.StreamInfo() == nil {
		return fmt.Errorf("bucket %s: status without stream info", v.kv.Bucket())
	}
	last := si.StreamInfo().State.LastSeq
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		v.mu.RLock()
		rev := v.watchRev
		v.mu.RUnlock()
		if rev >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bucket %s: view at revision %d, bucket at %d: %w", v.kv.Bucket(), rev, last, ctx.Err())
		case <-v.done:
			return fmt.Errorf("bucket %s: %w", v.kv.Bucket(), ErrViewClosed)
		case <-t.C:
		}
	}
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
