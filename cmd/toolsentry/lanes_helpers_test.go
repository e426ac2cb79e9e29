package main

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
)

// lanesSettled reports whether every lane of the deployment with prefix
// (default toolsentry) has committed a checkpoint past every message it
// reads: everything stored is applied.
func lanesSettled(ctx context.Context, js jetstream.JetStream, prefix string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := consumer.ReadStatus(ctx, js, consumer.Config{Prefix: prefix})
	return err == nil && st.TotalLag() == 0
}

// leaseEntry is one write of a lane's lease, as a watcher saw it.
type leaseEntry struct {
	owner string
	epoch uint64
}

// leaseLog is every write of every lease seen by a watch, per lane.
type leaseLog struct {
	mu      sync.Mutex
	entries map[string][]leaseEntry
}

func (l *leaseLog) get() map[string][]leaseEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.entries)
}

// watchLeases records every write of the default deployment's leases from
// now until the test ends (the bucket must exist: a worker started).
func watchLeases(t *testing.T, js jetstream.JetStream) *leaseLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := js.KeyValue(ctx, "toolsentry-leases")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IncludeHistory())
	if err != nil {
		t.Fatal(err)
	}
	l := &leaseLog{entries: map[string][]leaseEntry{}}
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut || !isLaneKey(e.Key()) {
				continue
			}
			var v struct {
				Owner string `json:"owner"`
				Epoch uint64 `json:"epoch"`
			}
			if json.Unmarshal(e.Value(), &v) != nil {
				continue
			}
			l.mu.Lock()
			l.entries[e.Key()] = append(l.entries[e.Key()], leaseEntry{v.Owner, v.Epoch})
			l.mu.Unlock()
		}
	}()
	return l
}

// isLaneKey reports whether a leases bucket key is a lane's (not the
// layout's record).
func isLaneKey(k string) bool {
	return k == "composition" || k == "directives" || strings.HasPrefix(k, "tools.")
}
