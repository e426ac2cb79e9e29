package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// hookReceiver is a webhook that refuses its first attempts, can refuse
// some keys for good, and records what it accepted by idempotency key, as
// a receiver that deduplicates would.
type hookReceiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	refuse   int            // answer 503 to this many more requests
	status   map[string]int // a key always answered with this status
	attempts map[string]int // by key, every request
	accepted map[string]int // by key, requests answered 2xx
	bodies   map[string][]byte
	refused  int
	problems []string
}

func newHookReceiver(t *testing.T, refuseFirst int) *hookReceiver {
	r := &hookReceiver{t: t, refuse: refuseFirst, status: map[string]int{}, attempts: map[string]int{}, accepted: map[string]int{}, bodies: map[string][]byte{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// answer makes the receiver answer key with status, always.
func (r *hookReceiver) answer(key string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status[key] = status
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case req.Method != http.MethodPost:
		r.problems = append(r.problems, "method "+req.Method)
	case req.Header.Get("Content-Type") != "application/json":
		r.problems = append(r.problems, "content type "+req.Header.Get("Content-Type"))
	case key == "":
		r.problems = append(r.problems, "no Idempotency-Key header")
	}
	if inBody := bodyKey(body); inBody != key {
		r.problems = append(r.problems, "header key "+key+" but body key "+inBody)
	}
	r.attempts[key]++
	if r.refuse > 0 {
		r.refuse--
		r.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if s, ok := r.status[key]; ok {
		w.WriteHeader(s)
		return
	}
	if r.accepted[key] > 0 && string(r.bodies[key]) != string(body) {
		r.problems = append(r.problems, "key "+key+" arrived twice with different bodies")
	}
	r.accepted[key]++
	r.bodies[key] = body
	w.WriteHeader(http.StatusAccepted)
}

var slackKeyRE = regexp.MustCompile(`idempotency key ([0-9a-f]+)`)

// bodyKey finds the idempotency key in a body of any format.
func bodyKey(body []byte) string {
	var alerts []struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(body, &alerts) == nil && len(alerts) == 1 {
		return alerts[0].Annotations["idempotency_key"]
	}
	var obj struct {
		Key    string            `json:"idempotency_key"`
		Blocks []json.RawMessage `json:"blocks"`
	}
	if json.Unmarshal(body, &obj) != nil {
		return ""
	}
	if obj.Blocks != nil {
		if m := slackKeyRE.FindSubmatch(body); m != nil {
			return string(m[1])
		}
	}
	return obj.Key
}

func (r *hookReceiver) snapshot() (attempts, accepted map[string]int, refused int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return clone(r.attempts), clone(r.accepted), r.refused, slices.Clone(r.problems)
}

func (r *hookReceiver) body(key string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[key]
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// startNotify runs notify in the background until the returned function
// is called, which stops it and returns its stderr; it waits until its
// durable exists.
func startNotify(t *testing.T, srv testNATS, args ...string) (stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := srv.js.Stream(testCtx(t, 10*time.Second), "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan cmdResult, 1)
	go func() {
		out, errOut, code := runCtx(ctx, "", append([]string{"notify", "--nats-url", srv.url, "--log-format", "json"}, args...)...)
		done <- cmdResult{out, errOut, code}
	}()
	natstest.Eventually(t, 10*time.Second, "notify's durable on the verdict stream", func() bool {
		select {
		case r := <-done:
			t.Fatalf("notify stopped: exit %d: %s", r.code, r.errOut)
		default:
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Consumers > 0
	})
	stopped := false
	var res cmdResult
	stop = func() string {
		if !stopped {
			stopped = true
			cancel()
			select {
			case res = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("notify did not stop in 20s")
			}
			if res.code != 0 {
				t.Errorf("notify exit %d, want 0: %s", res.code, res.errOut)
			}
		}
		return res.errOut
	}
	t.Cleanup(func() { stop() })
	return stop
}

// fastRetries makes retries quick enough for a test.
var fastRetries = []string{"--retry-wait", "20ms", "--retry-max-wait", "100ms"}

func TestNotifyDeliversEveryVerdictOnceByKey(t *testing.T) {
	srv := startProvisioned(t, "")
	hook := newHookReceiver(t, 3)
	names := events.Names{}
	ctx := testCtx(t, 60*time.Second)
	// Published before notify starts: --all makes the new durable start
	// with them.
	msgs := map[string]events.Message{
		"match":    schemaVerdict(t, names, guards.SchemaMatch, "billing.charge", "", "e1"),
		"degraded": compositionVerdict(t, names, guards.CompositionDegraded, "checkout", "e2"),
		"drift-o":  schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "other-agent", "e3"),
		"drift-b":  schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "billing-7", "e3"),
		"unused":   schemaVerdict(t, names, guards.DriftOnUnusedFields, "crm/lookup", "billing-7", "e4"),
		"semantic": compositionVerdict(t, names, guards.SemanticIncompatible, "refunds", "e5"),
		"single":   compositionVerdict(t, names, guards.SingleTool, "one", "e6"),
	}
	for _, name := range []string{"match", "degraded", "drift-o", "drift-b", "unused", "semantic", "single"} {
		publishMsg(t, ctx, srv.js, msgs[name])
	}
	args := append([]string{"--webhook", hook.srv.URL + "/hook", "--all"}, fastRetries...)
	stop := startNotify(t, srv, args...)

	want := []string{msgs["degraded"].ID, msgs["drift-o"].ID, msgs["drift-b"].ID, msgs["semantic"].ID}
	arrived := func(keys []string) func() bool {
		return func() bool {
			_, accepted, _, _ := hook.snapshot()
			for _, k := range keys {
				if accepted[k] == 0 {
					return false
				}
			}
			return true
		}
	}
	natstest.Eventually(t, 20*time.Second, "every verdict that needs action delivered", arrived(want))
	// Once acknowledged, nothing more arrives: the durable is at the end.
	cons, err := srv.js.Consumer(ctx, "TOOLSENTRY_VERDICTS", derivedName(t, hook.srv.URL+"/hook", formatJSON))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the durable acknowledged everything", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	})
	logs := stop()
	// Its pull requests are gone with it: a verdict published now waits
	// for the next notify (not for an ack wait after a dead client).
	natstest.Eventually(t, 10*time.Second, "notify's pull requests gone", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumWaiting == 0
	})

	attempts, accepted, refused, problems := hook.snapshot()
	if len(problems) > 0 {
		t.Errorf("the receiver saw: %v", problems)
	}
	if refused != 3 {
		t.Errorf("refused %d requests, want the first 3", refused)
	}
	for _, k := range want {
		if accepted[k] != 1 {
			t.Logf("key %s accepted %d times (at least once; the receiver deduplicates by key)", k, accepted[k])
		}
	}
	var gotKeys []string
	for k := range accepted {
		gotKeys = append(gotKeys, k)
	}
	slices.Sort(gotKeys)
	slices.Sort(want)
	if diff := cmp.Diff(want, gotKeys); diff != "" {
		t.Errorf("delivered keys (-want +got):\n%s\nattempts: %v", diff, attempts)
	}
	for _, name := range []string{"match", "unused", "single"} {
		if attempts[msgs[name].ID] > 0 {
			t.Errorf("%s (action PROCEED) was sent by default", name)
		}
	}
	if !strings.Contains(logs, "will retry") || strings.Contains(logs, hook.srv.URL+"/hook") {
		t.Errorf("logs should report the retries without the webhook's path:\n%s", logs)
	}

	// A restart goes on where the durable stands: the new verdict only.
	late := schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "billing-7", "e7")
	publishMsg(t, ctx, srv.js, late)
	stop = startNotify(t, srv, args...)
	deadline := time.Now().Add(20 * time.Second)
	for !arrived([]string{late.ID})() {
		if time.Now().After(deadline) {
			t.Fatalf("the verdict published while notify was down did not arrive; notify said:\n%s", stop())
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	attempts2, _, _, _ := hook.snapshot()
	for _, k := range want {
		if attempts2[k] != attempts[k] {
			t.Errorf("key %s sent again after the restart (%d attempts, then %d)", k, attempts[k], attempts2[k])
		}
	}
}

// derivedName is the durable notify derives for a webhook and format with
// the default filters.
func derivedName(t *testing.T, webhook, format string) string {
	t.Helper()
	f := notifyFlags{webhook: webhook, format: format, cfg: notifyConfig{timeout: time.Second, retryWait: time.Second, retryMaxWait: time.Second, maxDeliver: 1}}
	c, err := f.config(events.Names{}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return c.durable
}

func TestNotifyRejectedAndGivenUpAreNotRetriedForever(t *testing.T) {
	srv := startProvisioned(t, "")
	hook := newHookReceiver(t, 0)
	names := events.Names{}
	ctx := testCtx(t, 60*time.Second)
	bad := schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "a1", "e1")
	down := schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "a2", "e2")
	good := schemaVerdict(t, names, guards.DriftOnUsedFields, "crm/lookup", "a3", "e3")
	hook.answer(bad.ID, http.StatusBadRequest)
	hook.answer(down.ID, http.StatusBadGateway)
	stop := startNotify(t, srv, append([]string{"--webhook", hook.srv.URL, "--max-deliver", "3", "--filter", "toolsentry.verdicts.>"}, fastRetries...)...)
	// Not a verdict: reported and skipped, never posted.
	if _, err := srv.js.Publish(ctx, "toolsentry.verdicts.schema.drift_on_used_fields.x", []byte(`{"not":"a verdict"}`)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []events.Message{bad, down, good} {
		publishMsg(t, ctx, srv.js, m)
	}
	natstest.Eventually(t, 20*time.Second, "the good verdict delivered and the failing one tried 3 times", func() bool {
		attempts, accepted, _, _ := hook.snapshot()
		return accepted[good.ID] == 1 && attempts[down.ID] == 3
	})
	time.Sleep(300 * time.Millisecond) // three retry delays: a 4th attempt would show
	logs := stop()
	attempts, _, _, problems := hook.snapshot()
	if len(problems) > 0 {
		t.Errorf("the receiver saw: %v", problems)
	}
	if len(attempts) != 3 {
		t.Errorf("posted %d keys, want the 3 verdicts: %v", len(attempts), attempts)
	}
	if attempts[bad.ID] != 1 {
		t.Errorf("a 400 was tried %d times, want 1", attempts[bad.ID])
	}
	if attempts[down.ID] != 3 {
		t.Errorf("a 502 was tried %d times, want --max-deliver 3", attempts[down.ID])
	}
	for _, want := range []string{"the webhook refused the verdict; not retried", "giving up on the verdict after the last attempt", bad.ID, down.ID, `"rejected":1`, `"given_up":1`, `"delivered":1`, "not a verdict, skipped", `"skipped":1`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs do not say %q:\n%s", want, logs)
		}
	}
}

func TestNotifyBackoff(t *testing.T) {
	n := newNotifier(events.Names{}, notifyConfig{retryWait: time.Second, retryMaxWait: 10 * time.Second, timeout: time.Second})
	for _, tc := range []struct {
		attempts   uint64
		retryAfter time.Duration
		want       time.Duration
	}{
		{1, 0, time.Second}, {2, 0, 2 * time.Second}, {3, 0, 4 * time.Second}, {4, 0, 8 * time.Second},
		{5, 0, 10 * time.Second}, {60, 0, 10 * time.Second},
		{1, 5 * time.Second, 5 * time.Second}, {1, time.Hour, 10 * time.Second},
	} {
		if got := n.backoff(tc.attempts, tc.retryAfter); got != tc.want {
			t.Errorf("backoff(%d, %s) = %s, want %s", tc.attempts, tc.retryAfter, got, tc.want)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := retryAfter("7", now); got != 7*time.Second {
		t.Errorf("Retry-After 7: %s", got)
	}
	if got := retryAfter(now.Add(time.Minute).Format(http.TimeFormat), now); got != time.Minute {
		t.Errorf("Retry-After as a date: %s", got)
	}
	if got := retryAfter("soon", now); got != 0 {
		t.Errorf("Retry-After soon: %s", got)
	}
}

// decodeNotice is a verdict message as notify reads it.
func decodeNotice(t *testing.T, m events.Message) notice {
	t.Helper()
	ev, err := events.Names{}.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNotice(ev, m.Subject)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNotifyFormats(t *testing.T) {
	names := events.Names{}
	drift := schemaVerdict(t, names, guards.DriftOnUsedFields, "github/get_issue", "billing-7", "e1")
	degraded := compositionVerdict(t, names, guards.CompositionDegraded, "checkout", "e2")

	t.Run("alertmanager", func(t *testing.T) {
		var got []map[string]map[string]string
		body, err := render(formatAlertmanager, decodeNotice(t, drift))
		if err != nil {
			t.Fatal(err)
		}
		var raw []map[string]any
		if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 1 {
			t.Fatalf("not a JSON array of one alert: %s", body)
		}
		if raw[0]["startsAt"] != "2026-11-29T10:00:00Z" {
			t.Errorf("startsAt %v, want the verdict's time", raw[0]["startsAt"])
		}
		delete(raw[0], "startsAt")
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("labels and annotations are not maps of strings: %s", body)
		}
		want := map[string]map[string]string{
			"labels": {
				"alertname": "ToolsentryDriftOnUsedFields", "guard": "schema", "verdict": "DRIFT_ON_USED_FIELDS",
				"action": "MIGRATE", "severity": "warning",
				"tool": "get_issue", "tool_id": "github/get_issue", "server": "github", "agent": "billing-7",
			},
			"annotations": {
				"title":           "MIGRATE: DRIFT_ON_USED_FIELDS on github/get_issue for agent billing-7",
				"summary":         "billing-7 must send userId instead of user_id; migration available",
				"description":     "HALT: Drift on used fields ['user_id']. Apply migration.",
				"affected":        "user_id",
				"idempotency_key": drift.ID,
				"manifest_digest": strings.Repeat("ab", 32),
			},
		}
		if diff := cmp.Diff(want, got[0]); diff != "" {
			t.Errorf("alert (-want +got):\n%s", diff)
		}

		body, err = render(formatAlertmanager, decodeNotice(t, degraded))
		if err != nil {
			t.Fatal(err)
		}
		var comp []amAlert
		if err := json.Unmarshal(body, &comp); err != nil {
			t.Fatal(err)
		}
		wantLabels := map[string]string{"alertname": "ToolsentryCompositionDegraded", "guard": "composition", "verdict": "COMPOSITION_DEGRADED", "action": "HALT", "severity": "critical", "composition": "checkout"}
		if diff := cmp.Diff(wantLabels, comp[0].Labels); diff != "" {
			t.Errorf("composition alert labels (-want +got):\n%s", diff)
		}
	})

	t.Run("slack", func(t *testing.T) {
		body, err := render(formatSlack, decodeNotice(t, drift))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Text   string `json:"text"`
			Blocks []struct {
				Type string `json:"type"`
				Text *struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"text"`
				Fields []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"fields"`
				Elements []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"elements"`
			} `json:"blocks"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Text != "MIGRATE: DRIFT_ON_USED_FIELDS on github/get_issue for agent billing-7" {
			t.Errorf("text %q", got.Text)
		}
		var types []string
		for _, b := range got.Blocks {
			types = append(types, b.Type)
		}
		if diff := cmp.Diff([]string{"header", "section", "section", "context"}, types); diff != "" {
			t.Fatalf("block types (-want +got):\n%s\n%s", diff, body)
		}
		if h := got.Blocks[0].Text; h.Type != "plain_text" || h.Text != "MIGRATE · DRIFT_ON_USED_FIELDS" {
			t.Errorf("header %+v", h)
		}
		if s := got.Blocks[1].Text; s.Type != "mrkdwn" || !strings.Contains(s.Text, "must send userId instead of user_id") || !strings.Contains(s.Text, "Apply migration.") {
			t.Errorf("section %+v", s)
		}
		var fields []string
		for _, f := range got.Blocks[2].Fields {
			fields = append(fields, f.Text)
		}
		wantFields := []string{"*Action*\nMIGRATE", "*Verdict*\nDRIFT_ON_USED_FIELDS", "*Tool*\nget_issue", "*Server*\ngithub", "*Agent*\nbilling-7", "*Affected*\nuser_id"}
		if diff := cmp.Diff(wantFields, fields); diff != "" {
			t.Errorf("fields (-want +got):\n%s", diff)
		}
		if bodyKey(body) != drift.ID {
			t.Errorf("the context does not carry the idempotency key: %+v", got.Blocks[3])
		}
		if slackEscape("a<b>&c") != "a&lt;b&gt;&amp;c" {
			t.Error("mrkdwn is not escaped")
		}
	})

	t.Run("json", func(t *testing.T) {
		body, err := render(formatJSON, decodeNotice(t, degraded))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		data, _ := got["data"].(map[string]any)
		delete(got, "data")
		want := map[string]any{
			"idempotency_key": degraded.ID, "id": degraded.ID, "type": events.TypeCompositionVerdict,
			"subject": degraded.Subject, "time": "2026-11-29T10:00:00Z", "action": "HALT",
			"summary": "workflow checkout must not run: composed quality 77.38% < requirement 90.00%",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("envelope (-want +got):\n%s", diff)
		}
		var inStream struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(degraded.Data, &inStream); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(inStream.Data, data); diff != "" {
			t.Errorf("data is not the verdict's data (-stream +sent):\n%s", diff)
		}
	})
}

// TestNotifyTakesTheVerdictsAction: a verdict that carries its action and
// summary is notified with them; one written before verdicts carried them
// gets them derived (TestNotifyFormats).
func TestNotifyTakesTheVerdictsAction(t *testing.T) {
	v := events.SchemaVerdict{
		Verdict: guards.DriftOnUsedFields, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		Action: guards.ActionHalt, Summary: "billing-7 must stop: user_id was removed",
		ManifestDigest: strings.Repeat("ab", 32), ToolID: "crm.lookup", AgentID: "billing-7", Version: "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64), CurrentFingerprint: "sha256:" + strings.Repeat("b", 64),
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`["user_id"]`), Migration: json.RawMessage(`{"steps":[],"blocked":[]}`),
		GuardVersion: "test", InputEventID: "e1", InputSubject: "toolsentry.telemetry.schema.x", InputSequence: 1,
	}
	m, err := events.Names{}.NewSchemaVerdict(v, verdictTime)
	if err != nil {
		t.Fatal(err)
	}
	n := decodeNotice(t, m)
	if n.action != guards.ActionHalt || n.summary != v.Summary {
		t.Errorf("action %s, summary %q: want the verdict's", n.action, n.summary)
	}
}

func TestNotifyHelp(t *testing.T) {
	out, _, code := runCmd(t, "", "notify", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Usage: toolsentry notify --webhook URL", "--format NAME", "json, slack, alertmanager", "--filter SUBJECT",
		"--durable NAME", "--max-deliver N", "Idempotency-Key", "DRIFT_ON_USED_FIELDS, COMPOSITION_DEGRADED, SEMANTIC_INCOMPATIBLE", "/api/v2/alerts"} {
		if !strings.Contains(out, want) {
			t.Errorf("notify --help does not say %q", want)
		}
	}
	out, _, _ = runCmd(t, "", "help")
	if !strings.Contains(out, "\n  notify ") {
		t.Errorf("toolsentry help does not list notify:\n%s", out)
	}
	out, _, _ = runCmd(t, "", "serve", "--help")
	if !strings.Contains(out, "--notify-webhook URL") {
		t.Error("serve --help does not document --notify-webhook")
	}
}

func TestNotifyUsageErrors(t *testing.T) {
	t.Setenv("TOOLSENTRY_NOTIFY_WEBHOOK", "")
	url := freeURL(t) // never dialled: each case fails first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--webhook is required"},
		{[]string{"--webhook", "not a url"}, `--webhook "not a url": want an http:// or https:// URL`},
		{[]string{"--webhook", "ftp://example.com/x"}, "want an http:// or https:// URL"},
		{[]string{"--webhook", "http://"}, "with a host"},
		{[]string{"--webhook", "http://x", "--format", "xml"}, `--format "xml": want json, slack, alertmanager`},
		{[]string{"--webhook", "http://x", "--filter", "toolsentry.telemetry.>"}, "want a subject of the verdict stream"},
		{[]string{"--webhook", "http://x", "--filter", "toolsentry.verdicts.>.x"}, "'>' must be the last token"},
		{[]string{"--webhook", "http://x", "--durable", "a.b"}, `--durable "a.b"`},
		{[]string{"--webhook", "http://x", "--max-deliver", "0"}, "--max-deliver 0"},
		{[]string{"--webhook", "http://x", "extra"}, "notify takes no arguments"},
	} {
		_, errOut, code := runCmd(t, "", append([]string{"notify", "--nats-url", url}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("notify %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	_, errOut, code := runCmd(t, "", "serve", "--notify-webhook", "localhost:9093")
	if code != 2 || !strings.Contains(errOut, "--notify-webhook") {
		t.Errorf("serve --notify-webhook localhost:9093: exit %d, %q", code, errOut)
	}
	_, errOut, code = runCmd(t, "", "serve", "--notify-format", "slack")
	if code != 2 || !strings.Contains(errOut, "need --notify-webhook") {
		t.Errorf("serve --notify-format slack without a webhook: exit %d, %q; want 2, not a silently ignored setting", code, errOut)
	}
}

func TestNotifyWithoutTheVerdictStream(t *testing.T) {
	_, url := natstest.RunServer(t)
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "notify", "--nats-url", url, "--webhook", "http://127.0.0.1:1/x")
	if code != 1 || !strings.Contains(errOut, "stream TOOLSENTRY_VERDICTS does not exist") || !strings.Contains(errOut, "toolsentry serve") {
		t.Errorf("exit %d, stderr %q: want 1 and the advice to run serve", code, errOut)
	}
}

// TestServeNotifies: serve's own notifier delivers a verdict serve made
// from real telemetry, as an Alertmanager alert, without the values of the
// agent's arguments.
func TestServeNotifies(t *testing.T) {
	unsetServeEnv(t)
	hook := newHookReceiver(t, 1)
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json",
		"--notify-webhook", hook.srv.URL+"/api/v2/alerts", "--notify-format", "alertmanager")
	js := natstest.JetStream(t, r.natsURL)
	ctx := testCtx(t, 60*time.Second)
	inv := cloudEvent("i1", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"billing-7","arguments":{"user_id":"`+secret+`"},"outcome":{"status":"ok"}}`)
	for _, in := range []struct{ subject, body string }{
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o1", "user_id")},
		{"toolsentry.telemetry.invocation.crm=2Elookup", inv},
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o2", "userId")},
	} {
		if _, err := js.Publish(ctx, in.subject, []byte(in.body)); err != nil {
			t.Fatal(err)
		}
	}
	var key string
	natstest.Eventually(t, 30*time.Second, "serve's verdict at the webhook", func() bool {
		_, accepted, _, _ := hook.snapshot()
		for k := range accepted {
			key = k
		}
		return key != ""
	})
	var alerts []amAlert
	body := hook.body(key)
	if err := json.Unmarshal(body, &alerts); err != nil || len(alerts) != 1 {
		t.Fatalf("not one alert: %s", body)
	}
	l := alerts[0].Labels
	if l["verdict"] != "DRIFT_ON_USED_FIELDS" || l["tool"] != "crm.lookup" || l["agent"] != "billing-7" || l["action"] == "" {
		t.Errorf("labels %v", l)
	}
	if strings.Contains(string(body), secret) {
		t.Errorf("the notification holds an argument's value: %s", body)
	}
	_, _, refused, problems := hook.snapshot()
	if refused != 1 || len(problems) > 0 {
		t.Errorf("refused %d (want 1), problems %v", refused, problems)
	}
	cons, err := js.Consumer(ctx, "TOOLSENTRY_VERDICTS", "toolsentry-notify")
	if err != nil {
		t.Fatalf("serve's notify durable: %v", err)
	}
	natstest.Eventually(t, 10*time.Second, "serve's notify durable acknowledged the verdict", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Consumer > 0
	})
	if err := r.stop(t); err != nil {
		t.Errorf("serve: %v\n%s", err, r.logs)
	}
}
