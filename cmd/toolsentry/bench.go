package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/publisher"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure throughput, latency and memory of the whole pipeline on an embedded server",
		usage:   benchUsage,
		run:     runBench,
	})
}

const benchUsage = `Usage: toolsentry bench [--events N] [--rate R] [--json] [flags]

Measures toolsentry on this machine. It needs nothing running: every phase
starts its own embedded NATS server with file storage in a temporary
directory, which is removed at the end. The same synthetic telemetry is used
throughout: schema observations going round up to 1,000 tools (one tool in
eight drifts: a field renamed, a type changed, a default flipped, an unused
field added), invocations from 50 agents with the field paths and types of
their arguments and an outcome (about 90% of the events), quality contracts
and workflow declarations chaining those tools. The events are encoded
before the clock starts and published with asynchronous publishes.

The phases, in order:
  raw publish   asynchronous publishes of the same events into a file stream,
                nothing consuming: what JetStream takes on this machine
  consume       the engine (one lane over the whole stream, batches from a
                checkpoint) with a handler that returns at once: each event
                is read, counted applied and nothing else, the ceiling of
                any handler while the events are published on the same
                machine (the drain's ceiling is consuming alone)
  passthrough   the same engine with a handler that only republishes each
                batch's events and waits for their acknowledgements: the
                cost of the runtime without toolsentry's work
  pipeline      toolsentry itself, as ` + "`toolsentry serve`" + ` runs it: decode,
                guards, verdicts stored, state written, then the checkpoint
  drain         a backlog, as a worker meets it after an outage: on a fresh
                server the events are published first, nothing running;
                then the pipeline is started and drains them, timed from
                its start until every event is handled (verdicts and
                state stored, checkpoints committed). Its ceiling, measured just
                before on the same stored messages: a bare nats.go
                consumer with explicit acks (a new consumer from the first
                message, Consume with nats.go's defaults, each message
                acknowledged and nothing else), until the server has
                every ack
  replay        ` + "`toolsentry replay`" + `'s code path on that backlog: every verdict
                derived again from the telemetry stream and compared with
                the drain's (the recorded verdicts are read too). Its
                ceiling, measured just before: a bare ordered consumer
                reading the same stream (nats.go's defaults). The stream
                then also holds the quality checkpoints that the drain
                derived and stored in it, a few per 100 events: both read
                them
  latency       the pipeline again, on a fresh server, with the events
                published at --rate (default: half of the pipeline's rate)
With --rounds N all but the latency phase run N times, in turn, before the
latency phase.

Throughput is events divided by the time from the first publish until every
event has been handled and its checkpoint committed (drain and replay: from their
start, the events already stored). The drain and the replay are also
reported as a ratio of their ceilings.

Read amplification is the number of messages handed to the handlers of all
the lanes of the drain (and of the full-speed pipeline) per stored message:
1.00 is each stored message read once; above it, a message is read by more
than one lane, or again after a retry. Run with --partitions N to measure a
partitioned worker: each lane's consumer filters its own partition.

Latency is measured for the schema observations: from its publish until
the first thing it stored (the stream's own timestamp): its first verdict,
or the baseline record that counted it when it repeats the tool's version
and publishes no verdict. The
full-speed pipeline's latency is reported too; it includes the backlog that
a publisher faster than the consumer builds. The latency phase is also
reported "after the first pass": from the first event after every tool has
been observed once. The first pass is a cold start, in which nearly every
event creates state (a baseline per tool, usage per agent and tool).

Peak RSS is the process's high-water mark (VmHWM, Linux) over all phases,
server included, and per phase. With --server-process the server runs in a
child process and its peak is reported apart.

To check that memory stays flat, compare the peak RSS of two runs:
  toolsentry bench --events 100000
  toolsentry bench --events 1000000
NATS keeps the id of every message stored within the streams' duplicate
window in memory (a few hundred bytes each), so with the default window of
2 minutes a run that publishes a million events within it holds a million
ids: that memory grows with rate x window, not with toolsentry. The
server's file store also keeps the blocks it recently wrote or read in
memory (for 10 s), more of them the longer a phase runs. To compare
toolsentry's own memory, add --duplicate-window 1s --server-process to both
runs and compare the peak RSS (the server process's is reported apart).

Flags:
  --events N         events per phase (default 100000)
  --rate R           events/s of the latency phase; 0 is half of the measured
                     pipeline rate (default 0)
  --workers N        events handled at once, as serve's --workers (default 0 = 32 x CPUs, at least 64)
  --json             print one JSON object instead of the table:
                     {"events", "events_per_sec", "passthrough_events_per_sec",
                     "raw_publish_events_per_sec", "consume_events_per_sec",
                     "p50_ms", "p99_ms", "peak_rss_mb",
                     "pipeline_passthrough_ratio", "pipeline_raw_publish_ratio",
                     "consume_raw_publish_ratio", "drain_events_per_sec",
                     "drain_ceiling_events_per_sec", "drain_ceiling_ratio",
                     "replay_events_per_sec", "replay_ceiling_events_per_sec",
                     "replay_ceiling_ratio", "read_amplification",
                     "partitions", "rounds", ...}; p50_ms and p99_ms are the
                     latency phase's, at "rate"
  --cpuprofile FILE  write a CPU profile of the (first) full-speed pipeline
                     phase (go tool pprof -top FILE)
  --memprofile FILE  write a heap profile at the end of the (first) full-speed
                     pipeline phase, server still running, after a GC
                     (go tool pprof -sample_index=inuse_space -top FILE)
  --dir DIR          where to create the temporary data directory (default: the system's)
  --duplicate-window D
                     the duplicate window of every stream (default 2m0s, as serve)
  --rounds N         run the raw publish, consume, passthrough, pipeline, drain
                     and replay phases N times, in turn, and report the medians: the median
                     of each round's pipeline/passthrough ratio is steadier
                     on a shared machine than one round's (default 1)
  --partitions N     the partitions of the pipeline, drain and latency phases,
                     as serve's --partitions, all owned by the one worker
                     (default 1; consume and passthrough are never partitioned)
  --drain-cpuprofile FILE
                     write a CPU profile of the (first) drain phase, from the
                     pipeline's start until the backlog is handled
  --server-process   run each phase's NATS server in a child process (this
                     binary again) instead of in-process, so that the peak
                     RSS of toolsentry and of the server are told apart; the
                     worker then reaches the server over loopback TCP

A progress line is shown on standard error when it is a terminal.

Example:
  toolsentry bench --events 100000 --json
`

// benchMaxPending bounds the asynchronous publishes in flight of the
// bench's publisher in the phases that consume, as an agent's SDK would.
// The publisher runs in toolsentry's process, so its buffers count in the
// peak RSS measured for toolsentry; 1,024 in flight still publish faster
// than any consumer takes the events. (With 4,096 the publisher's burst
// set the peak of a 1M run, about 10 MB above that of a 100k run.)
const benchMaxPending = 1024

