package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

// The chaos tests run `toolsentry serve --nats-url` as a separate OS process
// (this test binary, re-executed into TestChaosWorkerProcess) so that it can
// be SIGKILLed, and check the verdict stream against a fault-free replay.
const (
	chaosWorkerEnv  = "TOOLSENTRY_CHAOS_WORKER"   // "1" in the worker process
	chaosNATSURLEnv = "TOOLSENTRY_CHAOS_NATS_URL" // the server (or proxy) it uses
	chaosReadyLine  = "toolsentry-chaos-worker-ready"
	// chaosLeaseTTL is the workers' --lease-ttl: how soon another worker
	// takes over the lanes of a killed or cut-off one (with --member-ttl
	// chaosMemberTTL before it).
	chaosLeaseTTL  = 3 * time.Second
	chaosMemberTTL = 2 * time.Second
	chaosStream    = "TOOLSENTRY_TELEMETRY"
)

// TestChaosWorkerProcess is the worker process of the chaos tests, not a test
// of its own: it runs `toolsentry serve` against the server named in the
// environment and exits with serve's status. It stops when its stdin closes,
// so that a worker never outlives the test process that started it.
func TestChaosWorkerProcess(t *testing.T) {
	if os.Getenv(chaosWorkerEnv) != "1" {
		t.Skip("the chaos tests' worker process; it runs only as their subprocess")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	serveStarted = func(string, string) { fmt.Fprintln(os.Stdout, chaosReadyLine) }
	err := run(ctx, []string{"serve",
		"--nats-url", os.Getenv(chaosNATSURLEnv),
		"--http", "",
		"--prefix", "toolsentry",
		"--workers", "8",
		"--lease-ttl", chaosLeaseTTL.String(),
		"--member-ttl", chaosMemberTTL.String(),
		"--max-deliver", "5",
		"--shutdown-timeout", "5s",
		"--log-level", "info",
		"--log-format", "json",
	}, stdio{in: strings.NewReader(""), out: os.Stdout, err: os.Stderr})
	os.Exit(exitCode(err, os.Stderr))
}

// chaosLog collects a worker's output and notices its ready line.
type chaosLog struct {
	mu    sync.Mutex
	b     bytes.Buffer
	ready chan struct{}
	seen  bool
}

func (l *chaosLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if !l.seen && bytes.Contains(l.b.Bytes(), []byte(chaosReadyLine)) {
		l.seen = true
		close(l.ready)
	}
	return len(p), nil
}

func (l *chaosLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the last n lines of the output.
func (l *chaosLog) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// chaosWorker is one `toolsentry serve` process.
type chaosWorker struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.Closer
	log    *chaosLog
	exited chan struct{}
	err    error // cmd.Wait's result; read after exited is closed
}

// startChaosWorker starts a worker on natsURL and waits until it consumes.
// It is killed when the test ends, if it still runs.
func startChaosWorker(t *testing.T, name, natsURL string) *chaosWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosWorkerProcess$")
	cmd.Env = append(os.Environ(), chaosWorkerEnv+"=1", chaosNATSURLEnv+"="+natsURL, "TOOLSENTRY_MEMBER="+chaosMember(name))
	w := &chaosWorker{name: name, cmd: cmd, log: &chaosLog{ready: make(chan struct{})}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.log, w.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.stdin = stdin
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting worker %s: %v", name, err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() { w.kill(t) })
	select {
	case <-w.log.ready:
		t.Logf("worker %s (pid %d) ready in %s", name, cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	case <-w.exited:
		t.Fatalf("worker %s exited before it was ready: %v\n%s", name, w.err, w.log.tail(40))
	case <-time.After(60 * time.Second):
		t.Fatalf("worker %s not ready in 60s\n%s", name, w.log.tail(40))
	}
	return w
}

// chaosMember is the member name of the worker called name.
func chaosMember(name string) string { return "chaos-" + name }

func (w *chaosWorker) running() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL, if the worker still runs, and waits for it to die.
func (w *chaosWorker) kill(t *testing.T) {
	t.Helper()
	if w.running() {
		_ = w.cmd.Process.Kill()
	}
	select {
	case <-w.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("worker %s (pid %d) did not die in 20s after SIGKILL", w.name, w.cmd.Process.Pid)
	}
	_ = w.stdin.Close()
}

// stop sends SIGTERM and requires a clean exit: in-flight events drained,
// status 0, no data race reported.
func (w *chaosWorker) stop(t *testing.T) {
	t.Helper()
	if !w.running() {
		t.Errorf("worker %s had exited before the end of the test: %v\n%s", w.name, w.err, w.log.tail(40))
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("worker %s did not stop in 30s after SIGTERM\n%s", w.name, w.log.tail(40))
		return
	}
	if w.err != nil {
		t.Errorf("worker %s: SIGTERM ended it with %v, want a clean exit\n%s", w.name, w.err, w.log.tail(40))
	}
}

// checkOutput fails the test if the worker reported a data race or a panic,
// which also shows up in a worker that was killed.
func (w *chaosWorker) checkOutput(t *testing.T) {
	t.Helper()
	out := w.log.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "handler panicked"} {
		if strings.Contains(out, bad) {
			t.Errorf("worker %s printed %q:\n%s", w.name, bad, out)
		}
	}
}

// chaosSchemas are the versions of every tool's input schema; the rounds
// cycle through chaosPattern (shifted per tool), so that each tool sees
// NO_BASELINE, then drift (never on used fields: no agent uses the tools,
// so each observation yields exactly one verdict and the baseline
// advances). No observation repeats the tool's last version: a repeat
// publishes no verdict.
var (
	chaosSchemas = []string{
		`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}`,
		`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}`,
		`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"string"},"cursor":{"type":"string"}},"required":["userId"]}`,
	}
	chaosPattern = []int{0, 1, 2, 0, 2, 1}
)

// chaosInputs builds rounds × tools schema observations: round r holds one
// observation of every tool.
func chaosInputs(t *testing.T, names events.Names, rounds, tools int) [][]events.Message {
	t.Helper()
	base := time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)
	out := make([][]events.Message, rounds)
	for r := range rounds {
		for i := range tools {
			tool := fmt.Sprintf("chaos.tool-%02d", i)
			schema := chaosSchemas[chaosPattern[(r+i)%len(chaosPattern)]]
			m, err := names.NewSchemaObserved(events.Meta{
				ID:     fmt.Sprintf("chaos-r%02d-t%02d", r, i),
				Source: "chaos-test",
				Time:   base.Add(time.Duration(r) * time.Minute),
			}, events.SchemaObserved{ToolID: tool, Version: "1", Tool: &events.MCPTool{
				Name: "lookup", Description: "Find a user.", InputSchema: json.RawMessage(schema),
			}})
			if err != nil {
				t.Fatal(err)
			}
			out[r] = append(out[r], m)
		}
	}
	return out
}

