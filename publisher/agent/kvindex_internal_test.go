package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runJetStream starts an embedded nats-server with JetStream for a test of
// this package's internals (consumer/natstest imports this package).
func runJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
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

// TestKVIndexFollowsPutsAndDeletes: an index holds a put under the id its
// value names, keeps the old value when a put cannot be read, and forgets
// the id when its key is deleted.
func TestKVIndexFollowsPutsAndDeletes(t *testing.T) {
	js := runJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "index"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k1", []byte("tool-a=1")); err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := followKV(ctx, w, func(e jetstream.KeyValueEntry) (string, string, bool) {
		id, v, ok := strings.Cut(string(e.Value()), "=")
		return id, v, ok
	})
	<-x.ready
	if v, ok := x.lookup("tool-a"); !ok || v != "1" {
		t.Fatalf("after the initial values: %q %v, want 1", v, ok)
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting: %s", what)
			}
		}
	}
	if _, err := kv.Put(ctx, "k1", []byte("unreadable")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k2", []byte("tool-b=2")); err != nil {
		t.Fatal(err)
	}
	wait("tool-b indexed", func() bool { _, ok := x.lookup("tool-b"); return ok })
	if v, ok := x.lookup("tool-a"); !ok || v != "1" {
		t.Fatalf("an unreadable put replaced the value: %q %v", v, ok)
	}
	if err := kv.Delete(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	wait("tool-b forgotten", func() bool { _, ok := x.lookup("tool-b"); return !ok })
	cancel()
	<-x.done
	var nilIndex *kvIndex[string]
	if _, ok := nilIndex.lookup("tool-a"); ok {
		t.Fatal("a nil index holds something")
	}
	<-nilIndex.doneCh()
}
