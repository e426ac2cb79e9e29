package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

// TestBenchSmallRun runs every phase on a small mix and checks that the
// report is complete and that the pipeline lost nothing: every schema
// observation got its verdict in the latency phase, the full-speed phase
// stored exactly the schema verdicts that applying the mix in order gives,
// nothing was dead-lettered, and the data directory is gone.
func TestBenchSmallRun(t *testing.T) {
	const events = 2000
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var errOut lockedBuffer // the engines log from several goroutines
	heap := filepath.Join(t.TempDir(), "heap.pprof")
	err := run(ctx, []string{"bench", "--events", "2000", "--json", "--dir", dir, "--memprofile", heap}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, errOut.String())
	}
	if b, err := os.ReadFile(heap); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--memprofile did not write a (gzipped) profile: %v, %d bytes", err, len(b))
	}

	var fields map[string]any
	if err := json.Unmarshal(out.Bytes(), &fields); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	for _, name := range []string{"events", "events_per_sec", "passthrough_events_per_sec", "raw_publish_events_per_sec", "consume_events_per_sec", "consume_raw_publish_ratio", "p50_ms", "p99_ms", "peak_rss_mb"} {
		v, ok := fields[name].(float64)
		if !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a number > 0", name, fields[name])
		}
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Events != events {
		t.Errorf("events = %d, want %d", rep.Events, events)
	}
	if rep.P99MS < rep.P50MS {
		t.Errorf("p99 %v ms below p50 %v ms", rep.P99MS, rep.P50MS)
	}
	mix, err := benchmix.New(benchmix.Options{Events: events})
	if err != nil {
		t.Fatal(err)
	}
	counts := mix.Counts()
	if rep.SchemaObservations != counts.Schema || rep.Invocations != counts.Invocation || rep.Contracts != counts.Contract || rep.Workflows != counts.Workflow {
		t.Errorf("reported mix %d/%d/%d/%d, want %+v", rep.SchemaObservations, rep.Invocations, rep.Contracts, rep.Workflows, counts)
	}
	if rep.LatencySamples != counts.Schema {
		t.Errorf("latency samples = %d, want one per schema observation (%d)", rep.LatencySamples, counts.Schema)
	}
	steady := 0
	for i, ev := range mix.All() {
		if ev.Kind == benchmix.KindSchema && i >= mix.FirstPassEnd() {
			steady++
		}
	}
	if rep.SteadyFromEvent != mix.FirstPassEnd() || rep.SteadySamples != steady || steady == 0 {
		t.Errorf("steady samples %d from event %d, want %d from %d", rep.SteadySamples, rep.SteadyFromEvent, steady, mix.FirstPassEnd())
	}
	if rep.P99SteadyMS < rep.P50SteadyMS || rep.P50SteadyMS <= 0 {
		t.Errorf("steady p50 %v ms, p99 %v ms: want 0 < p50 <= p99", rep.P50SteadyMS, rep.P99SteadyMS)
	}
	if want := benchReplaySchemaVerdicts(t, mix); rep.SchemaVerdicts != want {
		t.Errorf("schema verdicts = %d, want %d (the mix applied in order)", rep.SchemaVerdicts, want)
	}
	if rep.CompositionVerdicts < 1 {
		t.Errorf("composition verdicts = %d, want some", rep.CompositionVerdicts)
	}
	if rep.DeadLetters != 0 {
		t.Errorf("dead letters = %d, want 0", rep.DeadLetters)
	}
	checkBenchBacklog(t, fields, rep, 1)
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("data directory left behind: %v", left)
	}
	if strings.Contains(errOut.String(), "\r") {
		t.Errorf("progress drawn on a non-terminal: %q", errOut.String())
	}
}