// benchRawMaxPending is the same for the raw publish phase, which measures
// what JetStream takes: more in flight, as nats bench does.
const benchRawMaxPending = 4096

// benchStall fails a phase that makes no progress for this long.
const benchStall = time.Minute

type benchFlags struct {
	events     int
	rate       float64
	workers    int
	json       bool
	cpuProfile string
	memProfile string
	dir        string
	duplicates time.Duration
	serverProc bool
	rounds     int
	partitions int
	drainCPU   string
}

// benchReport is the result of a bench run; its JSON is --json's output.
type benchReport struct {
	Events                  int                `json:"events"`
	EventsPerSec            float64            `json:"events_per_sec"`
	PassthroughEventsPerSec float64            `json:"passthrough_events_per_sec"`
	RawPublishEventsPerSec  float64            `json:"raw_publish_events_per_sec"`
	ConsumeEventsPerSec     float64            `json:"consume_events_per_sec"`     // consume and ack, no handler work
	PassthroughRatio        float64            `json:"pipeline_passthrough_ratio"` // the median over rounds of pipeline / passthrough
	RawPublishRatio         float64            `json:"pipeline_raw_publish_ratio"` // the same, pipeline / raw publish
	ConsumeRatio            float64            `json:"consume_raw_publish_ratio"`  // the same, consume / raw publish: the ceiling of pipeline_raw_publish_ratio
	Rounds                  []benchRound       `json:"rounds"`                     // each round's throughputs, in order
	P50MS                   float64            `json:"p50_ms"`
	P99MS                   float64            `json:"p99_ms"`
	PeakRSSMB               float64            `json:"peak_rss_mb"`
	PhasePeakRSSMB          map[string]float64 `json:"phase_peak_rss_mb,omitempty"`  // by phase, where Linux lets the mark be reset
	ServerPeakRSSMB         map[string]float64 `json:"server_peak_rss_mb,omitempty"` // by phase, the server process's (--server-process)
	P50SteadyMS             float64            `json:"p50_steady_ms"`                // the latency phase after its first pass over the tools
	P99SteadyMS             float64            `json:"p99_steady_ms"`                // the same, p99
	SteadySamples           int                `json:"steady_samples"`               // observations from steady_from_event on
	SteadyFromEvent         int                `json:"steady_from_event"`            // the first event after every tool was observed once
	Rate                    float64            `json:"rate"`                         // events/s asked of the latency phase
	RateAchieved            float64            `json:"rate_achieved"`                // events/s the latency phase handled
	LatencySamples          int                `json:"latency_samples"`              // schema observations matched to their first verdict or baseline write
	MaxRateP50MS            float64            `json:"max_rate_p50_ms"`              // latency at full speed, backlog included
	MaxRateP99MS            float64            `json:"max_rate_p99_ms"`              // the same, p99
	SchemaVerdicts          int64              `json:"schema_verdicts"`              // stored by the full-speed pipeline
	CompositionVerdicts     int64              `json:"composition_verdicts"`         // the same, composition guard
	DeadLetters             int64              `json:"dead_letters"`                 // the pipeline, drain and latency phases
	Retries                 int64              `json:"retries"`                      // the pipeline, drain and latency phases
	Redeliveries            int64              `json:"redeliveries"`                 // the pipeline, drain and latency phases
	SchemaObservations      int                `json:"schema_observations"`
	Invocations             int                `json:"invocations"`
	Contracts               int                `json:"contracts"`
	Workflows               int                `json:"workflows"`
	Tools                   int                `json:"tools"`
	Agents                  int                `json:"agents"`
	Workers                 int                `json:"workers"`
	CPUs                    int                `json:"cpus"`
	DuplicateWindowS        float64            `json:"duplicate_window_s"`

	// The backlog phases (bench_backlog.go): the medians over rounds, the
	// ratios the median of each round's.
	BacklogEvents             int     `json:"backlog_events"`                // messages stored before the drain
	DrainedEvents             int     `json:"drained_events"`                // stored after it: with the quality checkpoints the pipeline derived (first round)
	DrainEventsPerSec         float64 `json:"drain_events_per_sec"`          // the pipeline draining the backlog
	DrainCeilingEventsPerSec  float64 `json:"drain_ceiling_events_per_sec"`  // a bare consumer with explicit acks draining it
	DrainCeilingRatio         float64 `json:"drain_ceiling_ratio"`           // drain / its ceiling
	ReplayEventsPerSec        float64 `json:"replay_events_per_sec"`         // consumer.Replay, as toolsentry replay
	ReplayCeilingEventsPerSec float64 `json:"replay_ceiling_events_per_sec"` // a bare ordered consumer reading the stream
	ReplayCeilingRatio        float64 `json:"replay_ceiling_ratio"`          // replay / its ceiling
	DrainHandled              int64   `json:"drain_handled"`                 // events the drain handled (first round)
	DrainCeilingReceived      int64   `json:"drain_ceiling_received"`        // deliveries to the drain ceiling (first round)
	ReplayCeilingReceived     int64   `json:"replay_ceiling_received"`       // messages the replay ceiling read (first round)
	ReplayInputs              int     `json:"replay_inputs"`                 // inputs the replay applied: drained_events (first round)
	ReplayMatched             int     `json:"replay_matched"`                // recorded verdicts it derived again (first round)
	ReplayDifferences         int     `json:"replay_differences"`            // differences it found, every round
	Partitions                int     `json:"partitions"`                    // of the pipeline, latency and drain phases
	Deliveries                int64   `json:"deliveries"`                    // to the drain's engines, every round
	ReadAmplification         float64 `json:"read_amplification"`            // drain: deliveries per stored message
	PipelineReadAmplification float64 `json:"pipeline_read_amplification"`   // the same, the full-speed pipeline phases
	PipelineDeliveries        int64   `json:"pipeline_deliveries"`           // to the full-speed pipeline's engines, every round
}

// benchRound is one round of the throughput phases, in events/s.
type benchRound struct {
	RawPublish  float64 `json:"raw_publish_events_per_sec"`
	Consume     float64 `json:"consume_events_per_sec"`
	Passthrough float64 `json:"passthrough_events_per_sec"`
	Pipeline    float64 `json:"events_per_sec"`

	Drain         float64 `json:"drain_events_per_sec"`
	DrainCeiling  float64 `json:"drain_ceiling_events_per_sec"`
	Replay        float64 `json:"replay_events_per_sec"`
	ReplayCeiling float64 `json:"replay_ceiling_events_per_sec"`
}

