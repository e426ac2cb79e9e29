package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// toolsentry status shows a running worker's lanes: owner, checkpoint and
// lag, as text and as JSON.
func TestStatus(t *testing.T) {
	unsetServeEnv(t)
	s := startServe(t, "")
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := testCtx(t, 30*time.Second)
	for _, id := range []string{"o1", "o2"} {
		if _, err := js.Publish(ctx, "toolsentry.telemetry.schema.crm=2Elookup", []byte(observation(id, "user_id"))); err != nil {
			t.Fatal(err)
		}
	}
	var r statusReport
	natstest.Eventually(t, 20*time.Second, "status --json shows both events applied", func() bool {
		out, stderr, code := runCmd(t, "", "status", "--nats-url", s.natsURL, "--json")
		if code != 0 {
			t.Fatalf("status --json: exit %d: %s", code, stderr)
		}
		r = statusReport{}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return r.Lag == 0 && len(r.Lanes) == 3 && r.Lanes[0].Checkpoint > 2 && r.LastSeq >= 2
	})
	if len(r.Members) != 1 {
		t.Fatalf("members %v, want serve's", r.Members)
	}
	member := r.Members[0]
	want := statusReport{Stream: "TOOLSENTRY_TELEMETRY", Messages: r.LastSeq, LastSeq: r.LastSeq, Partitions: 1,
		Members: []string{member}, Stale: []string{},
		Lanes: []laneStatus{{Lane: "tools.0", Owner: member, Epoch: 1}, {Lane: "composition", Owner: member, Epoch: 1}, {Lane: "directives", Owner: member, Epoch: 1}}}
	if diff := cmp.Diff(want, r, cmpopts.IgnoreFields(laneStatus{}, "Checkpoint")); diff != "" {
		t.Errorf("status --json (-want +got):\n%s", diff)
	}

	out, stderr, code := runCmd(t, "", "status", "--nats-url", s.natsURL)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, w := range []string{"stream TOOLSENTRY_TELEMETRY:", "partitions: 1, workers: " + member, "LANE         OWNER", "tools.0", "composition", "directives", "lag: 0 events"} {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}

	// A server without toolsentry's streams: the advice to run serve.
	_, stderr, code = runCmd(t, "", "status", "--nats-url", s.natsURL, "--prefix", "other")
	if code != 1 || !strings.Contains(stderr, "stream OTHER_TELEMETRY does not exist") {
		t.Errorf("another prefix: exit %d, %q: want 1 and the advice", code, stderr)
	}
	if out, _, code := runCmd(t, "", "status", "--help"); code != 0 || !strings.Contains(out, "--json") || !strings.Contains(out, "toolsentry_lag_events") {
		t.Errorf("status --help: exit %d:\n%s", code, out)
	}
}

// toolsentry_lag_events has one series per lane, the events stored and not
// yet applied, from the same reads as the pending gauge and /readyz's lag
// line: a lane nobody holds counts from its checkpoint.
func TestLagMetrics(t *testing.T) {
	for _, partitions := range []int{1, 2} {
		_, url := natstest.RunServer(t)
		js := natstest.JetStream(t, url)
		ctx := testCtx(t, 30*time.Second)
		res, err := consumer.Provision(ctx, js, consumer.Config{Prefix: fmt.Sprintf("lag%d", partitions), Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := js.Publish(ctx, res.Config.TelemetryPrefix()+".schema.t", []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		src := &lagSource{}
		reg := prometheus.NewRegistry()
		registerLag(reg, src)
		fams := gather(t, reg)
		if got := gaugeValues(fams["toolsentry_consumer_pending"]); !cmp.Equal(got, map[string]float64{"": -1}) {
			t.Errorf("before the service is ready: pending %v, want -1", got)
		}

		src.res.Store(res)
		fams = gather(t, reg)
		got := gaugeValues(fams["toolsentry_lag_events"])
		var tools float64
		for p := range partitions {
			tools += got[strconv.Itoa(p)]
		}
		if len(got) != partitions+2 || tools != 3 || got["composition"] != 0 || got["directives"] != 0 {
			t.Errorf("partitions %d: lag %v, want one series per lane and the 3 events in the tool's", partitions, got)
		}
		if got := gaugeValues(fams["toolsentry_consumer_pending"]); !cmp.Equal(got, map[string]float64{"": 3}) {
			t.Errorf("partitions %d: pending %v, want the sum", partitions, got)
		}
		if line := src.describe(ctx); !strings.HasPrefix(line, "lag: 3 events (tools.0: ") || !strings.Contains(line, "composition: 0 by nobody, directives: 0 by nobody)") {
			t.Errorf("partitions %d: /readyz lag %q", partitions, line)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// gaugeValues maps a family's partition label (or "") to its value.
func gaugeValues(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		out[labelsOf(m)["partition"]] = m.GetGauge().GetValue()
	}
	return out
}