// checkBenchBacklog checks the backlog phases of a one-round report: every
// rate and ratio to a ceiling a positive number, the drain ceiling given
// exactly the backlog, the pipeline's drain, the replay and its ceiling
// exactly what the stream holds after the drain (the backlog and the quality
// checkpoints the pipeline derived from it), the replay without
// differences, and the read amplification between 1 and one delivery per
// partition consumer, redeliveries aside.
func checkBenchBacklog(t *testing.T, fields map[string]any, rep benchReport, partitions int) {
	t.Helper()
	for _, name := range []string{"drain_events_per_sec", "drain_ceiling_events_per_sec", "drain_ceiling_ratio",
		"replay_events_per_sec", "replay_ceiling_events_per_sec", "replay_ceiling_ratio", "read_amplification", "pipeline_read_amplification"} {
		v, ok := fields[name].(float64)
		if !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a number > 0", name, fields[name])
		}
	}
	if got, want := rep.DrainCeilingRatio, rep.DrainEventsPerSec/rep.DrainCeilingEventsPerSec; math.Abs(got-want) > 1e-9 {
		t.Errorf("drain ratio %v, want drain / ceiling = %v", got, want)
	}
	if got, want := rep.ReplayCeilingRatio, rep.ReplayEventsPerSec/rep.ReplayCeilingEventsPerSec; math.Abs(got-want) > 1e-9 {
		t.Errorf("replay ratio %v, want replay / ceiling = %v", got, want)
	}
	if rep.BacklogEvents != rep.Events || rep.DrainCeilingReceived != int64(rep.Events) {
		t.Errorf("backlog %d, drain ceiling received %d; want both %d", rep.BacklogEvents, rep.DrainCeilingReceived, rep.Events)
	}
	if rep.DrainedEvents < rep.BacklogEvents || rep.DrainedEvents > rep.BacklogEvents+rep.Events/10 {
		t.Errorf("%d stored after the drain, want the %d of the backlog and a few quality checkpoints", rep.DrainedEvents, rep.BacklogEvents)
	}
	drained := int64(rep.DrainedEvents)
	if rep.DrainHandled != drained || rep.ReplayCeilingReceived != drained || int64(rep.ReplayInputs) != drained {
		t.Errorf("drain handled %d, replay ceiling read %d, replay applied %d; want each %d", rep.DrainHandled, rep.ReplayCeilingReceived, rep.ReplayInputs, drained)
	}
	if rep.ReplayDifferences != 0 || rep.ReplayMatched < 1 {
		t.Errorf("replay: %d verdicts matched, %d differences; want some and none", rep.ReplayMatched, rep.ReplayDifferences)
	}
	if rep.Partitions != partitions {
		t.Errorf("partitions = %d, want %d", rep.Partitions, partitions)
	}
	if rep.Deliveries < drained || rep.Deliveries > int64(partitions)*drained+rep.Redeliveries {
		t.Errorf("%d deliveries of %d stored messages to %d partitions, %d redeliveries", rep.Deliveries, drained, partitions, rep.Redeliveries)
	}
	if got, want := rep.ReadAmplification, float64(rep.Deliveries)/float64(drained); got != want {
		t.Errorf("read amplification %v, want deliveries / stored = %v", got, want)
	}
	if rep.PipelineReadAmplification < 1 || rep.PipelineReadAmplification > float64(partitions)+float64(rep.Redeliveries)/float64(rep.Events) {
		t.Errorf("full-speed pipeline read amplification %v, want 1 to %d", rep.PipelineReadAmplification, partitions)
	}
	if rep.PhasePeakRSSMB != nil {
		for _, phase := range []string{"drain", "drain_ceiling", "replay", "replay_ceiling"} {
			if rep.PhasePeakRSSMB[phase] <= 0 {
				t.Errorf("peak RSS of %s = %v, want > 0", phase, rep.PhasePeakRSSMB[phase])
			}
		}
	}
	if len(rep.Rounds) != 1 || rep.Rounds[0].Drain != rep.DrainEventsPerSec || rep.Rounds[0].ReplayCeiling != rep.ReplayCeilingEventsPerSec {
		t.Errorf("rounds %+v: want the one round's drain and replay rates", rep.Rounds)
	}
}

// TestBenchPartitioned runs the bench with --partitions 2 and checks the
// backlog phases and that the read amplification is measured: every
// message delivered to the partitions' engines counts, another
// partition's included.
func TestBenchPartitioned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var errOut lockedBuffer // the engines log from several goroutines
	err := run(ctx, []string{"bench", "--events", "400", "--workers", "4", "--partitions", "2", "--json", "--dir", t.TempDir()}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, errOut.String())
	}
	var fields map[string]any
	if err := json.Unmarshal(out.Bytes(), &fields); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	checkBenchBacklog(t, fields, rep, 2)
	if rep.DeadLetters != 0 || rep.LatencySamples == 0 {
		t.Errorf("incomplete run: %d dead letters, %d latency samples", rep.DeadLetters, rep.LatencySamples)
	}
}