func runBench(ctx context.Context, args []string, sio stdio) error {
	if store := os.Getenv(benchServerEnv); store != "" {
		return runBenchServer(ctx, store, sio)
	}
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&f.events, "events", 100000, "")
	fs.Float64Var(&f.rate, "rate", 0, "")
	fs.IntVar(&f.workers, "workers", 0, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "")
	fs.StringVar(&f.memProfile, "memprofile", "", "")
	fs.StringVar(&f.dir, "dir", "", "")
	fs.DurationVar(&f.duplicates, "duplicate-window", consumer.DefaultDuplicates, "")
	fs.BoolVar(&f.serverProc, "server-process", false, "")
	fs.IntVar(&f.rounds, "rounds", 1, "")
	fs.IntVar(&f.partitions, "partitions", 1, "")
	fs.StringVar(&f.drainCPU, "drain-cpuprofile", "", "")
	if err := fs.Parse(args); err != nil {
		return usageErrorf("bench: %v (see toolsentry bench --help)", err)
	}
	switch {
	case fs.NArg() > 0:
		return usageErrorf("bench takes no arguments, got %q", fs.Args())
	case f.events < 1:
		return usageErrorf("bench: --events %d: want at least 1", f.events)
	case f.rate < 0:
		return usageErrorf("bench: --rate %v: want 0 (half of the measured rate) or more", f.rate)
	case f.workers < 0:
		return usageErrorf("bench: --workers %d: want 0 (the default) or more", f.workers)
	case f.duplicates <= 0:
		return usageErrorf("bench: --duplicate-window %s: want a positive duration", f.duplicates)
	case f.rounds < 1:
		return usageErrorf("bench: --rounds %d: want at least 1", f.rounds)
	case f.partitions < 1 || f.partitions > consumer.MaxPartitions:
		return usageErrorf("bench: --partitions %d: want 1 to %d", f.partitions, consumer.MaxPartitions)
	}
	log, err := newLogger(sio.err, "warn", "auto")
	if err != nil {
		return err
	}
	ctx = log.WithContext(ctx)
	rep, err := bench(ctx, f, newBenchProgress(sio.err))
	if err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(sio.out)
		return enc.Encode(rep)
	}
	writeBenchReport(sio.out, rep)
	return nil
}

