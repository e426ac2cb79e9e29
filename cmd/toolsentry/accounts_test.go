package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// accountsConf is the accounts and permissions file of deploy/.
const accountsConf = "../../deploy/nats/accounts.conf"

// setDeployPasswords sets the password variables deploy/nats/accounts.conf
// reads, to fresh random values, and returns them by user.
func setDeployPasswords(t *testing.T) map[string]string {
	t.Helper()
	pw := map[string]string{}
	for _, user := range []string{"agent", "worker", "subscriber", "operator"} {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		pw[user] = hex.EncodeToString(b)
		t.Setenv("TOOLSENTRY_"+strings.ToUpper(user)+"_PASSWORD", pw[user])
	}
	return pw
}

// asyncErrors collects the errors a server reports on a connection
// (permission violations).
type asyncErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

func (a *asyncErrors) has(substr string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

func connectAs(t *testing.T, url, user, password string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, *asyncErrors) {
	t.Helper()
	ae := &asyncErrors{}
	nc, err := nats.Connect(url, append([]nats.Option{nats.UserInfo(user, password), nats.ErrorHandler(ae.handler)}, opts...)...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, ae
}

// TestDeployAccountsPermissions starts a real server with
// deploy/nats/accounts.conf as it is and checks each role: an agent
// publishes telemetry and can do nothing else (no verdict, no bucket read,
// no stream delete, no peeking at the workers' inboxes); a worker (serve)
// processes the agent's events end to end without a single permission
// violation; a subscriber reads the verdict and watches the directives
// bucket, and cannot read telemetry or state; an operator accepts the
// drift through serve, and publishes nothing else; agents cannot publish
// operator events.
func TestDeployAccountsPermissions(t *testing.T) {
	unsetServeEnv(t)
	pw := setDeployPasswords(t)
	srv := startSecuredServer(t, accountsConf)
	url := srv.ClientURL()

	// A partitioned worker, as deploy/ runs them: its partition consumers
	// and members bucket are within the worker's permissions too.
	// It notifies a webhook too (its durable toolsentry-notify).
	workerHook := newHookReceiver(t, 0)
	w := startServeArgs(t, "--nats-url", url, "--nats-user", "worker", "--nats-password", pw["worker"],
		"--nats-inbox-prefix", "_INBOX_workers", "--http", "127.0.0.1:0", "--log-format", "json", "--partitions", "2",
		"--notify-webhook", workerHook.srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	// The agent.
	agentNC, agentJS, agentErrs := connectAs(t, url, "agent", pw["agent"])
	t.Run("agent cannot publish a verdict", func(t *testing.T) {
		c, cc := short()
		defer cc()
		_, err := agentJS.Publish(c, "toolsentry.verdicts.schema.drift_on_used_fields.crm=2Elookup", []byte(`{"forged":true}`))
		if err == nil {
			t.Fatal("published a verdict")
		}
		natstestWait(t, func() bool { return agentErrs.has(`Permissions Violation for Publish to "toolsentry.verdicts.`) })
	})
	t.Run("agent cannot forge a quality checkpoint or a dead letter", func(t *testing.T) {
		for _, subj := range []string{"toolsentry.telemetry.quality.crm=2Elookup", "toolsentry.dlq.permanent"} {
			c, cc := short()
			_, err := agentJS.Publish(c, subj, []byte(`{}`))
			cc()
			if err == nil {
				t.Errorf("published on %s", subj)
			}
			natstestWait(t, func() bool { return agentErrs.has(`Permissions Violation for Publish to "` + subj) })
		}
	})
	t.Run("agent cannot read a bucket", func(t *testing.T) {
		// It may watch the directives, baselines and usage buckets
		// (below), and nothing else of the state.
		for _, bucket := range []string{"toolsentry-outcomes", "toolsentry-quality", "toolsentry-workflows", "toolsentry-members"} {
			c, cc := short()
			if _, err := agentJS.KeyValue(c, bucket); err == nil {
				t.Errorf("opened the %s bucket", bucket)
			}
			cc()
		}
		c2, cc2 := short()
		defer cc2()
		if _, err := agentNC.RequestWithContext(c2, "$JS.API.DIRECT.GET.KV_toolsentry-baselines.$KV.toolsentry-baselines.crm=2Elookup", nil); err == nil {
			t.Error("direct get of a baseline answered")
		}
		for _, subj := range []string{"$KV.toolsentry-baselines.>", "_INBOX_workers.>", "_INBOX_subscribers.>", "toolsentry.verdicts.>", "toolsentry.telemetry.>"} {
			if _, err := agentNC.SubscribeSync(subj); err != nil {
				t.Fatal(err)
			}
			natstestWait(t, func() bool { return agentErrs.has(`Permissions Violation for Subscription to "` + subj) })
		}
	})
	t.Run("agent cannot delete a stream", func(t *testing.T) {
		for _, stream := range []string{"TOOLSENTRY_TELEMETRY", "TOOLSENTRY_VERDICTS", "KV_toolsentry-baselines"} {
			c, cc := short()
			err := agentJS.DeleteStream(c, stream)
			cc()
			if err == nil {
				t.Errorf("deleted %s", stream)
			}
		}
		natstestWait(t, func() bool {
			return agentErrs.has(`Permissions Violation for Publish to "$JS.API.STREAM.DELETE.TOOLSENTRY_TELEMETRY"`)
		})
	})

	// The agent's telemetry, through `toolsentry emit` with its password:
	// the seed's silent rename of a field the agent uses.
	obs := func(id, field string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"agents/billing-7","type":"` + events.TypeSchemaObserved +
			`","data":{"tool_id":"crm.lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"` + field + `":{"type":"string"}}}}}}`
	}
	emit := func(input string) {
		t.Helper()
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), input, "emit", "--nats-url", url, "--nats-user", "agent", "--nats-password", pw["agent"])
		if code != 0 {
			t.Fatalf("emit as agent: exit %d: %s", code, errOut)
		}
	}
	emit(obs("o1", "user_id"))
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--nats-url", url, "--nats-user", "agent", "--nats-password", pw["agent"], "testdata/emit/invocation.json")
	if code != 0 {
		t.Fatalf("emit invocation as agent: exit %d: %s", code, errOut)
	}
	emit(obs("o2", "userId"))

	// The agent's guard watches the directives, baselines and usage
	// buckets: the call that uses the renamed field is migrated, and the
	// agent cannot write any of them.
	t.Run("agent guards its calls", func(t *testing.T) {
		view, err := agent.WatchDirectives(ctx, agentJS, events.Names{}, agent.ViewOptions{Agent: "billing-7", ProbeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer view.Close()
		var dec agent.Decision
		natstest.Eventually(t, 30*time.Second, "the agent's guard migrates user_id", func() bool {
			var err error
			dec, err = view.Guard(ctx, "billing-7", "crm.lookup", json.RawMessage(`{"user_id":"u-42"}`), agent.GuardOptions{})
			return err == nil && dec.Migrated && string(dec.Arguments) == `{"userId":"u-42"}` && dec.Fits
		})
		for _, bucket := range []string{"toolsentry-directives", "toolsentry-baselines", "toolsentry-usage"} {
			kv, err := agentJS.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatal(err)
			}
			c, cc := short()
			if _, err := kv.Put(c, "crm=2Elookup", []byte(`{}`)); err == nil {
				t.Errorf("put into %s", bucket)
			}
			cc()
			natstestWait(t, func() bool {
				return agentErrs.has(`Permissions Violation for Publish to "$KV.` + bucket + `.crm=2Elookup"`)
			})
		}
	})

	// The subscriber reads the verdict with `toolsentry watch`.
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--count", "1", "--timeout", "20s",
		"--guard", "schema", "--verdict", "drift_on_used_fields",
		"--nats-url", url, "--nats-user", "subscriber", "--nats-password", pw["subscriber"], "--nats-inbox-prefix", "_INBOX_subscribers")
	if code != 0 || !strings.Contains(strings.ToLower(out), "drift_on_used_fields") || !strings.Contains(out, "crm.lookup") {
		t.Fatalf("watch as subscriber: exit %d\nstdout: %s\nstderr: %s\nserve: %s", code, out, errOut, w.logs)
	}

	// The subscriber runs `toolsentry notify` on a durable of its own; the
	// worker's notifier sent the same verdict.
	t.Run("subscriber and worker notify", func(t *testing.T) {
		hook := newHookReceiver(t, 1)
		nctx, ncancel := context.WithCancel(ctx)
		done := make(chan cmdResult, 1)
		go func() {
			out, errOut, code := runCtx(nctx, "", "notify", "--all", "--webhook", hook.srv.URL, "--retry-wait", "20ms", "--log-format", "json",
				"--nats-url", url, "--nats-user", "subscriber", "--nats-password", pw["subscriber"], "--nats-inbox-prefix", "_INBOX_subscribers")
			done <- cmdResult{out, errOut, code}
		}()
		delivered := func(h *hookReceiver) func() bool {
			return func() bool { _, accepted, _, _ := h.snapshot(); return len(accepted) > 0 }
		}
		natstest.Eventually(t, 20*time.Second, "the drift at the subscriber's webhook", delivered(hook))
		ncancel()
		r := <-done
		if r.code != 0 || strings.Contains(r.errOut, "Permissions Violation") || strings.Contains(r.errOut, "permissions violation") {
			t.Errorf("notify as subscriber: exit %d\n%s", r.code, r.errOut)
		}
		natstest.Eventually(t, 20*time.Second, "the drift at the worker's webhook", delivered(workerHook))
	})

	subNC, sub, subErrs := connectAs(t, url, "subscriber", pw["subscriber"], nats.CustomInboxPrefix("_INBOX_subscribers"))
	t.Run("subscriber watches directives", func(t *testing.T) {
		kv, err := sub.KeyValue(ctx, "toolsentry-directives")
		if err != nil {
			t.Fatal(err)
		}
		// The worker's verdicts above make directives for the tool, a
		// moment after the verdicts (the projector follows the verdict
		// stream): the subscriber's watch reads them, then the
		// end-of-initial-values marker.
		watchKeys := func() []string {
			watcher, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer watcher.Stop()
			var keys []string
			for {
				select {
				case e := <-watcher.Updates():
					if e == nil {
						return keys
					}
					keys = append(keys, e.Key())
				case <-time.After(10 * time.Second):
					t.Fatalf("directives watch delivered %v, then nothing", keys)
				}
			}
		}
		natstestWait(t, func() bool { return len(watchKeys()) > 0 })
	})
	t.Run("subscriber cannot read telemetry or state", func(t *testing.T) {
		c, cc := short()
		defer cc()
		if _, err := sub.CreateConsumer(c, "TOOLSENTRY_TELEMETRY", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err == nil {
			t.Error("subscriber created a consumer on the telemetry stream")
		}
		c2, cc2 := short()
		defer cc2()
		if _, err := sub.KeyValue(c2, "toolsentry-usage"); err == nil {
			t.Error("subscriber opened the usage bucket")
		}
		c3, cc3 := short()
		defer cc3()
		if _, err := sub.Publish(c3, "toolsentry.telemetry.schema.x", []byte(`{}`)); err == nil {
			t.Error("subscriber published telemetry")
		}
		if _, err := subNC.SubscribeSync("_INBOX_workers.>"); err != nil {
			t.Fatal(err)
		}
		natstestWait(t, func() bool { return subErrs.has(`Permissions Violation for Subscription to "_INBOX_workers.>"`) })
	})

	// The operator accepts the drift with `toolsentry baseline accept`: it
	// reads the baseline, publishes the accept event, and reads the result
	// serve applied; agents cannot publish operator events.
	opArgs := []string{"--nats-url", url, "--nats-user", "operator", "--nats-password", pw["operator"], "--nats-inbox-prefix", "_INBOX_operators"}
	out, errOut, code = runCtx(testCtx(t, cmdTimeout), "", append([]string{"baseline", "list"}, opArgs...)...)
	if code != 0 || !strings.Contains(out, "held") {
		t.Fatalf("baseline list as operator: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	out, errOut, code = runCtx(testCtx(t, cmdTimeout), "", append([]string{"baseline", "accept", "crm.lookup", "--reason", "permissions test"}, opArgs...)...)
	if code != 0 || !strings.Contains(out, "baseline of crm.lookup") {
		t.Fatalf("baseline accept as operator: exit %d\nstdout: %s\nstderr: %s\nserve: %s", code, out, errOut, w.logs)
	}
	_, opJS, opErrs := connectAs(t, url, "operator", pw["operator"], nats.CustomInboxPrefix("_INBOX_operators"))
	t.Run("agent cannot publish operator events", func(t *testing.T) {
		for _, kind := range []string{"baseline_accepted", "baseline_reset", "agent_migrated", "agent_forgotten"} {
			subj := "toolsentry.telemetry." + kind + ".crm=2Elookup"
			c, cc := short()
			_, err := agentJS.Publish(c, subj, []byte(`{}`))
			cc()
			if err == nil {
				t.Errorf("agent published on %s", subj)
			}
			natstestWait(t, func() bool { return agentErrs.has(`Permissions Violation for Publish to "` + subj) })
		}
	})
	t.Run("operator publishes nothing else and writes no bucket", func(t *testing.T) {
		for _, subj := range []string{"toolsentry.telemetry.invocation.crm=2Elookup", "toolsentry.telemetry.schema.crm=2Elookup", "toolsentry.verdicts.schema.schema_match.crm=2Elookup"} {
			c, cc := short()
			_, err := opJS.Publish(c, subj, []byte(`{}`))
			cc()
			if err == nil {
				t.Errorf("operator published on %s", subj)
			}
			natstestWait(t, func() bool { return opErrs.has(`Permissions Violation for Publish to "` + subj) })
		}
		c, cc := short()
		defer cc()
		kv, err := opJS.KeyValue(c, "toolsentry-baselines")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(c, "crm=2Elookup", []byte(`{}`)); err == nil {
			t.Error("operator wrote a baseline")
		}
		c2, cc2 := short()
		defer cc2()
		if _, err := opJS.KeyValue(c2, "toolsentry-usage"); err == nil {
			t.Error("operator opened the usage bucket")
		}
	})

	// The worker did everything it does (provision, consume, verdicts,
	// state, watches) without one permission violation.
	if err := w.stop(t); err != nil {
		t.Errorf("serve returned %v\n%s", err, w.logs)
	}
	if logs := w.logs.String(); strings.Contains(logs, "Permissions Violation") || strings.Contains(logs, "permissions violation") {
		t.Errorf("the worker met a permission violation:\n%s", logs)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("test ran out of time")
	}
}

// natstestWait polls cond for up to 10s.
func natstestWait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