// chaosPublisher publishes the rounds from a goroutine, one round every
// interval, as agents would: each event is retried with its id until the
// stream acknowledges it (the stream drops a repeat), so that a server
// restart loses no input. Before round g it waits for gates[g] to close: a
// chaos step that must happen mid-stream holds the stream's tail back until
// it is done, while the rounds before the gate keep flowing during it. It
// stops when the test ends.
type chaosPublisher struct {
	started chan int // receives every round number as its publishing starts
	done    chan error
	stop    chan struct{}
}

func startChaosPublisher(t *testing.T, js jetstream.JetStream, rounds [][]events.Message, interval time.Duration, gates map[int]chan struct{}) *chaosPublisher {
	p := &chaosPublisher{started: make(chan int, len(rounds)), done: make(chan error, 1), stop: make(chan struct{})}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		p.done <- p.run(js, rounds, interval, gates)
	}()
	t.Cleanup(func() {
		close(p.stop)
		<-exited
	})
	return p
}

var errChaosStopped = errors.New("publisher stopped: the test ended")

func (p *chaosPublisher) run(js jetstream.JetStream, rounds [][]events.Message, interval time.Duration, gates map[int]chan struct{}) error {
	next := time.Now()
	for r, round := range rounds {
		if g, ok := gates[r]; ok {
			select {
			case <-g:
			case <-p.stop:
				return errChaosStopped
			case <-time.After(90 * time.Second):
				return fmt.Errorf("round %d: its gate did not open in 90s", r)
			}
		}
		select {
		case <-time.After(time.Until(next)): // the pace of the input
		case <-p.stop:
			return errChaosStopped
		}
		next = time.Now().Add(interval)
		p.started <- r
		for _, m := range round {
			if err := p.publish(js, m); err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
		}
	}
	return nil
}