// bench runs the phases and reports.
func bench(ctx context.Context, f benchFlags, progress *benchProgress) (benchReport, error) {
	mix, err := benchmix.New(benchmix.Options{Events: f.events})
	if err != nil {
		return benchReport{}, err
	}
	dir, err := os.MkdirTemp(f.dir, "toolsentry-bench-")
	if err != nil {
		return benchReport{}, fmt.Errorf("creating the data directory: %w", err)
	}
	defer os.RemoveAll(dir)

	counts := mix.Counts()
	mo := mix.Options()
	rep := benchReport{
		Events:             f.events,
		SchemaObservations: counts.Schema,
		Invocations:        counts.Invocation,
		Contracts:          counts.Contract,
		Workflows:          counts.Workflow,
		Tools:              mo.Tools,
		Agents:             mo.Agents,
		Workers:            f.workers,
		CPUs:               runtime.GOMAXPROCS(0),
		DuplicateWindowS:   f.duplicates.Seconds(),
		Partitions:         f.partitions,
	}
	if rep.Workers == 0 {
		rep.Workers = engine.DefaultWorkers
	}
	env := benchEnv{dir: dir, workers: f.workers, duplicates: f.duplicates, progress: progress, memProfile: f.memProfile, partitions: f.partitions}
	if f.serverProc {
		if env.serverCmd, err = benchServerCommand(); err != nil {
			return rep, fmt.Errorf("--server-process: %w", err)
		}
		env.serverPeaks = map[string]float64{}
	}
	var profile *os.File
	if f.cpuProfile != "" {
		if profile, err = os.Create(f.cpuProfile); err != nil {
			return rep, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer profile.Close()
	}
	var drainProfile *os.File
	if f.drainCPU != "" {
		if drainProfile, err = os.Create(f.drainCPU); err != nil {
			return rep, fmt.Errorf("--drain-cpuprofile: %w", err)
		}
		defer drainProfile.Close()
	}

	var mem benchMemory
	var full benchRun // the first round's pipeline
	var pipelines []benchRun
	var backlogs []benchBacklog
	// consuming runs one consuming phase at full speed.
	consuming := func(phase string, cpu io.Writer) (res benchRun, err error) {
		err = mem.phase(phase, func() (err error) {
			res, err = env.run(ctx, phase, mix, 0, cpu)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("%s: %w", phase, err)
		}
		return res, nil
	}
	for round := range f.rounds {
		var r benchRound
		err = mem.phase("raw_publish", func() (err error) {
			r.RawPublish, err = env.rawPublish(ctx, mix)
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("raw publish: %w", err)
		}
		cons, err := consuming("consume", nil)
		if err != nil {
			return rep, err
		}
		r.Consume = cons.eventsPerSec
		pass, err := consuming("passthrough", nil)
		if err != nil {
			return rep, err
		}
		r.Passthrough = pass.eventsPerSec
		var cpu io.Writer
		if round == 0 && profile != nil {
			cpu = profile
		}
		pipe, err := consuming("pipeline", cpu)
		if err != nil {
			return rep, err
		}
		env.memProfile = "" // the first round's pipeline wrote it
		r.Pipeline = pipe.eventsPerSec
		if round == 0 {
			full = pipe
		}
		pipelines = append(pipelines, pipe)
		var drainCPU io.Writer
		if round == 0 && drainProfile != nil {
			drainCPU = drainProfile
		}
		bl, err := env.backlog(ctx, mix, &mem, drainCPU)
		if err != nil {
			return rep, err
		}
		r.Drain, r.DrainCeiling, r.Replay, r.ReplayCeiling = bl.drain, bl.drainCeiling, bl.replay, bl.replayCeiling
		if round == 0 {
			rep.BacklogEvents, rep.DrainedEvents = bl.stored, bl.drained
			rep.DrainHandled = bl.counts.settled.Load()
			rep.DrainCeilingReceived, rep.ReplayCeilingReceived = bl.ceilingReceived, bl.orderedReceived
			rep.ReplayInputs, rep.ReplayMatched = bl.replayInputs, bl.replayMatched
		}
		rep.ReplayDifferences += bl.replayDifference
		rep.Deliveries += bl.counts.deliveries.Load()
		backlogs = append(backlogs, bl)
		rep.Rounds = append(rep.Rounds, r)
	}
	median := func(get func(benchRound) float64) float64 {
		v := make([]float64, len(rep.Rounds))
		for i, r := range rep.Rounds {
			v[i] = get(r)
		}
		return benchMedian(v)
	}
	rep.RawPublishEventsPerSec = median(func(r benchRound) float64 { return r.RawPublish })
	rep.ConsumeEventsPerSec = median(func(r benchRound) float64 { return r.Consume })
	rep.PassthroughEventsPerSec = median(func(r benchRound) float64 { return r.Passthrough })
	rep.EventsPerSec = median(func(r benchRound) float64 { return r.Pipeline })
	rep.PassthroughRatio = median(func(r benchRound) float64 { return r.Pipeline / r.Passthrough })
	rep.RawPublishRatio = median(func(r benchRound) float64 { return r.Pipeline / r.RawPublish })
	rep.ConsumeRatio = median(func(r benchRound) float64 { return r.Consume / r.RawPublish })
	rep.DrainEventsPerSec = median(func(r benchRound) float64 { return r.Drain })
	rep.DrainCeilingEventsPerSec = median(func(r benchRound) float64 { return r.DrainCeiling })
	rep.DrainCeilingRatio = median(func(r benchRound) float64 { return r.Drain / r.DrainCeiling })
	rep.ReplayEventsPerSec = median(func(r benchRound) float64 { return r.Replay })
	rep.ReplayCeilingEventsPerSec = median(func(r benchRound) float64 { return r.ReplayCeiling })
	rep.ReplayCeilingRatio = median(func(r benchRound) float64 { return r.Replay / r.ReplayCeiling })
	var stored int
	for _, bl := range backlogs {
		stored += bl.drained
	}
	rep.ReadAmplification = float64(rep.Deliveries) / float64(stored)
	stored = 0
	for _, pipe := range pipelines {
		rep.PipelineDeliveries += pipe.counts.deliveries.Load()
		stored += pipe.stored
	}
	rep.PipelineReadAmplification = float64(rep.PipelineDeliveries) / float64(stored)
	rep.MaxRateP50MS, rep.MaxRateP99MS = full.latency.quantileMS(0.50), full.latency.quantileMS(0.99)
	rep.SchemaVerdicts, rep.CompositionVerdicts = full.counts.schemaVerdicts.Load(), full.counts.compositionVerdicts.Load()

	rep.Rate = f.rate
	if rep.Rate == 0 {
		rep.Rate = rep.EventsPerSec / 2
	}
	var paced benchRun
	err = mem.phase("latency", func() (err error) {
		paced, err = env.run(ctx, "latency", mix, rep.Rate, nil)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("latency at %.0f events/s: %w", rep.Rate, err)
	}
	rep.RateAchieved = paced.eventsPerSec
	rep.P50MS, rep.P99MS = paced.latency.quantileMS(0.50), paced.latency.quantileMS(0.99)
	rep.LatencySamples = int(paced.latency.count)
	rep.P50SteadyMS, rep.P99SteadyMS = paced.steady.quantileMS(0.50), paced.steady.quantileMS(0.99)
	rep.SteadySamples, rep.SteadyFromEvent = int(paced.steady.count), mix.FirstPassEnd()
	for _, r := range append(pipelines, paced) {
		rep.DeadLetters += r.counts.deadLetters.Load()
		rep.Retries += r.counts.retries.Load()
		rep.Redeliveries += r.counts.redeliveries.Load()
	}
	for _, bl := range backlogs {
		rep.DeadLetters += bl.counts.deadLetters.Load()
		rep.Retries += bl.counts.retries.Load()
		rep.Redeliveries += bl.counts.redeliveries.Load()
	}
	rep.PeakRSSMB, rep.PhasePeakRSSMB, rep.ServerPeakRSSMB = mem.peak, mem.phases, env.serverPeaks
	return rep, nil
}

// benchMemory follows the peak RSS, overall and per phase. Between phases
// it returns freed memory to the system and, where Linux allows, resets the
// high-water mark, so that a phase's peak is its own.
type benchMemory struct {
	peak   float64
	phases map[string]float64 // nil where the mark cannot be reset
}

func (m *benchMemory) phase(name string, run func() error) error {
	m.peak = max(m.peak, benchPeakRSSMB())
	debug.FreeOSMemory()
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	err := run()
	peak := benchPeakRSSMB()
	m.peak = max(m.peak, peak)
	if reset && peak > 0 {
		if m.phases == nil {
			m.phases = map[string]float64{}
		}
		m.phases[name] = max(m.phases[name], peak) // the highest of its rounds
	}
	return err
}

// benchMedian is the median of v (the mean of the middle two of an even
// count); v is reordered.
func benchMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// benchEnv is what every phase shares.
type benchEnv struct {
	dir        string
	workers    int
	duplicates time.Duration // the streams' duplicate window; 0 is the default
	progress   *benchProgress
	memProfile string // where the pipeline phase writes its heap profile ("": nowhere)
	// serverCmd, when set, runs a phase's server in a child process: the
	// command that serves the store directory it is given (see
	// runBenchServer). serverPeaks then receives each phase's server peak
	// RSS in MB.
	serverCmd   func(store string) *exec.Cmd
	serverPeaks map[string]float64
	partitions  int // of the pipeline's phases; 0 or 1: none
}

// config is the configuration of the toolsentry resources of a phase.
func (env benchEnv) config() consumer.Config {
	return consumer.Config{Duplicates: env.duplicates}
}

// serviceConfig is config with the partitions of the pipeline's phases.
func (env benchEnv) serviceConfig() consumer.Config {
	c := env.config()
	c.Partitions = max(env.partitions, 1)
	return c
}

// serviceOptions are the options of the pipeline, as serve runs it, with
// counts observing it.
func (env benchEnv) serviceOptions(counts *benchCounts) consumer.ServiceOptions {
	return consumer.ServiceOptions{
		Config:    env.serviceConfig(),
		Engine:    engine.Options{Workers: env.workers},
		Observer:  counts,
		Kind:      consumer.KindToken,
		Processor: consumer.ProcessorOptions{Verdicts: counts},
	}
}

// benchServer is a phase's NATS server, in-process or in a child process.
type benchServer struct {
	url string
	ns  *server.Server // nil in a child process
}

// connect connects to the server: in-process when it runs in this process,
// as serve's worker does with its embedded server.
func (s *benchServer) connect(name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name)}
	if s.ns != nil {
		opts = append(opts, nats.InProcessServer(s.ns))
	}
	return nats.Connect(s.url, opts...)
}

// server starts the server of a phase with its store in a new directory
// under env.dir; stop shuts it down, records the peak RSS of a child
// process, and removes the directory.
func (env benchEnv) server(ctx context.Context, phase string) (srv *benchServer, stop func(), err error) {
	store := filepath.Join(env.dir, phase)
	if env.serverCmd != nil {
		return env.serverProcess(phase, store)
	}
	s, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: store, Port: -1, ServerName: "toolsentry-bench"})
	if err != nil {
		return nil, nil, err
	}
	return &benchServer{url: s.ClientURL(), ns: s.NATS()}, func() {
		s.Shutdown()
		_ = os.RemoveAll(store)
	}, nil
}

// benchServerEnv names the store directory of a bench server process:
// `toolsentry bench` with it set serves that directory (runBenchServer).
const benchServerEnv = "TOOLSENTRY_BENCH_SERVER_STORE"

// benchServerCommand returns the command of --server-process: this
// program, `toolsentry bench` with benchServerEnv set. Tests replace it.
var benchServerCommand = func() (func(store string) *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program: %w", err)
	}
	return func(store string) *exec.Cmd {
		cmd := exec.Command(exe, "bench")
		cmd.Env = append(os.Environ(), benchServerEnv+"="+store)
		return cmd
	}, nil
}

