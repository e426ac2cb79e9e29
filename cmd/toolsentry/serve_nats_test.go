package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// TestServeSaysWhichNATSItUses exports TOOLSENTRY_NATS_URL, as a user does
// for the clients: serve uses that server, says so and why, and that
// --listen and --data-dir are ignored; it creates no data directory.
func TestServeSaysWhichNATSItUses(t *testing.T) {
	unsetServeEnv(t)
	_, url := natstest.RunServer(t)
	t.Setenv(envNATSURL, url)
	dataDir := filepath.Join(t.TempDir(), "not-created")
	started := make(chan string, 1)
	serveStarted = func(n, _ string) { started <- n }
	t.Cleanup(func() { serveStarted = nil })
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "", "--log-format", "json"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
	}()
	select {
	case got := <-started:
		if got != url {
			t.Errorf("serve uses %s, want %s", got, url)
		}
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve not ready in 30s\n%s", logs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	for _, want := range []string{`"level":"warn"`, "using the NATS server at " + url + " because TOOLSENTRY_NATS_URL is set", "--listen, --data-dir and --server-config are ignored"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("--data-dir %s: stat %v, want it not created", dataDir, err)
	}
}

// TestServeExplainsAnUnreachableNATSURL points TOOLSENTRY_NATS_URL at a
// port nothing listens on: serve says why it does not start its own server,
// whether it then fails or waits for the server.
func TestServeExplainsAnUnreachableNATSURL(t *testing.T) {
	unsetServeEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close()
	t.Setenv(envNATSURL, url)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--http", "", "--log-format", "json"}, stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
	}()
	const why = "because TOOLSENTRY_NATS_URL is set"
	natstest.Eventually(t, 10*time.Second, "serve logs why it uses "+url, func() bool { return strings.Contains(logs.String(), why) })
	select {
	case err := <-done: // serve gave up on the server
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("serve: %v, want it to say %q", err, why)
		}
	case <-time.After(2 * time.Second): // serve waits for the server
		cancel()
		<-done
	}
}