// publish stores one event, retrying with the same id for up to 30s.
func (p *chaosPublisher) publish(js jetstream.JetStream, m events.Message) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		// The header carries Nats-Msg-Id = m.ID: the stream drops a repeat.
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("publishing %s: not stored in 30s: %w", m.ID, err)
		}
		select {
		case <-time.After(20 * time.Millisecond): // retry pacing
		case <-p.stop:
			return errChaosStopped
		}
	}
}

// wait waits for the publisher to finish every round.
func (p *chaosPublisher) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("publisher: %v", err)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("publisher did not finish in 120s")
	}
}

// waitStarted waits until publishing of round r (or a later one) starts.
func (p *chaosPublisher) waitStarted(t *testing.T, r int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case got := <-p.started:
			if got >= r {
				return
			}
		case err := <-p.done:
			t.Fatalf("publisher finished (%v) before round %d started", err, r)
		case <-deadline:
			t.Fatalf("round %d did not start in 60s", r)
		}
	}
}

// chaosEventually polls cond until it holds or the timeout passes, then
// fails with the message msg returns (evaluated at the failure).
func chaosEventually(t *testing.T, timeout time.Duration, msg func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, msg())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chaosStatus reads the lanes' progress; nil while the server is
// unreachable.
func chaosStatus(js jetstream.JetStream) *consumer.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := consumer.ReadStatus(ctx, js, consumer.Config{})
	if err != nil {
		return nil
	}
	return st
}

// describeLanes is one line per lane of st.
func describeLanes(st *consumer.Status) string {
	var b strings.Builder
	for _, l := range st.Lanes {
		fmt.Fprintf(&b, "lane %s: owner %q epoch %d checkpoint %d lag %d; ", l.Lane, l.Owner, l.Epoch, l.Checkpoint, l.Lag)
	}
	return b.String()
}