// serverProcess starts env.serverCmd on store and reads its client URL.
func (env benchEnv) serverProcess(phase, store string) (*benchServer, func(), error) {
	cmd := env.serverCmd(store)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the server process: %w", err)
	}
	exited := make(chan struct{})
	urls := make(chan string, 1)
	go func() {
		// Standard output is read to its end before Wait, which closes it.
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		urls <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		if peak := benchPeakRSSMBOf(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); peak > 0 {
			env.serverPeaks[phase] = max(env.serverPeaks[phase], peak) // the highest of its rounds
		}
		_ = stdin.Close() // the server shuts down
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = os.RemoveAll(store)
	}
	select {
	case url := <-urls:
		if strings.HasPrefix(url, "nats://") {
			return &benchServer{url: url}, stop, nil
		}
	case <-time.After(60 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-exited
	_ = os.RemoveAll(store)
	return nil, nil, fmt.Errorf("the server process did not start: %s", strings.TrimSpace(stderr.String()))
}

// runBenchServer is the server process of --server-process: an embedded
// server on store, its client URL on the first line of standard output,
// until standard input closes.
func runBenchServer(ctx context.Context, store string, sio stdio) error {
	srv, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: store, Port: -1, ServerName: "toolsentry-bench"})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Fprintln(sio.out, srv.ClientURL())
	_, _ = io.Copy(io.Discard, sio.in)
	return nil
}

// benchPublisher publishes the mix asynchronously, as agents do, over its
// own TCP connection.
type benchPublisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	failed atomic.Int64
	first  atomic.Pointer[error]
}

func newBenchPublisher(url string, maxPending int) (*benchPublisher, error) {
	p := &benchPublisher{}
	nc, err := nats.Connect(url, nats.Name("toolsentry bench publisher"))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(benchStall),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			p.failed.Add(1)
			p.first.CompareAndSwap(nil, &err)
		}),
	)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.nc, p.js = nc, js
	return p, nil
}

// err is the first failed publish, if any.
func (p *benchPublisher) err() error {
	if e := p.first.Load(); e != nil {
		return fmt.Errorf("%d publishes failed, the first with: %w", p.failed.Load(), *e)
	}
	return nil
}

// publish sends every event of the mix (on subject(ev) when subject is
// set), at rate events/s or at full speed when rate is 0, calling sent
// just before each publish, and waits for every PubAck.
func (p *benchPublisher) publish(ctx context.Context, mix *benchmix.Mix, rate float64, subject func(benchmix.Event) string, sent func(int, benchmix.Event)) error {
	start := time.Now()
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	for i, ev := range mix.All() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if interval > 0 {
			// Sleeping below a millisecond overshoots; the schedule is
			// kept from the start, so the next events catch up.
			if d := time.Until(start.Add(time.Duration(i) * interval)); d >= time.Millisecond {
				time.Sleep(d)
			}
		}
		m := &nats.Msg{Subject: ev.Subject, Header: ev.Header, Data: ev.Data}
		if subject != nil {
			m.Subject = subject(ev)
		}
		if sent != nil {
			sent(i, ev)
		}
		if _, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(benchStall)); err != nil {
			return fmt.Errorf("publishing event %d: %w", i, err)
		}
		if err := p.err(); err != nil {
			return err
		}
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.err()
}

// rawPublish measures asynchronous publishes of the mix into a file stream
// with nothing consuming.
func (env benchEnv) rawPublish(ctx context.Context, mix *benchmix.Mix) (float64, error) {
	srv, stop, err := env.server(ctx, "raw_publish")
	if err != nil {
		return 0, err
	}
	defer stop()
	p, err := newBenchPublisher(srv.url, benchRawMaxPending)
	if err != nil {
		return 0, err
	}
	defer p.nc.Close()
	if _, err := p.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       "BENCH_RAW",
		Subjects:   []string{"bench.raw.>"},
		Storage:    jetstream.FileStorage,
		Duplicates: cmp.Or(env.duplicates, consumer.DefaultDuplicates),
	}); err != nil {
		return 0, fmt.Errorf("creating the stream: %w", err)
	}
	// The same subject length as the telemetry subjects: only the prefix
	// differs.
	subject := func(ev benchmix.Event) string { return "bench.raw" + strings.TrimPrefix(ev.Subject, "toolsentry") }
	var published atomic.Int64
	stopProgress := env.progress.track("raw publish", mix.Len(), func() int64 {
		return published.Load() - int64(p.js.PublishAsyncPending())
	})
	start := time.Now()
	err = p.publish(ctx, mix, 0, subject, func(i int, _ benchmix.Event) { published.Store(int64(i) + 1) })
	elapsed := time.Since(start)
	stopProgress()
	if err != nil {
		return 0, err
	}
	return float64(mix.Len()) / elapsed.Seconds(), nil
}

// benchCounts counts what the engine and the processor report.
type benchCounts struct {
	settled             atomic.Int64 // acknowledged or dead-lettered
	deadLetters         atomic.Int64
	retries             atomic.Int64
	redeliveries        atomic.Int64
	schemaVerdicts      atomic.Int64
	compositionVerdicts atomic.Int64
	deliveries          atomic.Int64 // to every engine of the phase, other partitions' messages included

	target int64
	done   chan struct{}
	doneAt atomic.Int64 // unix nanoseconds of the target-th settlement
}

func newBenchCounts(target int) *benchCounts {
	return &benchCounts{target: int64(target), done: make(chan struct{})}
}

// OnOutcome implements consumer.Observer.
func (c *benchCounts) OnOutcome(_ string, o consumer.Outcome, _ time.Duration) {
	switch o {
	case consumer.OutcomeAck, consumer.OutcomeDeadLetter:
		c.deliveries.Add(1)
		if c.settled.Add(1) == c.target {
			c.doneAt.Store(time.Now().UnixNano())
			close(c.done)
		}
	case consumer.OutcomeRetry:
		c.deliveries.Add(1)
		c.retries.Add(1)
	default:
		c.deliveries.Add(1)
	}
}

// OnRedelivery implements consumer.Observer.
func (c *benchCounts) OnRedelivery(string) { c.redeliveries.Add(1) }

// OnDeadLetter implements consumer.Observer.
func (c *benchCounts) OnDeadLetter(string, string) { c.deadLetters.Add(1) }

// OnVerdict implements consumer.VerdictObserver.
func (c *benchCounts) OnVerdict(guard, _ string, duplicate bool) {
	if duplicate {
		return
	}
	switch guard {
	case "schema":
		c.schemaVerdicts.Add(1)
	case "composition":
		c.compositionVerdicts.Add(1)
	}
}

// benchRun is the result of one consuming phase.
type benchRun struct {
	eventsPerSec float64
	stored       int // messages in the telemetry stream at the end: the mix and what the pipeline derived
	counts       *benchCounts
	latency      *benchHist // pipeline phases only
	steady       *benchHist // the same, from the mix's FirstPassEnd on
}

