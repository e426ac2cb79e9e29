// Package natstest runs a real embedded nats-server with JetStream for
// tests: a fresh store directory per test, shut down in t.Cleanup, and a
// restart on the same store directory and port to test recovery.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
)

// RunServer starts an embedded server on a random port with its store in
// t.TempDir() and returns it with its client URL. It is shut down when the
// test ends.
func RunServer(t testing.TB) (*consumer.Server, string) {
	t.Helper()
	return start(t, consumer.ServerOptions{StoreDir: t.TempDir(), Port: -1})
}

// Restart shuts old down and starts a new server on the same store
// directory and port, so that clients with reconnects enabled find it again.
func Restart(t testing.TB, old *consumer.Server) (*consumer.Server, string) {
	t.Helper()
	port, dir := old.Port(), old.StoreDir()
	old.Shutdown()
	return start(t, consumer.ServerOptions{StoreDir: dir, Port: port})
}

func start(t testing.TB, o consumer.ServerOptions) (*consumer.Server, string) {
	t.Helper()
	ctx := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).WithContext(context.Background())
	s, err := consumer.StartServer(ctx, o)
	if err != nil {
		t.Fatalf("starting embedded nats-server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s, s.ClientURL()
}

// Connect opens a client connection that retries reconnects for the length
// of a test and is closed when the test ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true),
	)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection to url and returns its JetStream context.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, url))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Eventually polls cond every 5ms until it returns true, failing the test
// with msg if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