// chaosCount is the number of messages in a stream; -1 while the server is
// unreachable.
func chaosCount(js jetstream.JetStream, stream string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// chaosInputCount counts the schema observations in the telemetry stream:
// the inputs the test sent, without the quality checkpoints that workers
// publish there themselves.
func chaosInputCount(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, chaosStream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("toolsentry.telemetry.schema.>"))
	if err != nil {
		return -1
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// waitInFlight waits until at least want inputs are stored and not yet
// committed by their lane, so that the chaos step that follows hits messages
// in flight, and
// returns the number it saw. If want is not reached within a few seconds it
// returns the most it saw (0: the step then tests less, and the caller says
// so).
func waitInFlight(t *testing.T, js jetstream.JetStream, want int) int {
	t.Helper()
	most := 0
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if st := chaosStatus(js); st != nil {
			n := int(st.TotalLag())
			most = max(most, n)
			if n >= want {
				return n
			}
		}
		time.Sleep(time.Millisecond)
	}
	return most
}

// waitProgress waits until the verdict stream grows past from: a worker
// consumes again.
func waitProgress(t *testing.T, js jetstream.JetStream, from int, what string, w *chaosWorker) {
	t.Helper()
	chaosEventually(t, 30*time.Second, func() string {
		return fmt.Sprintf("%s: no new verdict (stream at %d, was %d); worker %s:\n%s", what, chaosCount(js, "TOOLSENTRY_VERDICTS"), from, w.name, w.log.tail(40))
	}, func() bool {
		return chaosCount(js, "TOOLSENTRY_VERDICTS") > from
	})
}

// chaosSettleWithin bounds the recovery: from the last input published to
// every input applied. Recovery needs a reconnect (serve's default
// ReconnectWait is 2s), a takeover (the member TTL, 2s, then the lease TTL,
// 3s) and a few retry backoffs (1s, 2s, 4s); 20s leaves room for a loaded
// machine, while a worker that stalls until a 30s default timeout fails. After a failure the test
// waits chaosSettleGrace more, so that the verdicts are still checked.
const (
	chaosSettleWithin = 20 * time.Second
	chaosSettleGrace  = 25 * time.Second
)

// waitSettled waits until every input is acknowledged: none pending, none
// delivered and unacknowledged (also those a dead worker held).
func waitSettled(t *testing.T, js jetstream.JetStream, inputs int, workers ...*chaosWorker) {
	t.Helper()
	start := time.Now()
	lastReport := start
	var last *consumer.Status
	settled := func() bool {
		st := chaosStatus(js)
		if st != nil {
			last = st
		}
		if st != nil && time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			t.Logf("still settling after %s: %s", time.Since(start).Round(time.Second), describeLanes(st))
		}
		return st != nil && st.TotalLag() == 0 && chaosInputCount(js) == inputs
	}
	poll := func(d time.Duration) bool {
		for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
			if settled() {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	if poll(chaosSettleWithin) {
		t.Logf("every input applied %s after the last was published", time.Since(start).Round(time.Millisecond))
		return
	}
	var b strings.Builder
	if last != nil {
		b.WriteString(describeLanes(last))
	}
	fmt.Fprintf(&b, "%d inputs, %d verdicts, %d dead letters", inputs, chaosCount(js, "TOOLSENTRY_VERDICTS"), chaosCount(js, "TOOLSENTRY_DLQ"))
	for _, w := range workers {
		fmt.Fprintf(&b, "\nworker %s (running %t):\n%s", w.name, w.running(), w.log.tail(60))
	}
	t.Errorf("recovery stalled: inputs still not applied %s after the last was published; %s", chaosSettleWithin, b.String())
	if !poll(chaosSettleGrace) {
		t.Fatalf("inputs still not applied %s after the last was published", chaosSettleWithin+chaosSettleGrace)
	}
	t.Logf("every input applied %s after the last was published", time.Since(start).Round(time.Millisecond))
}

// chaosMessages reads every message of a stream.
func chaosMessages(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	n := int(info.State.Msgs)
	if n == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("reading %s: %v", stream, err)
	}
	out := make([]jetstream.Msg, 0, n)
	for len(out) < n {
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("reading %s: %v", stream, err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("reading %s: %v", stream, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %d of %d messages in 20s", stream, len(out), n)
		}
	}
	return out
}

// verdictKey is what one verdict is about: at most one verdict message per
// key may be in the stream.
type verdictKey struct{ input, tool, agent string }

// checkChaosVerdicts is the acceptance of every chaos test, once all inputs
// are acknowledged:
//
//   - the telemetry stream holds every input exactly once;
//   - every input has exactly one verdict (a schema observation without
//     usage yields one), none missing, no two for the same (input, tool,
//     agent), none for an input that was not sent;
//   - per tool, the verdicts are in input order;
//   - the verdict stream is, as a set of ids, exactly what a fault-free,
//     in-order replay of the telemetry stream through the core produces, so
//     that no verdict was decided on the wrong state;
//   - every chain of verdicts is unbroken (toolsentry verify);
//   - nothing was dead-lettered.
func checkChaosVerdicts(t *testing.T, js jetstream.JetStream, names events.Names, rounds [][]events.Message, workers ...*chaosWorker) {
	t.Helper()
	sent := map[string]bool{}
	for _, round := range rounds {
		for _, m := range round {
			sent[m.ID] = true
		}
	}
	failed := false
	report := func(format string, args ...any) {
		t.Helper()
		failed = true
		t.Errorf(format, args...)
	}

	// Inputs, in stream order, and the fault-free replay.
	type stored struct {
		seq  uint64
		tool string
	}
	inputs := map[string]stored{}
	c := core.New(core.Options{Names: names})
	state := core.NewMemState()
	var expected []events.Message
	for _, m := range chaosMessages(t, js, chaosStream) {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("stored input %d does not decode: %v", md.Sequence.Stream, err)
		}
		if ev.Kind != events.KindQualityCheckpoint { // checkpoints are the workers' own
			if _, dup := inputs[ev.ID]; dup {
				report("input %s stored twice in %s", ev.ID, chaosStream)
			}
			if !sent[ev.ID] {
				report("input %s in %s was never sent", ev.ID, chaosStream)
			}
			inputs[ev.ID] = stored{seq: md.Sequence.Stream, tool: ev.Key}
		}
		eff, err := c.Apply(state, core.Input{Event: ev, Subject: m.Subject(), Seq: md.Sequence.Stream})
		if err != nil {
			t.Fatalf("replaying input %s: %v", ev.ID, err)
		}
		if err := state.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		expected = append(expected, eff.Verdicts...)
	}
	if len(inputs) != len(sent) {
		report("telemetry stream holds %d distinct inputs, %d were sent", len(inputs), len(sent))
	}
	if len(expected) != len(sent) {
		t.Fatalf("the replay yields %d verdicts for %d inputs: the inputs no longer make one verdict each", len(expected), len(sent))
	}
	kinds := map[guards.SchemaVerdict]int{}
	expectedIDs := map[string]bool{}
	for _, m := range expected {
		expectedIDs[m.ID] = true
		ev, err := names.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		kinds[ev.SchemaVerdict.Verdict]++
	}
	for _, k := range []guards.SchemaVerdict{guards.NoBaseline, guards.DriftOnUnusedFields} {
		if kinds[k] == 0 {
			t.Fatalf("the inputs yield no %s verdict (%v): they do not exercise the guard", k, kinds)
		}
	}

	// The verdicts as stored.
	perInput := map[string]int{}
	perKey := map[verdictKey]int{}
	lastSeq := map[string]uint64{}
	var dups, reordered, unexpected, unknown []string
	actualIDs := map[string]bool{}
	verdicts := chaosMessages(t, js, "TOOLSENTRY_VERDICTS")
	for _, m := range verdicts {
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			report("stored verdict %s does not decode: %v", m.Subject(), err)
			continue
		}
		v := ev.SchemaVerdict
		if v == nil {
			report("stored verdict %s is not a schema verdict", ev.ID)
			continue
		}
		actualIDs[ev.ID] = true
		in, ok := inputs[v.InputEventID]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%s (input %q)", ev.ID, v.InputEventID))
			continue
		}
		if v.InputSequence != in.seq || v.ToolID != in.tool {
			report("verdict %s names input %s at seq %d of %s; the input is seq %d of %s", ev.ID, v.InputEventID, v.InputSequence, v.ToolID, in.seq, in.tool)
		}
		perInput[v.InputEventID]++
		k := verdictKey{v.InputEventID, v.ToolID, v.AgentID}
		if perKey[k]++; perKey[k] == 2 {
			dups = append(dups, fmt.Sprintf("%s (tool %s, seq %d)", v.InputEventID, v.ToolID, v.InputSequence))
		}
		if last, ok := lastSeq[v.ToolID]; ok && v.InputSequence <= last {
			reordered = append(reordered, fmt.Sprintf("%s: seq %d after seq %d", v.ToolID, v.InputSequence, last))
		}
		lastSeq[v.ToolID] = max(lastSeq[v.ToolID], v.InputSequence)
		if !expectedIDs[ev.ID] {
			unexpected = append(unexpected, fmt.Sprintf("%s %s for %s (seq %d, baseline %.19s)", ev.ID, v.Verdict, v.InputEventID, v.InputSequence, v.BaselineFingerprint))
		}
	}
	var missing []string
	for id, in := range inputs {
		if perInput[id] == 0 {
			missing = append(missing, fmt.Sprintf("%s (tool %s, seq %d)", id, in.tool, in.seq))
		}
	}
	var notStored int
	for id := range expectedIDs {
		if !actualIDs[id] {
			notStored++
		}
	}
	for _, l := range [][]string{missing, dups, reordered, unexpected, unknown} {
		sort.Strings(l)
	}
	if len(verdicts) != len(sent) {
		report("%d verdicts stored for %d inputs", len(verdicts), len(sent))
	}
	if len(missing) > 0 {
		report("%d inputs have no verdict (lost): %s", len(missing), chaosFirst(missing))
	}
	if len(dups) > 0 {
		report("%d inputs have more than one verdict for the same tool and agent: %s", len(dups), chaosFirst(dups))
	}
	if len(reordered) > 0 {
		report("%d verdicts out of input order within their tool: %s", len(reordered), chaosFirst(reordered))
	}
	if len(unexpected) > 0 || notStored > 0 {
		report("the verdicts differ from a fault-free replay of the same input: %d verdicts the replay does not produce (decided on other state): %s; %d replay verdicts not stored",
			len(unexpected), chaosFirst(unexpected), notStored)
	}
	if len(unknown) > 0 {
		report("%d verdicts for inputs never stored: %s", len(unknown), chaosFirst(unknown))
	}
	// Every tool's verdicts form one unbroken chain: none forked by a
	// retry that linked a second copy of a verdict to the first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	audit, err := verifyStream(ctx, js, names, verifyOptions{}, nil)
	cancel()
	if err != nil {
		report("auditing the verdict chains: %v", err)
	}
	var broken []string
	for _, p := range audit.Problems {
		if p.Kind != publisher.ProblemUnsigned {
			broken = append(broken, fmt.Sprintf("seq %d %s: %s", p.Seq, p.Kind, p.Reason))
		}
	}
	if len(broken) > 0 {
		report("%d verdict chain problems: %s", len(broken), chaosFirst(broken))
	}
	if dlq := chaosMessages(t, js, "TOOLSENTRY_DLQ"); len(dlq) > 0 {
		var reasons []string
		for _, d := range dlq {
			reasons = append(reasons, d.Headers().Get(engine.HeaderDeadLetterReason)+": "+d.Headers().Get(engine.HeaderDeadLetterError))
		}
		report("%d inputs dead-lettered: %s", len(dlq), chaosFirst(reasons))
	}
	for _, w := range workers {
		w.checkOutput(t)
		if failed {
			t.Logf("worker %s output:\n%s", w.name, w.log.tail(60))
		}
	}
}

