package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// secret is what an agent's arguments hold and what toolsentry must never
// repeat: only paths and types of arguments are kept.
const secret = "SECRET-4242-do-not-log"

// TestServeNeverLeaksArgumentValues sends a recognisable secret in agents'
// arguments through serve (debug logs on) — in valid invocations, in an
// invocation whose arguments break the schema, and in malformed events —
// and checks that it reaches no log line, no KV bucket value, no verdict,
// no metric and no dead letter's headers. The one copy toolsentry keeps
// besides the input stream itself is by design: a dead letter's body is
// the original bytes of the malformed event, so that an operator can
// repair and replay it.
func TestServeNeverLeaksArgumentValues(t *testing.T) {
	unsetServeEnv(t)
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--log-format", "json", "--log-level", "debug")
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := testCtx(t, 60*time.Second)

	inv := func(id, args string) string {
		return cloudEvent(id, events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"billing-agent","arguments":`+args+`,"outcome":{"status":"ok"}}`)
	}
	inputs := []struct{ subject, body string }{
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o1", "user_id")},
		{"toolsentry.telemetry.invocation.crm=2Elookup", inv("i1", `{"user_id":"`+secret+`","options":{"token":"`+secret+`","limit":10,"tags":["`+secret+`"]}}`)},
		// Bad input that carries the secret: arguments that are not an
		// object, a CloudEvent without an id, a truncated document.
		{"toolsentry.telemetry.invocation.crm=2Elookup", inv("i2", `"`+secret+`"`)},
		{"toolsentry.telemetry.invocation.crm=2Elookup", `{"specversion":"1.0","source":"a","type":"` + events.TypeInvocation + `","data":{"tool_id":"crm.lookup","agent_id":"b","arguments":{"k":"` + secret + `"}}}`},
		{"toolsentry.telemetry.invocation.crm=2Elookup", `{"specversion":"1.0","id":"x","data":{"arguments":{"k":"` + secret},
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o2", "userId")},
	}
	for _, in := range inputs {
		if _, err := js.Publish(ctx, in.subject, []byte(in.body)); err != nil {
			t.Fatal(err)
		}
	}
	telemetry, err := js.Stream(ctx, "TOOLSENTRY_TELEMETRY")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "every input handled, and what the workers published in turn", func() bool {
		si, err := telemetry.Info(ctx)
		return err == nil && si.State.LastSeq >= uint64(len(inputs)) && lanesSettled(ctx, js, "")
	})

	// Verdicts: the drift for the agent, which used user_id, and none
	// carries a value.
	verdicts := readAll(t, ctx, js, "TOOLSENTRY_VERDICTS")
	drift := false
	for _, m := range verdicts {
		drift = drift || strings.Contains(m.Subject(), "drift_on_used_fields")
		assertNoSecret(t, "verdict "+m.Subject(), m)
	}
	if !drift {
		t.Errorf("no drift verdict among %d verdicts: the scenario did not run", len(verdicts))
	}

	// Dead letters: headers (reason, error text) never hold the secret; the
	// body is the original bytes, by design.
	dlq := readAll(t, ctx, js, "TOOLSENTRY_DLQ")
	if len(dlq) != 3 {
		t.Errorf("%d dead letters, want 3", len(dlq))
	}
	for _, m := range dlq {
		for k, vs := range m.Headers() {
			for _, v := range vs {
				if strings.Contains(v, secret) || strings.Contains(k, secret) {
					t.Errorf("dead letter %s: header %s=%q holds the secret", m.Subject(), k, v)
				}
			}
		}
		if !bytes.Contains(m.Data(), []byte(secret)) {
			t.Errorf("dead letter %s: body is not the original bytes", m.Subject())
		}
	}

	// Every KV bucket, every key and value.
	buckets := js.KeyValueStoreNames(ctx)
	n := 0
	for name := range buckets.Name() {
		n++
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					continue
				}
				t.Fatal(err)
			}
			if strings.Contains(k, secret) || bytes.Contains(e.Value(), []byte(secret)) {
				t.Errorf("bucket %s key %s holds the secret", name, k)
			}
		}
	}
	if err := buckets.Error(); err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Errorf("%d buckets listed, want toolsentry's", n)
	}

	_, metrics := get(t, "http://"+r.httpAddr+"/metrics")
	if strings.Contains(metrics, secret) {
		t.Error("/metrics holds the secret")
	}

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `"level":"debug"`) {
		t.Error("no debug lines: the check of the logs is void")
	}
	if strings.Contains(logs, secret) {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, secret) {
				t.Errorf("log line holds the secret: %s", l)
			}
		}
	}
}

// readAll returns every message of a stream.
func readAll(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	oc, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for uint64(len(out)) < info.State.Msgs {
		m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading %s: %v", stream, err)
		}
		out = append(out, m)
	}
	return out
}

func assertNoSecret(t *testing.T, what string, m jetstream.Msg) {
	t.Helper()
	if bytes.Contains(m.Data(), []byte(secret)) {
		t.Errorf("%s: body holds the secret", what)
	}
	for k, vs := range m.Headers() {
		for _, v := range vs {
			if strings.Contains(v, secret) {
				t.Errorf("%s: header %s holds the secret", what, k)
			}
		}
	}
}