// run publishes the mix to a fresh server and consumes it with the
// pipeline (or, for the phase "passthrough", with consumer.Passthrough,
// and for "consume" with a handler that returns at once), at rate
// events/s (0: full speed). profile, if set, receives a CPU profile of the
// phase.
func (env benchEnv) run(ctx context.Context, phase string, mix *benchmix.Mix, rate float64, profile io.Writer) (benchRun, error) {
	srv, stop, err := env.server(ctx, phase)
	if err != nil {
		return benchRun{}, err
	}
	defer stop()
	// The worker talks to its embedded server in-process, as serve does;
	// agents and subscribers connect over TCP.
	nc, err := srv.connect("toolsentry bench worker")
	if err != nil {
		return benchRun{}, err
	}
	defer nc.Close()
	p, err := newBenchPublisher(srv.url, benchMaxPending)
	if err != nil {
		return benchRun{}, err
	}
	defer p.nc.Close()

	counts := newBenchCounts(mix.Len())
	res := benchRun{counts: counts}
	var eng interface {
		Run(context.Context) error
		Close() error
	}
	var bare *engine.Engine // the passthrough and consume phases' engine
	var resources *consumer.Resources
	if phase == "passthrough" || phase == "consume" {
		js, err := jetstream.New(nc)
		if err != nil {
			return res, err
		}
		if resources, err = consumer.Provision(ctx, js, env.config()); err != nil {
			return res, err
		}
		pub, err := publisher.New(nc, publisher.Options{})
		if err != nil {
			return res, err
		}
		verdicts := resources.Config.VerdictsPrefix()
		h := consumer.Passthrough(pub, func(m *engine.Message) string {
			return verdicts + ".passthrough." + consumer.KindToken(m) + "." + consumer.LastToken(m)
		})
		if phase == "consume" {
			h = engine.BatchFunc(func(context.Context, string, []*engine.Message) []error { return nil })
		}
		lease, err := engine.AcquireLease(ctx, resources.Leases, "bench-"+phase, "bench", 30*time.Second)
		if err != nil {
			return res, err
		}
		e, err := engine.New(js, engine.Source{Stream: resources.Config.TelemetryStream()}, lease,
			consumer.Observed(h, counts, consumer.KindToken),
			engine.Options{
				Workers: env.workers,
				Key: func(m *engine.Message) string {
					return core.OrderingKey(consumer.KindToken(m), consumer.LastToken(m))
				},
			})
		if err != nil {
			return res, err
		}
		eng, bare = e, e
	} else {
		svc, err := consumer.StartService(ctx, nc, env.serviceOptions(counts))
		if err != nil {
			return res, err
		}
		resources, eng = svc.Resources, svc
		res.latency, res.steady = &benchHist{}, &benchHist{}
	}
	runErr := make(chan error, 1)
	running := false
	defer func() {
		_ = eng.Close() // waits for Run, if it ran
		if running {
			<-runErr
		}
	}()

	var lat *benchLatency
	if res.latency != nil {
		lat = &benchLatency{mix: mix, hist: res.latency, steady: res.steady, steadyFrom: mix.FirstPassEnd(), sent: map[int]int64{}}
		wc, err := nats.Connect(srv.url, nats.Name("toolsentry bench watcher"))
		if err != nil {
			return res, err
		}
		defer wc.Close()
		stopWatch, err := lat.watch(ctx, wc, resources.Config.VerdictsStream(), "KV_"+resources.Config.BaselinesBucket())
		if err != nil {
			return res, err
		}
		defer stopWatch()
	}

	running = true
	go func() { runErr <- eng.Run(ctx) }()

	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	label := phase
	if rate > 0 {
		label = phase + " at " + benchThousands(rate) + "/s"
	}
	stopProgress := env.progress.track(label, mix.Len(), counts.settled.Load)
	defer stopProgress()

	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		var sent func(int, benchmix.Event)
		if lat != nil {
			sent = lat.recordSent
		}
		pubErr <- p.publish(ctx, mix, rate, nil, sent)
	}()
	last, lastChange := int64(-1), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-counts.done:
			break wait
		case err := <-pubErr:
			if err != nil {
				return res, err
			}
			pubErr = nil
		case err := <-runErr:
			runErr <- err // for the deferred Close
			return res, fmt.Errorf("the engine stopped: %w", err)
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
			if n := counts.settled.Load(); n != last {
				last, lastChange = n, time.Now()
			} else if time.Since(lastChange) > benchStall {
				return res, fmt.Errorf("stalled: %d of %d events handled, none in %s", n, mix.Len(), benchStall)
			}
		}
	}
	elapsed := time.Duration(counts.doneAt.Load() - start.UnixNano())
	res.eventsPerSec = float64(mix.Len()) / elapsed.Seconds()
	if pubErr != nil {
		if err := <-pubErr; err != nil {
			return res, err
		}
	}
	if err := benchSettled(ctx, resources, bare); err != nil {
		return res, err
	}
	info, err := resources.Telemetry.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the telemetry stream: %w", err)
	}
	res.stored = int(info.State.Msgs)
	if lat != nil {
		if err := lat.wait(ctx, resources.Verdicts); err != nil {
			return res, err
		}
	}
	if phase == "pipeline" && env.memProfile != "" {
		if err := writeHeapProfile(env.memProfile); err != nil {
			return res, fmt.Errorf("--memprofile: %w", err)
		}
	}
	return res, nil
}