// benchReplaySchemaVerdicts applies the mix in stream order to state in
// memory and counts the distinct schema verdicts. Schema verdicts depend
// only on the events of their own tool, which the pipeline applies in
// stream order, so the live count must be the same. (Composition verdicts
// also depend on how invocations and contracts interleave across keys.)
func benchReplaySchemaVerdicts(t *testing.T, mix *benchmix.Mix) int64 {
	t.Helper()
	names, err := events.NewNames(consumer.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	c := core.New(core.Options{Names: names})
	st := core.NewMemState()
	ids := map[string]bool{}
	for i, ev := range mix.All() {
		e, err := names.Decode(ev.Subject, ev.Header, ev.Data)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		eff, err := c.Apply(st, core.Input{Event: e, Subject: ev.Subject, Seq: uint64(i + 1)})
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if err := st.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		for _, v := range eff.Verdicts {
			if strings.Contains(v.Subject, ".verdicts.schema.") {
				ids[v.ID] = true
			}
		}
	}
	return int64(len(ids))
}

func TestBenchTextReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var errOut lockedBuffer // the engines log from several goroutines
	err := run(ctx, []string{"bench", "--events", "300", "--rate", "1000", "--workers", "4", "--dir", t.TempDir()}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, errOut.String())
	}
	for _, want := range []string{"300 events", "4 workers", "raw JetStream async publish", "consume only", "the ceiling of any handler", "passthrough", "pipeline", "% of passthrough",
		"drain of 300 stored", "of its ceiling, a bare consumer with explicit acks", "replay of ", "of its ceiling, a bare ordered consumer", "0 differences",
		"read amplification", "deliveries per stored message", "1 partition;",
		"latency at 1,000 events/s", "after the first pass", "p99", "peak RSS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBenchServerProcess runs the phases with each server in a child
// process (this test binary again, serving as `toolsentry bench` does with
// benchServerEnv set) and checks that both processes' peaks are reported,
// the run is complete, and no store is left behind.
func TestBenchServerProcess(t *testing.T) {
	if store := os.Getenv(benchServerEnv); store != "" {
		// The child: serve until the bench closes standard input.
		if err := runBenchServer(context.Background(), store, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}); err != nil {
			t.Fatal(err)
		}
		return
	}
	saved := benchServerCommand
	t.Cleanup(func() { benchServerCommand = saved })
	benchServerCommand = func() (func(string) *exec.Cmd, error) {
		return func(store string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServerProcess$")
			cmd.Env = append(os.Environ(), benchServerEnv+"="+store)
			return cmd
		}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out bytes.Buffer
	var errOut lockedBuffer // the engines log from several goroutines
	err := run(ctx, []string{"bench", "--events", "1500", "--json", "--server-process", "--dir", dir}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, errOut.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if rep.EventsPerSec <= 0 || rep.LatencySamples == 0 || rep.DeadLetters != 0 {
		t.Errorf("incomplete run: %+v", rep)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		for _, phase := range []string{"raw_publish", "consume", "passthrough", "pipeline", "backlog", "latency"} {
			if rep.ServerPeakRSSMB[phase] <= 0 {
				t.Errorf("server peak RSS of %s = %v, want > 0 (all: %v)", phase, rep.ServerPeakRSSMB[phase], rep.ServerPeakRSSMB)
			}
		}
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("data directory left behind: %v %v", left, err)
	}
}

// TestBenchServerProcessThatFails checks that a server process that exits
// before it serves is reported with what it wrote on standard error.
func TestBenchServerProcessThatFails(t *testing.T) {
	env := benchEnv{dir: t.TempDir(), serverPeaks: map[string]float64{}, serverCmd: func(string) *exec.Cmd {
		return exec.Command("sh", "-c", "echo no JetStream here >&2; exit 3")
	}}
	_, _, err := env.server(context.Background(), "raw_publish")
	if err == nil || !strings.Contains(err.Error(), "no JetStream here") {
		t.Fatalf("err = %v, want the process's error output", err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--events", "0"},
		{"--events", "many"},
		{"--rate", "-1"},
		{"--workers", "-2"},
		{"--duplicate-window", "0s"},
		{"--duplicate-window", "soon"},
		{"--partitions", "0"},
		{"--partitions", strconv.Itoa(consumer.MaxPartitions + 1)},
		{"--unknown"},
		{"extra"},
	} {
		err := run(context.Background(), append([]string{"bench"}, args...), stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}})
		if !errors.Is(err, errUsage) {
			t.Errorf("bench %q: %v, want a usage error", args, err)
		}
	}
}

func TestBenchHelpNamesEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--help"}, stdio{in: strings.NewReader(""), out: &out, err: &bytes.Buffer{}}); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--events", "--rate", "--workers", "--json", "--cpuprofile", "--memprofile", "--dir", "--duplicate-window", "--server-process", "--partitions", "--drain-cpuprofile", "drain_ceiling_ratio", "replay_ceiling_ratio", "read_amplification", "events_per_sec", "passthrough_events_per_sec", "raw_publish_events_per_sec", "p50_ms", "p99_ms", "peak_rss_mb", "--events 1000000"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("help lacks %s", flag)
		}
	}
}

func TestBenchHistQuantiles(t *testing.T) {
	var h benchHist
	if got := h.quantileMS(0.99); got != 0 {
		t.Errorf("empty p99 = %v, want 0", got)
	}
	for ms := 1; ms <= 1000; ms++ {
		h.add(time.Duration(ms) * time.Millisecond)
	}
	for _, tt := range []struct{ q, want float64 }{{0.5, 500}, {0.99, 990}, {1, 1000}, {0, 1}} {
		got := h.quantileMS(tt.q)
		if math.Abs(got-tt.want)/tt.want > 1.0/32 {
			t.Errorf("q%v = %v ms, want %v within 1/32", tt.q, got, tt.want)
		}
	}
	var small benchHist
	small.add(7 * time.Microsecond)
	if got := small.quantileMS(0.5); got != 0.007 {
		t.Errorf("7µs reads back as %v ms", got)
	}
}

