package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
