package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// toolsentry status shows a running worker's partition, checkpoint and
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
	natstest.Eventually(t, 20*time.Second, "status --json shows both events finished", func() bool {
		out, stderr, code := runCmd(t, "", "status", "--nats-url", s.natsURL, "--json")
		if code != 0 {
			t.Fatalf("status --json: exit %d: %s", code, stderr)
		}
		r = statusReport{}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return r.Lag == 0 && len(r.Partition) == 1 && r.Partition[0].Checkpoint == r.LastSeq && r.LastSeq >= 2
	})
	want := statusReport{Stream: "TOOLSENTRY_TELEMETRY", Messages: r.LastSeq, LastSeq: r.LastSeq, Partitions: 1,
		Members: []string{}, Stale: []string{},
		Partition: []partitionStatus{{Partition: 0, Consumer: "toolsentry-workers", Checkpoint: r.LastSeq, Delivered: r.LastSeq}}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("status --json (-want +got):\n%s", diff)
	}

	out, stderr, code := runCmd(t, "", "status", "--nats-url", s.natsURL)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, w := range []string{"stream TOOLSENTRY_TELEMETRY:", "partitions: 1 (a single worker)", "PARTITION  OWNER  CONSUMER", "toolsentry-workers", "lag: 0 events"} {
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

// toolsentry_lag_events has one series per partition, the events stored
// and not yet finished, from the same reads as the pending gauges and
// /readyz's lag line.
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
		wantLag := map[string]float64{}
		wantLine := "lag: " + strconv.Itoa(3*partitions) + " events ("
		for p := range partitions {
			wantLag[strconv.Itoa(p)] = 3 // every partition's consumer reads the whole stream today
			if p > 0 {
				wantLine += ", "
			}
			wantLine += fmt.Sprintf("partition %d: 3", p)
		}
		wantLine += ")"
		// The server counts a consumer's pending messages as the stream
		// stores them, a moment after the publish is acknowledged: poll
		// with a deadline, then read every view of the lag at once.
		natstest.Eventually(t, 10*time.Second, fmt.Sprintf("partitions %d: lag %v", partitions, wantLag), func() bool {
			fams = gather(t, reg)
			return cmp.Equal(gaugeValues(fams["toolsentry_lag_events"]), wantLag)
		})
		if got := gaugeValues(fams["toolsentry_consumer_pending"]); !cmp.Equal(got, map[string]float64{"": float64(3 * partitions)}) {
			t.Errorf("partitions %d: pending %v, want the sum", partitions, got)
		}
		if got := src.describe(ctx); got != wantLine {
			t.Errorf("partitions %d: /readyz lag %q, want %q", partitions, got, wantLine)
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