// writeHeapProfile writes the heap profile, after a GC, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchSettled waits until every lane of res committed a checkpoint past
// every message it reads (ReadStatus counts none left), or, for a bare
// engine on the whole stream, until its committed checkpoint passed the
// stream's last message: the pipeline's count confirmed by the server.
// It waits as long as the count goes down (the directives lane projects
// the verdicts one at a time, and trails a large run) and gives up after
// benchSettleStall without progress, naming the lanes that are behind.
func benchSettled(ctx context.Context, res *consumer.Resources, bare *engine.Engine) error {
	best, stalled := uint64(math.MaxUint64), time.Now()
	for {
		var left uint64
		if bare != nil {
			info, err := res.Telemetry.Info(ctx)
			if err != nil {
				return fmt.Errorf("reading the telemetry stream: %w", err)
			}
			if c := bare.Stats().Committed; c <= info.State.LastSeq {
				left = info.State.LastSeq + 1 - c
			}
		} else {
			n, err := consumer.Unapplied(ctx, res)
			if err != nil {
				return fmt.Errorf("reading the lanes: %w", err)
			}
			left = n
		}
		if left == 0 {
			return nil
		}
		if left < best {
			best, stalled = left, time.Now()
		}
		if time.Since(stalled) > benchSettleStall {
			return fmt.Errorf("every event was handled, but %d are not committed, and none was for %s%s", left, benchSettleStall, benchBehind(ctx, res, bare))
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// benchSettleStall is how long benchSettled waits without progress.
const benchSettleStall = 10 * time.Second

// benchBehind names the lanes of res with messages not applied, for an
// error message.
func benchBehind(ctx context.Context, res *consumer.Resources, bare *engine.Engine) string {
	if bare != nil {
		return ""
	}
	lanes, err := consumer.ReadLag(ctx, res)
	if err != nil {
		return ""
	}
	var behind []string
	for _, l := range lanes {
		if l.Lag > 0 {
			behind = append(behind, fmt.Sprintf("%s %d (checkpoint %d, held by %q)", l.Lane, l.Lag, l.Checkpoint, l.Owner))
		}
	}
	if len(behind) == 0 {
		return ""
	}
	return ": " + strings.Join(behind, ", ")
}

// benchLatency matches the schema observations to the first thing each
// stored: its first verdict, or the baseline record that counted it (an
// observation that repeats the tool's version publishes no verdict).
type benchLatency struct {
	mix        *benchmix.Mix
	hist       *benchHist
	steady     *benchHist // the samples of events from steadyFrom on
	steadyFrom int

	mu       sync.Mutex
	sent     map[int]int64    // event index → publish time (unix ns), until answered
	subject  map[int]string   // event index → subject, while in sent
	pending  map[string][]int // subject → the indices in sent, in order
	received int              // verdicts seen
}

// recordSent records the publish time of a schema observation.
func (l *benchLatency) recordSent(i int, ev benchmix.Event) {
	if ev.Kind != benchmix.KindSchema {
		return
	}
	now := time.Now().UnixNano()
	l.mu.Lock()
	l.sent[i] = now
	if l.pending == nil {
		l.subject, l.pending = map[int]string{}, map[string][]int{}
	}
	l.subject[i] = ev.Subject
	l.pending[ev.Subject] = append(l.pending[ev.Subject], i)
	l.mu.Unlock()
}

// watch follows the verdict stream and the baselines bucket's stream with
// ordered consumers.
func (l *benchLatency) watch(ctx context.Context, nc *nats.Conn, verdicts, baselines string) (stop func(), err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, f := range []struct {
		stream string
		handle func(jetstream.Msg)
	}{{verdicts, l.verdict}, {baselines, l.baseline}} {
		cons, err := js.OrderedConsumer(ctx, f.stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			stop()
			return nil, fmt.Errorf("following %s: %w", f.stream, err)
		}
		cc, err := cons.Consume(f.handle)
		if err != nil {
			stop()
			return nil, fmt.Errorf("following %s: %w", f.stream, err)
		}
		stops = append(stops, cc.Stop)
	}
	return stop, nil
}

func (l *benchLatency) verdict(msg jetstream.Msg) {
	l.mu.Lock()
	l.received++
	l.mu.Unlock()
	l.answered(msg, benchInputEventID(msg.Data()))
}

func (l *benchLatency) baseline(msg jetstream.Msg) {
	l.answered(msg, benchJSONString(msg.Data(), "last_event_id"))
}

// answered records the latency of the observation eventID and of the
// earlier ones of the same tool still unanswered: a tool's inputs are
// applied in order, and consecutive ones in one batch store once.
func (l *benchLatency) answered(msg jetstream.Msg, eventID string) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	i, ok := l.mix.Index(eventID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, waiting := l.sent[i]; !ok || !waiting {
		return
	}
	subject := l.subject[i]
	idx := l.pending[subject]
	n := 0
	for n < len(idx) && idx[n] <= i {
		j := idx[n]
		d := time.Duration(md.Timestamp.UnixNano() - l.sent[j])
		delete(l.sent, j)
		delete(l.subject, j)
		l.hist.add(d)
		if j >= l.steadyFrom {
			l.steady.add(d)
		}
		n++
	}
	l.pending[subject] = idx[n:]
}

// wait waits until every stored verdict has been seen and every schema
// observation answered.
func (l *benchLatency) wait(ctx context.Context, verdicts jetstream.Stream) error {
	info, err := verdicts.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the verdict stream: %w", err)
	}
	want := int(info.State.Msgs)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		got, open := l.received, len(l.sent)
		l.mu.Unlock()
		if got >= want && open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d verdicts stored, %d received; %d schema observations with neither a verdict nor a baseline write seen", want, got, open)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// benchInputEventID finds data.input_event_id in a verdict's JSON without
// decoding all of it: the verdicts are toolsentry's own encoding, compact,
// and event ids need no escaping.
func benchInputEventID(data []byte) string { return benchJSONString(data, "input_event_id") }

// benchJSONString finds the string member name in compact JSON written by
// toolsentry (the first one: names the caller knows to be unique).
func benchJSONString(data []byte, name string) string {
	key := `"` + name + `":"`
	at := bytes.Index(data, []byte(key))
	if at < 0 {
		return ""
	}
	rest := data[at+len(key):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ""
	}
	return string(rest[:end])
}

// benchHist is a latency histogram of bounded size: 32 buckets per power
// of two of microseconds, so a quantile is off by at most 1/32.
type benchHist struct {
	counts [64 * 32]uint64
	count  uint64
}

func (h *benchHist) add(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	h.counts[benchBucket(us)]++
	h.count++
}

func benchBucket(us uint64) int {
	if us < 64 {
		return int(us)
	}
	shift := bits.Len64(us) - 6 // us>>shift is in [32, 64)
	return shift*32 + int(us>>shift)
}

// benchBucketMid is the middle of a bucket's range, in microseconds.
func benchBucketMid(b int) float64 {
	if b < 64 {
		return float64(b)
	}
	shift := b/32 - 1
	lo := uint64(b-shift*32) << shift
	return float64(lo) + float64(uint64(1)<<shift-1)/2
}

// quantileMS returns the q-quantile in milliseconds (0 without samples).
func (h *benchHist) quantileMS(q float64) float64 {
	if h == nil || h.count == 0 {
		return 0
	}
	rank := uint64(q*float64(h.count) + 0.5)
	rank = min(max(rank, 1), h.count)
	var seen uint64
	for b, n := range h.counts {
		seen += n
		if seen >= rank {
			return benchBucketMid(b) / 1000
		}
	}
	return 0
}

// benchPeakRSSMB is the process's peak resident set size in MB (VmHWM
// from /proc/self/status), or 0 where there is no such file.
func benchPeakRSSMB() float64 { return benchPeakRSSMBOf("/proc/self/status") }

// benchPeakRSSMBOf reads VmHWM from a /proc/PID/status file.
func benchPeakRSSMBOf(path string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		if err != nil {
			return 0
		}
		return kb / 1024
	}
	return 0
}

// benchProgress draws a progress line on a terminal, and nothing
// elsewhere.
type benchProgress struct {
	w  io.Writer
	on bool
}

func newBenchProgress(w io.Writer) *benchProgress {
	p := &benchProgress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

// track redraws the line for a phase every 200ms until stop is called,
// which clears it.
func (p *benchProgress) track(phase string, total int, done func() int64) (stop func()) {
	if p == nil || !p.on {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case <-t.C:
			}
			n := min(max(done(), 0), int64(total))
			const width = 30
			filled := int(int64(width) * n / int64(total))
			fmt.Fprintf(p.w, "\r\033[K%-24s [%s%s] %3d%%  %s events/s",
				phase, strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
				100*n/int64(total), benchThousands(float64(n)/time.Since(start).Seconds()))
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-finished
		})
	}
}

