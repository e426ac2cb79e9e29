package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// A worker started before its NATS server waits for it, saying so in its
// log and in /readyz, and becomes ready once the server is up.
func TestServeWaitsForNATSStartedLater(t *testing.T) {
	natsPort, httpPort := freePort(t), freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	started := make(chan struct{}, 1)
	serveStarted = func(string, string) { started <- struct{}{} }
	t.Cleanup(func() { serveStarted = nil })
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "--http", httpAddr,
			"--log-format", "json", "--nats-connect-timeout", "1m"}, stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve returned %v\n%s", err, logs)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("serve did not stop in 30s")
			}
		})
	}
	t.Cleanup(stop)

	natstest.Eventually(t, 15*time.Second, "/readyz says serve waits for NATS", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve stopped without a server: %v\n%s", err, logs)
		default:
		}
		code, body, ok := tryGet("http://" + httpAddr + "/readyz")
		return ok && code == 503 && strings.Contains(body, "starting: waiting for NATS at nats://127.0.0.1:") &&
			strings.Contains(body, "connection refused")
	})
	natstest.Eventually(t, 10*time.Second, "the log says serve waits for NATS", func() bool {
		return strings.Contains(logs.String(), "NATS is not reachable yet; trying again")
	})

	srv, err := consumer.StartServer(context.Background(), consumer.ServerOptions{StoreDir: filepath.Join(t.TempDir(), "js"), Port: natsPort})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); srv.Shutdown() }) // serve first, while its server runs
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("serve not ready 60s after the server started\n%s", logs)
	}
	if code, body, _ := tryGet("http://" + httpAddr + "/readyz"); code != 200 || !strings.Contains(body, "lag: 0 events (tools.0: 0 by ") {
		t.Errorf("/readyz once ready: %d %q, want 200 with the lag", code, body)
	}
	if !strings.Contains(logs.String(), "connected to NATS") {
		t.Errorf("the log does not say serve connected:\n%s", logs)
	}
}

// Without a server, serve gives up after --nats-connect-timeout, not at
// once, and says why; with 0 it exits at once.
func TestServeGivesUpWaitingForNATS(t *testing.T) {
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	start := time.Now()
	_, stderr, code := runCmd(t, "", "serve", "--nats-url", url, "--http", "", "--log-format", "json", "--nats-connect-timeout", "1500ms")
	took := time.Since(start)
	if code != 1 || !strings.Contains(stderr, "no servers available") || !strings.Contains(stderr, "--nats-connect-timeout 1.5s") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1 and the bound it waited for", code, stderr)
	}
	if took < 1500*time.Millisecond || took > 20*time.Second {
		t.Errorf("gave up after %s, want about 1.5s", took)
	}

	start = time.Now()
	_, stderr, code = runCmd(t, "", "serve", "--nats-url", url, "--http", "", "--nats-connect-timeout", "0")
	if code != 1 || !strings.Contains(stderr, "no servers available") || time.Since(start) > 10*time.Second {
		t.Errorf("--nats-connect-timeout 0: exit %d after %s, stderr:\n%s\nwant 1 at once", code, time.Since(start), stderr)
	}
}

func tryGet(url string) (int, string, bool) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), true
}