func TestBenchInputEventID(t *testing.T) {
	for data, want := range map[string]string{
		`{"data":{"verdict":"SCHEMA_MATCH","input_event_id":"bench-000000000042","input_sequence":43}}`: "bench-000000000042",
		`{"data":{}}`:                     "",
		`{"input_event_id":"unterminated`: "",
	} {
		if got := benchInputEventID([]byte(data)); got != want {
			t.Errorf("%s: %q, want %q", data, got, want)
		}
	}
}

func TestBenchThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 52311.6: "52,312", 1234567: "1,234,567"} {
		if got := benchThousands(v); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}

// BenchmarkPipeline publishes b.N events of the bench mix to a fresh
// embedded server with file storage and reports the events/s from the
// first publish until every event is handled and acknowledged:
// handler=consume only acknowledges each event, handler=passthrough
// republishes each event, handler=pipeline is
// toolsentry. The command `toolsentry bench` reports the same numbers,
// with latency and memory.
func BenchmarkPipeline(b *testing.B) {
	for _, handler := range []string{"consume", "passthrough", "pipeline"} {
		b.Run("handler="+handler, func(b *testing.B) {
			mix, err := benchmix.New(benchmix.Options{Events: b.N})
			if err != nil {
				b.Fatal(err)
			}
			ctx := zerolog.New(zerolog.NewTestWriter(b)).Level(zerolog.WarnLevel).WithContext(context.Background())
			res, err := benchEnv{dir: b.TempDir()}.run(ctx, handler, mix, 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.eventsPerSec, "events/s")
		})
	}
}

// TestBenchRounds: --rounds runs the throughput phases that many times and
// reports the medians, the ratios as the median of each round's.
func TestBenchRounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var errOut lockedBuffer // the engines log from several goroutines
	err := run(ctx, []string{"bench", "--events", "300", "--rounds", "3", "--workers", "4", "--json", "--dir", t.TempDir()}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, errOut.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if len(rep.Rounds) != 3 {
		t.Fatalf("%d rounds reported, want 3: %+v", len(rep.Rounds), rep.Rounds)
	}
	var pipe, ratio, cons, consRatio []float64
	var drainRatio, replayRatio []float64
	for _, r := range rep.Rounds {
		drainRatio = append(drainRatio, r.Drain/r.DrainCeiling)
		replayRatio = append(replayRatio, r.Replay/r.ReplayCeiling)
		if !(r.RawPublish > 0 && r.Consume > 0 && r.Passthrough > 0 && r.Pipeline > 0 && r.Drain > 0 && r.DrainCeiling > 0 && r.Replay > 0 && r.ReplayCeiling > 0) {
			t.Errorf("round %+v: want every rate > 0", r)
		}
		pipe = append(pipe, r.Pipeline)
		ratio = append(ratio, r.Pipeline/r.Passthrough)
		cons = append(cons, r.Consume)
		consRatio = append(consRatio, r.Consume/r.RawPublish)
	}
	for _, v := range [][]float64{pipe, ratio, cons, consRatio, drainRatio, replayRatio} {
		slices.Sort(v)
	}
	if rep.DrainCeilingRatio != drainRatio[1] || rep.ReplayCeilingRatio != replayRatio[1] {
		t.Errorf("drain ratio %v, replay ratio %v; want the medians %v and %v", rep.DrainCeilingRatio, rep.ReplayCeilingRatio, drainRatio[1], replayRatio[1])
	}
	if rep.EventsPerSec != pipe[1] || rep.PassthroughRatio != ratio[1] {
		t.Errorf("events/s %v, ratio %v; want the medians %v and %v", rep.EventsPerSec, rep.PassthroughRatio, pipe[1], ratio[1])
	}
	if rep.ConsumeEventsPerSec != cons[1] || rep.ConsumeRatio != consRatio[1] {
		t.Errorf("consume %v events/s, %v of raw publish; want the medians %v and %v", rep.ConsumeEventsPerSec, rep.ConsumeRatio, cons[1], consRatio[1])
	}
	if rep.Rate != rep.EventsPerSec/2 {
		t.Errorf("latency phase at %v events/s, want half the median pipeline rate %v", rep.Rate, rep.EventsPerSec/2)
	}
}

func TestBenchMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1}, 2}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := benchMedian(slices.Clone(tc.in)); got != tc.want {
			t.Errorf("benchMedian(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