func writeBenchReport(w io.Writer, r benchReport) {
	pct := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*a/b)
	}
	fmt.Fprintf(w, "toolsentry bench: %s events over %s tools and %s agents, file storage, %d CPUs, %d workers, duplicate window %s\n",
		benchThousands(float64(r.Events)), benchThousands(float64(r.Tools)), benchThousands(float64(r.Agents)), r.CPUs, r.Workers,
		time.Duration(r.DuplicateWindowS*float64(time.Second)))
	fmt.Fprintf(w, "  (%s schema observations, %s invocations, %s contracts, %s workflows)\n\n",
		benchThousands(float64(r.SchemaObservations)), benchThousands(float64(r.Invocations)),
		benchThousands(float64(r.Contracts)), benchThousands(float64(r.Workflows)))
	if len(r.Rounds) > 1 {
		fmt.Fprintf(w, "  throughput: the median of %d rounds, and of each round's ratios\n", len(r.Rounds))
	}
	fmt.Fprintf(w, "  %-30s %12s events/s\n", "raw JetStream async publish", benchThousands(r.RawPublishEventsPerSec))
	fmt.Fprintf(w, "  %-30s %12s events/s   consume, no handler work: %.0f%% of raw publish, the ceiling of any handler while publishing\n", "consume only",
		benchThousands(r.ConsumeEventsPerSec), 100*r.ConsumeRatio)
	fmt.Fprintf(w, "  %-30s %12s events/s   consume, republish, await\n", "passthrough", benchThousands(r.PassthroughEventsPerSec))
	fmt.Fprintf(w, "  %-30s %12s events/s   %.0f%% of passthrough, %.0f%% of raw publish\n", "pipeline", benchThousands(r.EventsPerSec),
		100*r.PassthroughRatio, 100*r.RawPublishRatio)
	fmt.Fprintf(w, "  %-30s %12s events/s   %.0f%% of its ceiling, a bare consumer with explicit acks: %s events/s\n",
		"drain of "+benchThousands(float64(r.BacklogEvents))+" stored", benchThousands(r.DrainEventsPerSec), 100*r.DrainCeilingRatio, benchThousands(r.DrainCeilingEventsPerSec))
	fmt.Fprintf(w, "  %-30s %12s events/s   %.0f%% of its ceiling, a bare ordered consumer: %s events/s; %d differences\n",
		"replay of "+benchThousands(float64(r.DrainedEvents))+" stored", benchThousands(r.ReplayEventsPerSec), 100*r.ReplayCeilingRatio, benchThousands(r.ReplayCeilingEventsPerSec), r.ReplayDifferences)
	parts := "1 partition"
	if r.Partitions > 1 {
		parts = fmt.Sprintf("%d partitions", r.Partitions)
	}
	fmt.Fprintf(w, "  %-30s %12.2f deliveries per stored message   drain, %s; full-speed pipeline %.2f\n", "read amplification",
		r.ReadAmplification, parts, r.PipelineReadAmplification)
	if len(r.Rounds) > 1 {
		for i, rd := range r.Rounds {
			fmt.Fprintf(w, "  %-30s raw publish %s, consume %s, passthrough %s, pipeline %s events/s (%s of passthrough); drain %s (%s of %s), replay %s (%s of %s)\n", fmt.Sprintf("  round %d", i+1),
				benchThousands(rd.RawPublish), benchThousands(rd.Consume), benchThousands(rd.Passthrough), benchThousands(rd.Pipeline), pct(rd.Pipeline, rd.Passthrough),
				benchThousands(rd.Drain), pct(rd.Drain, rd.DrainCeiling), benchThousands(rd.DrainCeiling),
				benchThousands(rd.Replay), pct(rd.Replay, rd.ReplayCeiling), benchThousands(rd.ReplayCeiling))
		}
	}
	fmt.Fprintf(w, "  %-30s p50 %.2f ms, p99 %.2f ms   publish → verdict stored, %s observations, %s events/s handled\n",
		"latency at "+benchThousands(r.Rate)+" events/s", r.P50MS, r.P99MS, benchThousands(float64(r.LatencySamples)), benchThousands(r.RateAchieved))
	if r.SteadySamples > 0 {
		fmt.Fprintf(w, "  %-30s p50 %.2f ms, p99 %.2f ms   the same run from event %s on, every tool observed once, %s observations\n",
			"  after the first pass", r.P50SteadyMS, r.P99SteadyMS, benchThousands(float64(r.SteadyFromEvent)), benchThousands(float64(r.SteadySamples)))
	}
	fmt.Fprintf(w, "  %-30s p50 %.2f ms, p99 %.2f ms   backlog included\n", "latency at full speed", r.MaxRateP50MS, r.MaxRateP99MS)
	fmt.Fprintf(w, "  %-30s %s schema, %s composition; %d dead letters, %d retries, %d redeliveries\n", "verdicts",
		benchThousands(float64(r.SchemaVerdicts)), benchThousands(float64(r.CompositionVerdicts)), r.DeadLetters, r.Retries, r.Redeliveries)
	switch {
	case r.PeakRSSMB > 0 && r.PhasePeakRSSMB != nil:
		fmt.Fprintf(w, "  %-30s %.0f MB   raw publish %.0f, consume %.0f, passthrough %.0f, pipeline %.0f, drain %.0f (ceiling %.0f), replay %.0f (ceiling %.0f), latency %.0f\n", "peak RSS", r.PeakRSSMB,
			r.PhasePeakRSSMB["raw_publish"], r.PhasePeakRSSMB["consume"], r.PhasePeakRSSMB["passthrough"], r.PhasePeakRSSMB["pipeline"],
			r.PhasePeakRSSMB["drain"], r.PhasePeakRSSMB["drain_ceiling"], r.PhasePeakRSSMB["replay"], r.PhasePeakRSSMB["replay_ceiling"], r.PhasePeakRSSMB["latency"])
	case r.PeakRSSMB > 0:
		fmt.Fprintf(w, "  %-30s %.0f MB\n", "peak RSS", r.PeakRSSMB)
	default:
		fmt.Fprintf(w, "  %-30s unknown (no /proc/self/status)\n", "peak RSS")
	}
	if len(r.ServerPeakRSSMB) > 0 {
		fmt.Fprintf(w, "  %-30s raw publish %.0f, consume %.0f, passthrough %.0f, pipeline %.0f, backlog %.0f, latency %.0f MB\n", "server process peak RSS",
			r.ServerPeakRSSMB["raw_publish"], r.ServerPeakRSSMB["consume"], r.ServerPeakRSSMB["passthrough"], r.ServerPeakRSSMB["pipeline"], r.ServerPeakRSSMB["backlog"], r.ServerPeakRSSMB["latency"])
	}
}

// benchThousands formats a non-negative number rounded to an integer with
// thousands separators.
func benchThousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
