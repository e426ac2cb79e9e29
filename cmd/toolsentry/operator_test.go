package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// operatorScene is serve on the embedded server with crm.lookup observed,
// called by billing with user_id, then renamed to userId: the drift on
// user_id holds the baseline.
type operatorScene struct {
	t   *testing.T
	ctx context.Context
	s   *served
	js  jetstream.JetStream
	n   int
}

func newOperatorScene(t *testing.T) *operatorScene {
	s := startServe(t, "")
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sc := &operatorScene{t: t, ctx: testCtx(t, 2*cmdTimeout), s: s, js: js}
	sc.observe("1", "user_id")
	sc.call("billing", `{"user_id":"u-1"}`)
	sc.observe("2", "userId")
	sc.waitBaseline("the drift held", func(r core.BaselineRecord) bool { return r.Held })
	return sc
}

func (sc *operatorScene) meta() events.Meta {
	sc.n++
	return events.Meta{ID: fmt.Sprintf("op-scene-%d", sc.n), Source: "test", Time: verdictTime}
}

func (sc *operatorScene) observe(version, field string) {
	sc.t.Helper()
	m, err := events.Names{}.NewSchemaObserved(sc.meta(), events.SchemaObserved{ToolID: "crm.lookup", Version: version,
		Tool: &events.MCPTool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object","properties":{"` + field + `":{"type":"string"}},"required":["` + field + `"]}`)}})
	if err != nil {
		sc.t.Fatal(err)
	}
	publishMsg(sc.t, sc.ctx, sc.js, m)
}

func (sc *operatorScene) call(agent, args string) {
	sc.t.Helper()
	types, err := events.FieldTypesOf([]byte(args))
	if err != nil {
		sc.t.Fatal(err)
	}
	m, err := events.Names{}.NewInvocation(sc.meta(), events.Invocation{AgentID: agent, ToolID: "crm.lookup", ArgumentTypes: types})
	if err != nil {
		sc.t.Fatal(err)
	}
	publishMsg(sc.t, sc.ctx, sc.js, m)
}

// baseline reads crm.lookup's record (found false when it has none).
func (sc *operatorScene) baseline() (core.BaselineRecord, bool) {
	kv, err := sc.js.KeyValue(sc.ctx, "toolsentry-baselines")
	if err != nil {
		sc.t.Fatal(err)
	}
	e, err := kv.Get(sc.ctx, "crm=2Elookup")
	if err != nil {
		return core.BaselineRecord{}, false
	}
	var r core.BaselineRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		sc.t.Fatal(err)
	}
	return r, true
}

func (sc *operatorScene) waitBaseline(what string, ok func(core.BaselineRecord) bool) core.BaselineRecord {
	sc.t.Helper()
	var r core.BaselineRecord
	natstest.Eventually(sc.t, cmdTimeout, what, func() bool {
		var found bool
		r, found = sc.baseline()
		return found && ok(r)
	})
	return r
}

// settled waits until serve has handled every input.
func (sc *operatorScene) settled() {
	sc.t.Helper()
	natstest.Eventually(sc.t, cmdTimeout, "every input handled", func() bool {
		return lanesSettled(sc.ctx, sc.js, "")
	})
}

func (sc *operatorScene) run(args ...string) (string, string, int) {
	sc.t.Helper()
	return runCtx(sc.ctx, "", append(args, "--nats-url", sc.s.natsURL)...)
}

// replayClean runs replay and wants exit 0 with every verdict matched.
func (sc *operatorScene) replayClean(after string) {
	sc.t.Helper()
	sc.settled()
	out, errOut, code := sc.run("replay")
	if code != 0 || !strings.Contains(out, "RESULT: every verdict matches") {
		sc.t.Fatalf("replay after %s: exit %d\n%s%s", after, code, out, errOut)
	}
}

// TestOperatorActionsReplayClean: accept, mark migrated, forget and reset,
// each through its command against serve on the embedded server, each
// followed by a replay that re-derives every verdict (exit 0). Before
// operator actions were events, a replay after a routine accept reported
// differences (exit 1).
func TestOperatorActionsReplayClean(t *testing.T) {
	seedFile, pubFile, _ := keygenFiles(t)
	t.Setenv(envSigningKey, seedFile)
	sc := newOperatorScene(t)
	held, _ := sc.baseline()
	sc.replayClean("the drift")

	// accept: what the operator saw, recorded with who and why.
	out, errOut, code := sc.run("baseline", "accept", "crm.lookup", "--reason", "CRM v2 rollout", "--operator", "ana@ops")
	if code != 0 {
		t.Fatalf("accept: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"baseline of crm.lookup " + held.Baseline.Fingerprint + " → " + held.Current.Fingerprint + " (version 2)",
		"baseline_accepted by ana@ops, telemetry sequence", ", verdict "} {
		if !strings.Contains(out, want) {
			t.Errorf("accept output lacks %q:\n%s", want, out)
		}
	}
	if r, _ := sc.baseline(); r.Held || r.Baseline.Fingerprint != held.Current.Fingerprint {
		t.Fatalf("accept reported, but the record is %+v", r)
	}
	ev := sc.lastTelemetry("baseline_accepted")
	if ev.Operator.Reason != "CRM v2 rollout" || ev.Operator.Operator != "ana@ops" || ev.Operator.Fingerprint != held.Current.Fingerprint || ev.Source != "toolsentry/baseline" {
		t.Errorf("the accept event records %+v from %q", ev.Operator, ev.Source)
	}
	sc.replayClean("accept")

	// Accepting again: nothing held, exit 0.
	out, _, code = sc.run("baseline", "accept", "crm.lookup")
	if code != 0 || !strings.Contains(out, "nothing held") {
		t.Errorf("second accept: exit %d\n%s", code, out)
	}

	// The agent still sends user_id; marked migrated, it gets PROCEED.
	out, errOut, code = sc.run("agent", "migrated", "--agent", "billing", "--tool", "crm.lookup", "--reason", "billing v3")
	if code != 0 || !strings.Contains(out, "billing marked migrated to "+held.Current.Fingerprint+" of crm.lookup: 1 field(s) moved") {
		t.Fatalf("agent migrated: exit %d\n%s%s", code, out, errOut)
	}
	sc.waitDirective("schema.crm=2Elookup.billing", func(d events.Directive) bool {
		return d.Action == guards.ActionProceed && d.Verdict.Name == string(guards.SchemaMatch)
	})
	sc.replayClean("agent migrated")

	// Forget another agent's usage: its fields no longer hold anything.
	sc.call("support", `{"userId":"u-2"}`)
	out, errOut, code = sc.run("agent", "forget", "--agent", "support", "--tool", "crm.lookup", "--yes")
	if code != 0 || !strings.Contains(out, "usage of crm.lookup by support forgotten") {
		t.Fatalf("agent forget: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = sc.run("agent", "forget", "--agent", "support", "--tool", "crm.lookup", "--yes")
	if code != 0 || !strings.Contains(out, "nothing to forget") {
		t.Errorf("forgetting twice: exit %d\n%s", code, out)
	}
	sc.replayClean("agent forget")

	// reset: the next observation is NO_BASELINE.
	out, errOut, code = sc.run("baseline", "reset", "crm.lookup", "--yes")
	if code != 0 || !strings.Contains(out, "deleted; the next observation becomes the baseline") {
		t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
	}
	if _, found := sc.baseline(); found {
		t.Fatal("reset reported, but the record is there")
	}
	sc.observe("3", "user")
	sc.waitBaseline("a new baseline", func(r core.BaselineRecord) bool { return r.Current.Version == "3" && !r.Held })
	sc.replayClean("reset")

	// One writer per chain: the recorded verdicts verify, one chain.
	out, errOut, code = sc.run("verify", "--pubkey", pubFile)
	if code != 0 || !strings.Contains(out, "in 1 chain") {
		t.Errorf("verify: exit %d\n%s%s", code, out, errOut)
	}
}

// lastTelemetry decodes the last input of kind token in the telemetry stream.
func (sc *operatorScene) lastTelemetry(token string) events.Event {
	sc.t.Helper()
	s, err := sc.js.Stream(sc.ctx, "TOOLSENTRY_TELEMETRY")
	if err != nil {
		sc.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(sc.ctx, "toolsentry.telemetry."+token+".>")
	if err != nil {
		sc.t.Fatal(err)
	}
	ev, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		sc.t.Fatal(err)
	}
	return ev
}

func (sc *operatorScene) waitDirective(key string, ok func(events.Directive) bool) {
	sc.t.Helper()
	kv, err := sc.js.KeyValue(sc.ctx, "toolsentry-directives")
	if err != nil {
		sc.t.Fatal(err)
	}
	natstest.Eventually(sc.t, cmdTimeout, "directive "+key, func() bool {
		e, err := kv.Get(sc.ctx, key)
		if err != nil {
			return false
		}
		var d events.Directive
		return json.Unmarshal(e.Value(), &d) == nil && ok(d)
	})
}

// TestOperatorAcceptRefused: an accept of a version other than the
// current one is refused by serve with both fingerprints named (exit 1),
// and the hold stays; the refusal is in the log too, and replays clean.
func TestOperatorAcceptRefused(t *testing.T) {
	sc := newOperatorScene(t)
	held, _ := sc.baseline()
	stale := "sha256:" + strings.Repeat("0", 64)
	_, errOut, code := sc.run("baseline", "accept", "crm.lookup", "--fingerprint", stale)
	if code != 1 || !strings.Contains(errOut, "the current version of crm.lookup is "+held.Current.Fingerprint+", not "+stale+" that was accepted: nothing accepted") {
		t.Errorf("stale accept: exit %d, stderr %q", code, errOut)
	}
	if r, _ := sc.baseline(); !r.Held || r.Baseline.Fingerprint != held.Baseline.Fingerprint {
		t.Errorf("a refused accept changed the record: %+v", r)
	}
	_, errOut, code = sc.run("agent", "migrated", "--agent", "nobody", "--tool", "crm.lookup")
	if code != 1 || !strings.Contains(errOut, "no usage of crm.lookup by nobody recorded") {
		t.Errorf("migrated without usage: exit %d, stderr %q", code, errOut)
	}
	sc.replayClean("refused actions")
}

// TestOperatorWaitsForServe: without a worker the command says that the
// action is published but not applied (exit 1), or with --wait 0 that it
// does not wait; a worker started later applies it in order.
func TestOperatorWaitsForServe(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	_, errOut, code := runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--wait", "300ms", "--nats-url", srv.url)
	if code != 1 || !strings.Contains(errOut, "but no worker applied it within 300ms: is `toolsentry serve` running") {
		t.Errorf("no serve: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := runCtx(ctx, "", "agent", "forget", "--agent", "a", "--tool", "crm.lookup", "--yes", "--wait", "0", "--nats-url", srv.url)
	if code != 0 || !strings.Contains(out, "crm.lookup: agent_forgotten published at telemetry sequence 2") || !strings.Contains(out, "not waiting") {
		t.Errorf("--wait 0: exit %d, output %q, stderr %q", code, out, errOut)
	}
	if rec, _ := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); !rec.Held {
		t.Error("the CLI wrote the record itself")
	}
}

// TestOperatorBadEventDeadLettered: an operator event that breaks its
// schema (an accept naming an agent) goes to the dead-letter stream with
// its reason, and serve goes on.
func TestOperatorBadEventDeadLettered(t *testing.T) {
	sc := newOperatorScene(t)
	body := `{"specversion":"1.0","id":"bad-op","source":"test","type":"` + events.TypeBaselineAccepted + `","data":{"tool_id":"crm.lookup","fingerprint":"sha256:ab","operator":"x","agent_id":"billing"}}`
	if _, err := sc.js.Publish(sc.ctx, "toolsentry.telemetry.baseline_accepted.crm=2Elookup", []byte(body)); err != nil {
		t.Fatal(err)
	}
	sc.settled()
	dlq := readAll(t, sc.ctx, sc.js, "TOOLSENTRY_DLQ")
	if len(dlq) != 1 || dlq[0].Subject() != "toolsentry.dlq.schema_invalid" || !strings.Contains(dlq[0].Headers().Get(events.HeaderDLQError), "agent_id") || dlq[0].Headers().Get(events.HeaderDLQReason) != "schema_invalid" {
		for _, m := range dlq {
			t.Logf("%s %v", m.Subject(), m.Headers())
		}
		t.Fatalf("%d dead letters, want the bad accept as schema_invalid naming agent_id", len(dlq))
	}
	if r, _ := sc.baseline(); !r.Held {
		t.Error("the bad accept was applied")
	}
	// serve goes on: a good accept after it is applied.
	out, errOut, code := sc.run("baseline", "accept", "crm.lookup", "--wait", "20s")
	if code != 0 {
		t.Errorf("accept after a dead letter: exit %d\n%s%s", code, out, errOut)
	}
	sc.replayClean("a dead-lettered operator event")
}

func TestAgentUsageErrors(t *testing.T) {
	url := freeURL(t) // usage errors are found before connecting
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "one subcommand"},
		{[]string{"frob", "--agent", "a", "--tool", "t"}, "unknown agent subcommand"},
		{[]string{"migrated", "--tool", "t"}, "needs --agent and --tool"},
		{[]string{"forget", "--agent", "a", "--tool", "t"}, "add --yes"},
		{[]string{"forget", "--agent", "a", "--tool", "t", "--yes", "--fingerprint", "sha256:x"}, "--fingerprint goes with agent migrated"},
		{[]string{"migrated", "--agent", "a", "--tool", "t", "--yes"}, "--yes goes with agent forget"},
		{[]string{"migrated", "--agent", "a", "--tool", "t", "--wait", "-1s"}, "--wait"},
		{[]string{"migrated", "--agent", "a", "--tool", "t", "--reason", strings.Repeat("x", 1025)}, "at most 1024"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"agent", "--nats-url", url}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestOperatorAcceptRacingDrift: an accept of the version the operator saw
// and an observation of yet another version, published at the same time,
// are applied in stream order by the tool's lane: the accept is applied or
// refused, never both, and the tool's chain has one head (verify), which a
// replay re-derives.
func TestOperatorAcceptRacingDrift(t *testing.T) {
	seedFile, pubFile, _ := keygenFiles(t)
	t.Setenv(envSigningKey, seedFile)
	sc := newOperatorScene(t)
	held, _ := sc.baseline()
	done := make(chan struct{})
	var out, errOut string
	var code int
	go func() {
		defer close(done)
		out, errOut, code = sc.run("baseline", "accept", "crm.lookup", "--fingerprint", held.Current.Fingerprint)
	}()
	sc.observe("3", "user")
	<-done
	switch {
	case code == 0 && strings.Contains(out, "→ "+held.Current.Fingerprint):
	case code == 1 && strings.Contains(errOut, "nothing accepted"):
	default:
		t.Fatalf("racing accept: exit %d\n%s%s", code, out, errOut)
	}
	sc.replayClean("an accept racing a drift")
	vout, verr, vcode := sc.run("verify", "--pubkey", pubFile)
	if vcode != 0 || !strings.Contains(vout, "in 1 chain") {
		t.Errorf("verify: exit %d\n%s%s", vcode, vout, verr)
	}
}

// TestAPIRefusesOperatorEvents: POST /v1/events publishes with serve's own
// connection, so it refuses operator events (403) in every mode, a batch
// holding one as a whole, and publishes nothing.
func TestAPIRefusesReservedEvents(t *testing.T) {
	s := startServe(t, "")
	c := newAPIClient(t, s.httpAddr)
	accept := ceJSON("op1", events.TypeBaselineAccepted, `{"tool_id":"crm/lookup","fingerprint":"sha256:ab","operator":"mallory"}`)
	obs := ceJSON("o1", events.TypeSchemaObserved, apiToolV1)
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
	}{
		{"structured", map[string]string{"Content-Type": "application/cloudevents+json"}, accept},
		{"batch", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, "[" + obs + "," + accept + "]"},
		{"binary", map[string]string{"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Id": "op2", "Ce-Source": "x",
			"Ce-Type": events.TypeAgentForgotten}, `{"tool_id":"crm/lookup","agent_id":"a","operator":"mallory"}`},
	} {
		code, b := c.do(http.MethodPost, "/v1/events", tc.header, []byte(tc.body), "Error")
		if code != http.StatusForbidden || !strings.Contains(string(b), "is an operator event") {
			t.Errorf("%s: %d %s", tc.name, code, b)
		}
	}
	quality := ceJSON("q1", events.TypeQualityCheckpoint, `{"tool_id":"crm/lookup","calls":100,"successes":100,"through_sequence":1}`)
	if code, b := c.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents+json"}, []byte(quality), "Error"); code != http.StatusForbidden || !strings.Contains(string(b), "published by the workers") {
		t.Errorf("a quality checkpoint: %d %s, want 403", code, b)
	}
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, cmdTimeout)
	st, err := js.Stream(ctx, "TOOLSENTRY_TELEMETRY")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("the telemetry stream holds %d messages, want none", info.State.Msgs)
	}
}
