package consumer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// The state views are the runtime's (engine.View): a local copy of a KV
// bucket kept current by a watch. These are their names in the worker.
type (
	View           = engine.View
	ViewOptions    = engine.ViewOptions
	Entry          = engine.Entry
	MergeFunc      = engine.MergeFunc
	EntryMergeFunc = engine.EntryMergeFunc
)

// Defaults of ViewOptions.
const (
	DefaultProbeInterval = engine.DefaultProbeInterval
	DefaultMaxAttempts   = engine.DefaultMaxAttempts
	DefaultWriteTimeout  = engine.DefaultWriteTimeout
)

// NewView is engine.NewView.
func NewView(ctx context.Context, kv jetstream.KeyValue, opts ViewOptions) (*View, error) {
	return engine.NewView(ctx, kv, opts)
}
