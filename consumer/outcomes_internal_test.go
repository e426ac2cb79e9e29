package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// TestRebuildReadFailsFastWhenItsReplyIsLost: a read of the telemetry
// stream whose reply never comes (lost with a connection that dropped) must
// fail after the store's read timeout, not wait for the rebuild's or the
// handler's 30s while every later message of the tool waits behind it. The
// chaos test of a network cut stalled on exactly this. The reply is lost
// for real: the server refuses the reader's publish of the get request
// (a permission), so no reply ever comes. The caller's context allows a
// minute, as the rebuild's own allows 30s (nats.go applies its default of
// 5s only to a context without a deadline).
func TestRebuildReadFailsFastWhenItsReplyIsLost(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	err := os.WriteFile(conf, fmt.Appendf(nil, `
jetstream { store_dir: %q }
authorization {
  users = [
    { user: admin, password: admin }
    { user: reader, password: reader, permissions: { publish: { deny: ["$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>"] } } }
  ]
}
`, filepath.Join(dir, "js")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := StartServer(ctx, ServerOptions{ConfigFile: conf, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	connect := func(user string) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, user), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	admin := connect("admin")
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "TELEMETRY", Subjects: []string{"toolsentry.telemetry.>"}}); err != nil {
		t.Fatal(err)
	}
	names, err := events.NewNames("toolsentry")
	if err != nil {
		t.Fatal(err)
	}
	subject, err := names.Telemetry(events.KindInvocation, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, subject, []byte("{}")); err != nil {
		t.Fatal(err)
	}

	stream, err := connect("reader").Stream(ctx, "TELEMETRY") // stream info is allowed
	if err != nil {
		t.Fatal(err)
	}
	l := &outcomeLog{stream: stream, names: names, readTimeout: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _, err := l.rebuild(rctx, "t1", nil, 10)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rebuild: %v; want the read to time out", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the rebuild still waits, 20s on, for the reply of a read that was lost")
	}
}

// flushKV is an outcomes bucket in memory that is safe for Flush's
// concurrent writes and fails every write when failing is set.
type flushKV struct {
	jetstream.KeyValue // nil: any other method panics
	rev                atomic.Uint64
	writes             atomic.Int64
	failing            atomic.Bool
}

func (k *flushKV) write() (uint64, error) {
	k.writes.Add(1)
	if k.failing.Load() {
		return 0, errors.New("server busy")
	}
	return k.rev.Add(1), nil
}

func (k *flushKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return k.write()
}

func (k *flushKV) Update(context.Context, string, []byte, uint64) (uint64, error) { return k.write() }

func (k *flushKV) Bucket() string { return "toolsentry-outcomes" }

// TestFlushStoresAFleetAndSaysOneLine: a flush stores every dirty record
// (its writes run a few at a time), and when they fail it returns one
// error with the count and the first cause, not one line per tool.
func TestFlushStoresAFleetAndSaysOneLine(t *testing.T) {
	const tools = 300
	s := memStore()
	kv := &flushKV{}
	s.views[core.Outcomes] = engine.NewFedView(kv, ViewOptions{MaxAttempts: 1, WriteTimeout: time.Second})
	dirty := func() {
		s.pending = map[string]*pendingOutcome{}
		for i := range tools {
			id := fmt.Sprintf("svc.tool%03d", i)
			s.pending[id] = &pendingOutcome{rec: &core.OutcomeRecord{ToolID: id}, dirty: true}
		}
	}
	dirty()
	n, err := s.Flush(context.Background())
	if err != nil || n != tools || s.PendingOutcomes() != 0 {
		t.Fatalf("Flush = %d, %v; %d still pending; want %d stored", n, err, s.PendingOutcomes(), tools)
	}

	dirty()
	kv.failing.Store(true)
	n, err = s.Flush(context.Background())
	if n != 0 || err == nil {
		t.Fatalf("failing Flush = %d, %v; want 0 and an error", n, err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%d of %d tools", tools, tools)) || !strings.Contains(msg, "server busy") || len(msg) > 300 {
		t.Errorf("failing Flush's error = %q (%d bytes): want the count and the first cause in one short line", msg, len(msg))
	}
	if s.PendingOutcomes() != tools {
		t.Errorf("%d pending after a failed flush, want %d kept for the next", s.PendingOutcomes(), tools)
	}

	// A flush out of time stops writing and says so.
	kv.failing.Store(false)
	before := kv.writes.Load()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with its context done = %v, want context.Canceled", err)
	}
	if w := kv.writes.Load() - before; w != 0 {
		t.Errorf("Flush with its context done wrote %d times, want 0", w)
	}
}
