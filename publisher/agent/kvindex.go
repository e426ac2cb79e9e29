package agent

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// kvIndex is a local copy of a KV bucket's entries, indexed by the id each
// entry's value names (a tool id), kept current by a watch until its
// context ends. The baselines view (toolView) and an agent's usage view
// (usageView) are two of them.
type kvIndex[T any] struct {
	mu   sync.RWMutex
	byID map[string]T
	// ready closes once the watch has delivered the bucket's current
	// values; done closes when the watch ends.
	ready chan struct{}
	done  chan struct{}
}

// followKV starts an index of w's entries. decode reads a put: the id it
// names and its value, or ok false to ignore it (an unreadable or foreign
// record leaves what the index held). A delete or purge removes the id
// the key last held.
func followKV[T any](ctx context.Context, w jetstream.KeyWatcher, decode func(jetstream.KeyValueEntry) (id string, v T, ok bool)) *kvIndex[T] {
	x := &kvIndex[T]{byID: map[string]T{}, ready: make(chan struct{}), done: make(chan struct{})}
	go x.follow(ctx, w, decode)
	return x
}

func (x *kvIndex[T]) follow(ctx context.Context, w jetstream.KeyWatcher, decode func(jetstream.KeyValueEntry) (string, T, bool)) {
	defer close(x.done)
	defer func() { _ = w.Stop() }()
	readyOnce := sync.OnceFunc(func() { close(x.ready) })
	// Deletes name the entry by key only: remember which id each key held.
	idOf := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				readyOnce()
				continue
			}
			x.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				if id, ok := idOf[e.Key()]; ok {
					delete(x.byID, id)
					delete(idOf, e.Key())
				}
			} else if id, v, ok := decode(e); ok {
				idOf[e.Key()] = id
				x.byID[id] = v
			}
			x.mu.Unlock()
		}
	}
}

// lookup returns the value held for id. A nil index holds nothing.
func (x *kvIndex[T]) lookup(id string) (T, bool) {
	if x == nil {
		var zero T
		return zero, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	v, ok := x.byID[id]
	return v, ok
}

// doneCh is done, or a closed channel for a nil index (one that follows
// nothing).
func (x *kvIndex[T]) doneCh() <-chan struct{} {
	if x == nil {
		return closed
	}
	return x.done
}

// closed is the channel of a view that follows nothing.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
