package consumer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// The runtime's types under the names the worker's callers use. The state
// views are engine.View: a local copy of a KV bucket kept current by a
// watch.
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

// The lanes are the runtime's (engine.Lanes); Service.Lanes runs the
// worker's.
type (
	Lanes      = engine.Lanes
	LaneStatus = engine.LaneStatus
)
