package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// serve --nats-url with --partitions joins the workers that share them:
// one pinned consumer per partition, the member announced, verdicts out.
func TestServePartitioned(t *testing.T) {
	_, url := natstest.RunServer(t)
	t.Setenv("TOOLSENTRY_PARTITIONS", "2") // the flag below wins over it
	started := make(chan [2]string, 1)
	serveStarted = func(n, h string) { started <- [2]string{n, h} }
	t.Cleanup(func() { serveStarted = nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &lockedBuffer{}
	go func() {
		done <- run(ctx, []string{"serve", "--nats-url", url, "--http", "127.0.0.1:0", "--log-format", "json",
			"--partitions", "3", "--member", "worker-a", "--member-ttl", "2s", "--lease-ttl", "3s"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: logs})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve not ready in 30s\n%s", logs)
	}

	js := natstest.JetStream(t, url)
	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer pcancel()
	// Three tool partitions in the stream's subject transform, and no
	// consumer on the server: lanes read from their leases' checkpoints.
	ts, err := js.Stream(pctx, "TOOLSENTRY_TELEMETRY")
	if err != nil {
		t.Fatal(err)
	}
	if tr := ts.CachedInfo().Config.SubjectTransform; tr == nil || !strings.Contains(tr.Destination, "partition(3,") {
		t.Errorf("telemetry transform %+v: want 3 partitions", tr)
	}
	for info := range ts.ListConsumers(pctx).Info() {
		t.Errorf("consumer %s on the telemetry stream", info.Name)
	}
	kv, err := js.KeyValue(pctx, "toolsentry-members")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(pctx); err != nil || st.TTL() != 2*time.Second {
		t.Errorf("members bucket TTL: %v %v", st, err)
	}
	natstest.Eventually(t, 10*time.Second, "worker-a announced", func() bool {
		_, err := kv.Get(pctx, "worker-a")
		return err == nil
	})

	body := `{"specversion":"1.0","id":"o1","source":"agent","type":"` + events.TypeSchemaObserved + `","datacontenttype":"application/json","data":{"tool_id":"crm.lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object"}}}}`
	if _, err := js.Publish(pctx, "toolsentry.telemetry.schema.crm=2Elookup", []byte(body)); err != nil {
		t.Fatal(err)
	}
	// Bad input is dead-lettered once, by the partition it belongs to, not
	// once per partition consumer that reads it.
	for _, subject := range []string{"toolsentry.telemetry.invocation.crm=2Elookup", "toolsentry.telemetry.schema.other"} {
		if _, err := js.Publish(pctx, subject, []byte("not a cloudevent")); err != nil {
			t.Fatal(err)
		}
	}
	// A subject of no telemetry kind is refused at publish: the stream
	// takes the known kinds only (it used to be stored, and dead-lettered).
	if _, err := js.Publish(pctx, "toolsentry.telemetry.bogus", []byte("not a cloudevent")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("publish of an unknown kind: %v, want it refused (no stream)", err)
	}
	count := func(stream string) uint64 {
		s, err := js.Stream(pctx, stream)
		if err != nil {
			return 0
		}
		info, err := s.Info(pctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	natstest.Eventually(t, 20*time.Second, "a verdict and two dead letters", func() bool {
		return count("TOOLSENTRY_VERDICTS") == 1 && count("TOOLSENTRY_DLQ") == 2
	})
	natstest.Eventually(t, 10*time.Second, "every lane settled", func() bool {
		st, err := consumer.ReadStatus(pctx, js, consumer.Config{})
		return err == nil && st.TotalLag() == 0 && len(st.Lanes) == 5
	})
	if n := count("TOOLSENTRY_DLQ"); n != 2 {
		t.Errorf("%d dead letters, want 2", n)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
	if _, err := kv.Get(pctx, "worker-a"); err == nil {
		t.Error("worker-a still announced after it stopped")
	}
}

func TestServeScaleFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--partitions", "0"},
		{"serve", "--partitions", "65"},
		{"serve", "--lease-ttl", "1s"},
		{"serve", "--pinned-ttl", "1s"},
		{"serve", "--member-ttl", "100ms"},
		{"serve", "--partitions", "many"},
	} {
		_, stderr, code := runCmd(t, "", args...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}
