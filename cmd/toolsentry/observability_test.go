package main

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// cloudEvent is a structured-mode CloudEvent of type typ with data.
func cloudEvent(id, typ, data string) string {
	return `{"specversion":"1.0","id":"` + id + `","source":"agents/billing-7","type":"` + typ + `","datacontenttype":"application/json","data":` + data + `}`
}

func observation(id, field string) string {
	return cloudEvent(id, events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"`+field+`":{"type":"string"}}}}}`)
}

// stepLog records the order of shutdown steps and handler events.
type stepLog struct {
	mu    sync.Mutex
	steps []string
}

func (l *stepLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, s)
}

func (l *stepLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.steps...)
}

// TestServeShutdownOrder: SIGTERM while an event is in flight (its verdict
// stored, its state not yet written): readiness turns 503 at once while the
// event is still being handled, the event then finishes (state written,
// acknowledged), and only then are publishes flushed and the connection
// closed.
func TestServeShutdownOrder(t *testing.T) {
	unsetServeEnv(t)
	log := &stepLog{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	verdictHook = func(string, string) {
		once.Do(func() {
			log.add("in_flight")
			close(entered)
			<-release
			log.add("handler_released")
		})
	}
	shutdownStep = log.add
	t.Cleanup(func() { verdictHook, shutdownStep = nil, nil })

	dataDir := t.TempDir()
	r := startServeArgs(t, "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-timeout", "30s")
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := testCtx(t, 60*time.Second)
	if _, err := js.Publish(ctx, "toolsentry.telemetry.schema.crm=2Elookup", []byte(observation("o1", "user_id"))); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatalf("the event was not handled\n%s", r.logs)
	}

	r.cancel() // SIGTERM
	r.cancel = nil
	ready := "http://" + r.httpAddr + "/readyz"
	natstest.Eventually(t, 10*time.Second, "/readyz turns 503 while the event is in flight", func() bool {
		code, _ := get(t, ready)
		return code == 503
	})
	if code, _ := get(t, "http://"+r.httpAddr+"/livez"); code != 200 {
		t.Errorf("/livez %d during shutdown, want 200", code)
	}
	natstest.Eventually(t, 10*time.Second, "shutdown reaches the drain", func() bool { return len(log.get()) == 3 })
	close(release)
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-ctx.Done():
		t.Fatal("serve did not stop")
	}
	want := []string{"in_flight", stepReadinessOff, stepDrain, "handler_released", stepFlush, stepClose}
	if d := cmp.Diff(want, log.get()); d != "" {
		t.Errorf("shutdown order (-want +got):\n%s\n%s", d, r.logs)
	}

	// The in-flight event completed: its verdict, its state and its lane's
	// checkpoint are all on the server, found there after restart.
	srv, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: filepath.Join(dataDir, "jetstream"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	js2 := natstest.JetStream(t, srv.ClientURL())
	leases, err := js2.KeyValue(ctx, "toolsentry-leases")
	if err != nil {
		t.Fatal(err)
	}
	if st, ok, err := engine.ReadLease(ctx, leases, "tools.0"); err != nil || !ok || st.Checkpoint < 2 || st.Owner != "" {
		t.Errorf("lane tools.0 after the shutdown: %+v, %v, %v; want the in-flight event (sequence 1) committed and the lease released", st, ok, err)
	}
	kv, err := js2.KeyValue(ctx, "toolsentry-baselines")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "crm=2Elookup"); err != nil {
		t.Errorf("state of the in-flight event not written: %v", err)
	}
	vs, err := js2.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	if si, _ := vs.Info(ctx); si == nil || si.State.Msgs != 1 {
		t.Errorf("verdict stream: %+v; want the one verdict", si)
	}
}

// scrape parses serve's /metrics.
func scrape(t *testing.T, httpAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	_, body := get(t, "http://"+httpAddr+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestServeMetrics scrapes /metrics after a scenario (a baseline, a use, a
// malformed event, a drift) and checks every family the issue lists: its
// type, its exact label names (none naming a tool or an agent) and values.
func TestServeMetrics(t *testing.T) {
	unsetServeEnv(t)
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := testCtx(t, 60*time.Second)
	for _, m := range []struct{ subject, body string }{
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o1", "user_id")},
		{"toolsentry.telemetry.invocation.crm=2Elookup", cloudEvent("i1", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"billing-agent","arguments":{"user_id":"u-42"}}`)},
		{"toolsentry.telemetry.invocation.crm=2Elookup", `not a cloudevent`},
		{"toolsentry.telemetry.schema.crm=2Elookup", observation("o2", "userId")},
	} {
		if _, err := js.Publish(ctx, m.subject, []byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 20*time.Second, "the four events and what they led to consumed", func() bool {
		total := 0.0
		fams := scrape(t, r.httpAddr)
		if f := fams["toolsentry_events_consumed_total"]; f != nil {
			for _, m := range f.GetMetric() {
				if k := labelsOf(m)["kind"]; k == "schema" || k == "invocation" {
					total += m.GetCounter().GetValue()
				}
			}
		}
		pending := fams["toolsentry_consumer_pending"].GetMetric()[0].GetGauge().GetValue()
		return total == 4 && pending == 0
	})
	fams := scrape(t, r.httpAddr)

	type family struct {
		typ    dto.MetricType
		labels []string
	}
	want := map[string]family{
		"toolsentry_events_consumed_total": {dto.MetricType_COUNTER, []string{"kind", "outcome"}},
		"toolsentry_verdicts_total":        {dto.MetricType_COUNTER, []string{"guard", "verdict"}},
		"toolsentry_dead_letters_total":    {dto.MetricType_COUNTER, []string{"kind", "reason"}},
		"toolsentry_processing_seconds":    {dto.MetricType_HISTOGRAM, []string{"kind"}},
		"toolsentry_redeliveries_total":    {dto.MetricType_COUNTER, []string{"kind"}},
		"toolsentry_consumer_pending":      {dto.MetricType_GAUGE, nil},
		"toolsentry_lag_events":            {dto.MetricType_GAUGE, []string{"partition"}},
	}
	for name, w := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("no %s", name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), w.typ)
		}
		for _, m := range f.GetMetric() {
			var got []string
			for l := range labelsOf(m) {
				got = append(got, l)
			}
			sort.Strings(got)
			if !cmp.Equal(w.labels, got, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") })) {
				t.Errorf("%s: labels %v, want %v", name, got, w.labels)
			}
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "toolsentry_") {
			continue
		}
		if _, ok := want[name]; !ok {
			t.Errorf("family %s is not checked by this test", name)
		}
		for _, m := range f.GetMetric() {
			for k, v := range labelsOf(m) {
				if strings.Contains(v, "crm") || strings.Contains(v, "lookup") || strings.Contains(v, "billing") {
					t.Errorf("%s: label %s=%q carries a tool or agent id", name, k, v)
				}
			}
		}
	}

	value := func(name string, labels map[string]string) float64 {
		for _, m := range fams[name].GetMetric() {
			if cmp.Equal(labels, labelsOf(m)) {
				if h := m.GetHistogram(); h != nil {
					return float64(h.GetSampleCount())
				}
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return -1
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolsentry_events_consumed_total", map[string]string{"kind": "schema", "outcome": "ack"}, 2},
		{"toolsentry_events_consumed_total", map[string]string{"kind": "invocation", "outcome": "ack"}, 1},
		{"toolsentry_events_consumed_total", map[string]string{"kind": "invocation", "outcome": "dead_letter"}, 1},
		{"toolsentry_dead_letters_total", map[string]string{"kind": "invocation", "reason": "not_cloudevent"}, 1},
		{"toolsentry_verdicts_total", map[string]string{"guard": "schema", "verdict": "drift_on_used_fields"}, 1},
		{"toolsentry_processing_seconds", map[string]string{"kind": "schema"}, 2},
		{"toolsentry_processing_seconds", map[string]string{"kind": "invocation"}, 2},
		{"toolsentry_redeliveries_total", map[string]string{"kind": "schema"}, 0},
		{"toolsentry_consumer_pending", map[string]string{}, 0},
		{"toolsentry_lag_events", map[string]string{"partition": "0"}, 0},
	}
	for _, c := range checks {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestServeLogs: JSON lines by default when not on a terminal, at the
// level --log-level asks for.
func TestServeLogs(t *testing.T) {
	unsetServeEnv(t)
	for _, tc := range []struct {
		level     string
		wantDebug bool
	}{{"info", false}, {"debug", true}} {
		r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--log-level", tc.level)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(r.logs.String()), "\n")
		debug := false
		for _, l := range lines {
			if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
				t.Errorf("--log-format auto off a terminal: line %q is not JSON", l)
				break
			}
			debug = debug || strings.Contains(l, `"level":"debug"`)
		}
		if debug != tc.wantDebug {
			t.Errorf("--log-level %s: debug lines %v, want %v", tc.level, debug, tc.wantDebug)
		}
	}
	// auto: JSON into a pipe, console onto a character device (a terminal).
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	log, err := newLogger(pw, "info", "auto")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hello")
	pw.Close()
	piped, _ := io.ReadAll(pr)
	if !strings.HasPrefix(string(piped), "{") {
		t.Errorf("auto into a pipe: %q, want JSON", piped)
	}
	if _, err := newLogger(pw, "loud", "json"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("a bad level: %v", err)
	}

	var buf strings.Builder
	log, err = newLogger(&buf, "info", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hello")
	if strings.HasPrefix(buf.String(), "{") || !strings.Contains(buf.String(), "INF") {
		t.Errorf("console format: %q", buf.String())
	}
}
