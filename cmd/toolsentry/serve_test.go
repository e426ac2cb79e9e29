package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/events"
)

// lockedBuffer is a bytes.Buffer safe for the server's log writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type served struct {
	natsURL, httpAddr string
	done              chan error
	cancel            context.CancelFunc
	logs              *lockedBuffer
}

// startServe runs `toolsentry serve` in-process on free ports and a fresh
// data directory (or dataDir), and waits until it is ready.
func startServe(t *testing.T, dataDir string) *served {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	started := make(chan [2]string, 1)
	serveStarted = func(n, h string) { started <- [2]string{n, h} }
	t.Cleanup(func() { serveStarted = nil })
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{done: make(chan error, 1), cancel: cancel, logs: &lockedBuffer{}}
	go func() {
		s.done <- run(ctx, []string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: s.logs})
	}()
	select {
	case a := <-started:
		s.natsURL, s.httpAddr = a[0], a[1]
	case err := <-s.done:
		t.Fatalf("serve stopped: %v\n%s", err, s.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve not ready in 30s\n%s", s.logs)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *served) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve returned %v\n%s", err, s.logs)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("serve did not stop in 30s")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	s := startServe(t, dataDir)
	if code, _ := get(t, "http://"+s.httpAddr+"/livez"); code != 200 {
		t.Errorf("/livez %d", code)
	}
	if code, _ := get(t, "http://"+s.httpAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}

	// An agent (or `nats pub --jetstream`) publishes the seed's silent rename.
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub := func(subject, body string) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ce := func(id, typ, data string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"agent","type":"` + typ + `","datacontenttype":"application/json","data":` + data + `}`
	}
	pub("toolsentry.telemetry.schema.crm=2Elookup", ce("o1", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}}}}}`))
	pub("toolsentry.telemetry.invocation.crm=2Elookup", ce("i1", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"billing-agent","arguments":{"user_id":"u-42"}}`))
	pub("toolsentry.telemetry.invocation.crm=2Elookup", `not a cloudevent`)
	pub("toolsentry.telemetry.schema.crm=2Elookup", ce("o2", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"userId":{"type":"string"}}}}}`))

	sub, err := js.OrderedConsumer(ctx, "TOOLSENTRY_VERDICTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"toolsentry.verdicts.schema.drift_on_used_fields.>"}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := sub.Next(jetstream.FetchMaxWait(20 * time.Second))
	if err != nil {
		t.Fatalf("no drift verdict: %v\n%s", err, s.logs)
	}
	var v struct {
		Data events.SchemaVerdict `json:"data"`
	}
	if err := json.Unmarshal(msg.Data(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Data.AgentID != "billing-agent" || !strings.Contains(string(v.Data.Migration), `"to":"userId"`) {
		t.Errorf("verdict %+v", v.Data)
	}
	dlq, err := js.Stream(ctx, "TOOLSENTRY_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	consumerWait(t, func() bool { i, _ := dlq.Info(ctx); return i != nil && i.State.Msgs == 1 })

	consumerWait(t, func() bool {
		_, body := get(t, "http://"+s.httpAddr+"/metrics")
		return strings.Contains(body, `toolsentry_verdicts_total{guard="schema",verdict="drift_on_used_fields"} 1`) &&
			strings.Contains(body, `toolsentry_dead_letters_total{kind="invocation",reason="not_cloudevent"} 1`)
	})
	_, body := get(t, "http://"+s.httpAddr+"/metrics")
	if strings.Contains(body, "crm") || strings.Contains(body, "billing-agent") {
		t.Error("metrics carry a tool or agent id")
	}

	// SIGTERM (here: the context) drains and returns nil; a restart on the
	// same data directory keeps the baseline.
	nc.Close()
	s.stop(t)
	s2 := startServe(t, dataDir)
	nc2, err := nats.Connect(s2.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	kv, err := js2.KeyValue(ctx, "toolsentry-baselines")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "crm=2Elookup"); err != nil {
		t.Errorf("baseline lost across restart: %v", err)
	}
}

func consumerWait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReadyzTurnsOffAtShutdown(t *testing.T) {
	var stopping atomic.Bool
	var svc atomic.Pointer[consumer.Service]
	var starting startupDetail
	h := readyz(&stopping, &svc, &starting, &lagSource{})
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	code := func() int { c, _ := get(); return c }
	if c, body := get(); c != 503 || !strings.Contains(body, "starting: streams, buckets and consumer not ready") {
		t.Errorf("before the service starts: %d %q, want 503 and what it waits for", c, body)
	}
	starting.set("waiting for NATS at nats://x:4222")
	if c, body := get(); c != 503 || !strings.Contains(body, "starting: waiting for NATS at nats://x:4222") {
		t.Errorf("while waiting for NATS: %d %q, want 503 and what it waits for", c, body)
	}
	stopping.Store(true)
	if c := code(); c != 503 {
		t.Errorf("while stopping: %d, want 503", c)
	}
}

func TestServeFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--listen", "nope"},
		{"serve", "--log-level", "loud"},
		{"serve", "extra"},
		{"serve", "--workers", "many"},
	} {
		_, stderr, code := runCmd(t, "", args...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
}
