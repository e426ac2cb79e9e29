package consumer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// TestDirectiveHeadsFollowRevisions: put decides from the head of a key's
// current revision, cached once read or written, and reads the value again
// when another writer (an operator's accept, the watch) moved the key to a
// new revision; an unreadable value is replaced.
func TestDirectiveHeadsFollowRevisions(t *testing.T) {
	ctx := context.Background()
	d := &Directives{byTool: map[string]map[string]struct{}{}, heads: map[string]directiveHead{}}
	kv := &memKV{}
	d.view = engine.NewFedView(kv, ViewOptions{MaxAttempts: 1, WriteTimeout: time.Second, OnChange: d.index})
	const key = "schema.crm=2Elookup.agent-a"
	dir := events.Directive{Guard: events.DirectiveSchema, ToolID: "crm.lookup", AgentID: "agent-a", Action: guards.ActionMigrate,
		Verdict: events.VerdictRef{Sequence: 5}, ToFingerprint: "sha256:b"}
	later := func(seq uint64) func(cur *directiveHead) (events.Directive, bool) {
		return func(cur *directiveHead) (events.Directive, bool) {
			if cur != nil && cur.sequence >= seq {
				return events.Directive{}, false
			}
			next := dir
			next.Verdict.Sequence = seq
			return next, true
		}
	}
	sequence := func() uint64 {
		t.Helper()
		e, ok := d.view.Get(key)
		if !ok {
			t.Fatal("no directive")
		}
		var got events.Directive
		if err := json.Unmarshal(e.Value, &got); err != nil {
			t.Fatal(err)
		}
		return got.Verdict.Sequence
	}
	if err := d.put(ctx, key, later(5)); err != nil {
		t.Fatal(err)
	}
	if h, ok := d.head(key, kv.rev); !ok || h.sequence != 5 || h.agentID != "agent-a" || h.toFingerprint != "sha256:b" {
		t.Fatalf("head after a write: %+v, %v", h, ok)
	}
	// An older verdict changes nothing, a newer one replaces it.
	if err := d.put(ctx, key, later(4)); err != nil || kv.rev != 1 || sequence() != 5 {
		t.Fatalf("older verdict: %v, revision %d, sequence %d", err, kv.rev, sequence())
	}
	if err := d.put(ctx, key, later(9)); err != nil || kv.rev != 2 || sequence() != 9 {
		t.Fatalf("newer verdict: %v, revision %d, sequence %d", err, kv.rev, sequence())
	}
	// Another writer sets sequence 20 at a new revision: its value counts.
	other := dir
	other.Verdict.Sequence = 20
	b, _ := json.Marshal(other)
	d.view.Observe(key, b, 50, false)
	kv.rev = 50
	if err := d.put(ctx, key, later(12)); err != nil || sequence() != 20 {
		t.Fatalf("after another writer: %v, sequence %d, want 20 kept", err, sequence())
	}
	// An unreadable value is replaced.
	d.view.Observe(key, []byte("junk"), 60, false)
	kv.rev = 60
	if err := d.put(ctx, key, later(13)); err != nil || sequence() != 13 {
		t.Fatalf("after junk: %v, sequence %d, want 13", err, sequence())
	}
	// A deleted key forgets its head.
	d.view.Observe(key, nil, 70, true)
	if _, ok := d.heads[key]; ok {
		t.Error("a deleted key kept its head")
	}
}