// chaosFirst lists the first few entries of a diagnostic.
func chaosFirst(l []string) string {
	const n = 12
	if len(l) > n {
		return strings.Join(l[:n], "; ") + fmt.Sprintf("; and %d more", len(l)-n)
	}
	return strings.Join(l, "; ")
}

// chaosProxy is a loopback TCP proxy between a worker and the server, to cut
// and restore the network. While cut it closes every connection, and new
// ones are refused (accepted and closed at once) or, in blackhole mode,
// accepted and left hanging without a byte until the network is restored.
type chaosProxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	cut       bool
	blackhole bool
	conns     map[net.Conn]struct{} // open, forwarding
	held      []net.Conn            // blackholed while cut
	forwarded int                   // connections forwarded so far
	wg        sync.WaitGroup
}

func startChaosProxy(t *testing.T, target string) *chaosProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the NATS URL of the proxy.
func (p *chaosProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Forwarded is how many connections the proxy has forwarded to the server.
func (p *chaosProxy) Forwarded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forwarded
}

func (p *chaosProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch {
		case p.cut && p.blackhole:
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		case p.cut:
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.forwarded++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies one direction; when either side ends, both are closed.
func (p *chaosProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every connection and refuses (or blackholes) new ones until
// Restore.
func (p *chaosProxy) Cut(blackhole bool) {
	p.mu.Lock()
	p.cut, p.blackhole = true, blackhole
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Restore forwards new connections again and drops the blackholed ones, so
// that their clients retry.
func (p *chaosProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	held := p.held
	p.held = nil
	p.mu.Unlock()
	for _, c := range held {
		_ = c.Close()
	}
}

func (p *chaosProxy) close() {
	_ = p.ln.Close()
	p.Cut(false)
	p.Restore()
	p.wg.Wait()
}
