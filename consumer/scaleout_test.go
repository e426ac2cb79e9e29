package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// Scale-out: several workers share the partitions of the telemetry stream
// on a 3-node JetStream cluster with R3 streams and buckets; one worker and
// one NATS node die mid-stream; every input still gets exactly one verdict,
// in input order per tool, equal to a fault-free replay.

// scaleConfig is the deployment of the scale-out tests: short timers so
// that a takeover happens within seconds.
func scaleConfig(replicas, partitions int) consumer.Config {
	return consumer.Config{
		Replicas:   replicas,
		Partitions: partitions,
		LeaseTTL:   3 * time.Second,
		MemberTTL:  2 * time.Second,
		MaxDeliver: 5,
	}
}

// scaleWorker is one in-process worker with its own connection.
type scaleWorker struct {
	name string
	nc   *nats.Conn
	svc  *consumer.Service
	done chan error
}

func startScaleWorker(t *testing.T, name, urls string, cfg consumer.Config) *scaleWorker {
	t.Helper()
	nc, err := nats.Connect(urls, nats.Name(name), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatalf("worker %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	// The views follow their buckets for as long as this context lasts.
	ctx := testContext(t)
	opts := testOptions()
	opts.HandlerTimeout = 10 * time.Second
	svc, err := consumer.StartService(ctx, nc, consumer.ServiceOptions{Config: cfg, Engine: opts, Member: name})
	if err != nil {
		t.Fatalf("worker %s: %v", name, err)
	}
	w := &scaleWorker{name: name, nc: nc, svc: svc, done: make(chan error, 1)}
	go func() { w.done <- svc.Run(testContext(t)) }()
	t.Cleanup(func() { _ = svc.Close() })
	return w
}

// kill stops the worker as a crash would: its connection is gone at once,
// nothing is drained, committed or released.
func (w *scaleWorker) kill() { w.nc.Close() }

func scaleInputs(t *testing.T, rounds, tools int) [][]events.Message {
	t.Helper()
	schemas := []string{
		`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}`,
		`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}`,
		`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"string"}},"required":["user_id"]}`,
	}
	// Every observation presents another version than the tool's last
	// (a repeat publishes no verdict), so that each yields exactly one.
	pattern := []int{0, 1, 2, 0, 2, 1}
	base := time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)
	out := make([][]events.Message, rounds)
	for r := range rounds {
		for i := range tools {
			m, err := names.NewSchemaObserved(events.Meta{
				ID:     fmt.Sprintf("scale-r%03d-t%03d", r, i),
				Source: "scaleout-test",
				Time:   base.Add(time.Duration(r) * time.Minute),
			}, events.SchemaObserved{ToolID: fmt.Sprintf("scale.tool-%03d", i), Version: "1", Tool: &events.MCPTool{
				Name: "lookup", Description: "Find a user.", InputSchema: json.RawMessage(schemas[pattern[(r+i)%len(pattern)]]),
			}})
			if err != nil {
				t.Fatal(err)
			}
			out[r] = append(out[r], m)
		}
	}
	return out
}

// publishAll publishes every input, as an agent would: each is retried with
// its id until the stream acknowledges it (the stream drops a repeat), so a
// node that dies mid-publish loses nothing. before(r) runs before round r.
func publishAll(ctx context.Context, js jetstream.JetStream, rounds [][]events.Message, before func(r int)) error {
	for r, round := range rounds {
		before(r)
		for _, m := range round {
			for {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.PublishMsg(pctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}, jetstream.WithMsgID(m.ID))
				cancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return fmt.Errorf("publishing %s: %w", m.ID, err)
				}
			}
		}
	}
	return nil
}

func TestScaleOutClusterWorkerAndNodeDie(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	const (
		nodes      = 3
		partitions = 6
		tools      = 40
		rounds     = 60 // 2400 inputs
	)
	c := natstest.RunCluster(t, nodes)
	cfg := scaleConfig(3, partitions)

	workers := make([]*scaleWorker, 3)
	for i := range workers {
		workers[i] = startScaleWorker(t, fmt.Sprintf("w%d", i+1), c.URLs(i), cfg)
	}
	// The test's own client avoids node 3, which dies.
	tnc, err := nats.Connect(c.URL(0)+","+c.URL(1), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tnc.Close)
	js, err := jetstream.New(tnc)
	if err != nil {
		t.Fatal(err)
	}
	checkReplicas(t, js, cfg, 3)

	// Every worker owns its share before the stream starts: 8 lanes (6
	// tool partitions, composition, directives) over 3 workers.
	lanes := partitions + 2
	natstest.Eventually(t, 20*time.Second, "lanes spread over the 3 workers", func() bool {
		return ownedOnce(workers, lanes)
	})

	inputs := scaleInputs(t, rounds, tools)
	// 2,400 synchronous publishes to an R3 stream, plus the waits around
	// the kill: about 30s alone under -race, and more than 90s when the
	// machine runs other tests too. The bound is for a publisher that
	// hangs, not for speed.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	publishStart := time.Now()
	err = publishAll(ctx, js, inputs, func(r int) {
		switch r {
		case rounds / 3:
			// A worker dies while it holds unacknowledged inputs.
			natstest.Eventually(t, 30*time.Second, "verdicts flowing before the kill", func() bool {
				return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= tools*rounds/6
			})
			workers[1].kill()
			killed := time.Now()
			t.Logf("worker %s killed at round %d", workers[1].name, r)
			// Measured, not asserted: how long the takeover takes.
			natstest.Eventually(t, 30*time.Second, "the survivors own the dead worker's lanes", func() bool {
				return ownedOnce([]*scaleWorker{workers[0], workers[2]}, lanes)
			})
			t.Logf("lanes reassigned %s after the kill", time.Since(killed).Round(10*time.Millisecond))
			natstest.Eventually(t, 30*time.Second, "a verdict for every input published before the kill", func() bool {
				return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= r*tools
			})
			t.Logf("every input published before the kill has its verdict %s after the kill", time.Since(killed).Round(10*time.Millisecond))
		case 2 * rounds / 3:
			// A NATS node dies; R3 streams and buckets keep a quorum.
			c.Shutdown(2)
			t.Logf("node 3 shut down at round %d", r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every input published in %s", time.Since(publishStart).Round(100*time.Millisecond))

	// The survivors took over the dead worker's partitions.
	alive := []*scaleWorker{workers[0], workers[2]}
	natstest.Eventually(t, 30*time.Second, "lanes spread over the 2 surviving workers", func() bool {
		return ownedOnce(alive, lanes)
	})
	total := tools * rounds
	deadline := time.Now().Add(60 * time.Second)
	for streamCount(t, js, "TOOLSENTRY_VERDICTS") < total {
		if time.Now().After(deadline) {
			logPartitions(t, js, cfg, alive)
			checkScaleVerdicts(t, js, inputs)
			t.Fatalf("not within 60s: %d verdicts, %d stored", total, streamCount(t, js, "TOOLSENTRY_VERDICTS"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitPartitionsSettled(t, js, cfg)
	checkScaleVerdicts(t, js, inputs)
	for _, w := range alive {
		select {
		case err := <-w.done:
			t.Fatalf("worker %s stopped: %v", w.name, err)
		default:
		}
	}
}

// ownedOnce reports whether the workers own every one of n lanes exactly
// once between them, each worker at least n/len(ws) of them.
func ownedOnce(ws []*scaleWorker, n int) bool {
	seen := map[string]bool{}
	for _, w := range ws {
		own := w.svc.Lanes.Owned()
		if len(own) < n/len(ws) {
			return false
		}
		for _, l := range own {
			if seen[l] {
				return false
			}
			seen[l] = true
		}
	}
	return len(seen) == n
}

// checkReplicas asserts that every stream and bucket of cfg has the given
// replica count.
func checkReplicas(t *testing.T, js jetstream.JetStream, cfg consumer.Config, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	streams := []string{cfg.TelemetryStream(), cfg.VerdictsStream(), cfg.DLQStream()}
	for _, b := range []string{cfg.BaselinesBucket(), cfg.UsageBucket(), cfg.QualityBucket(), cfg.WorkflowsBucket(), cfg.DirectivesBucket(), cfg.MembersBucket(), cfg.LeasesBucket()} {
		streams = append(streams, "KV_"+b)
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != want {
			t.Errorf("stream %s: %d replicas, want %d", name, got, want)
		}
	}
}

// waitPartitionsSettled waits until every lane has applied everything
// stored (the lanes' lag, as ReadStatus reads it, is 0).
func waitPartitionsSettled(t *testing.T, js jetstream.JetStream, cfg consumer.Config) {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, "every lane settled", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := consumer.ReadStatus(ctx, js, cfg)
		return err == nil && st.TotalLag() == 0
	})
}

// checkScaleVerdicts asserts: every input is stored once and has exactly
// one verdict; per tool, the verdicts are stored in input order; the
// verdicts are exactly those of a fault-free in-order replay of the
// telemetry stream (so none was decided on the wrong state); nothing was
// dead-lettered.
func checkScaleVerdicts(t *testing.T, js jetstream.JetStream, rounds [][]events.Message) {
	t.Helper()
	sent := map[string]bool{}
	for _, round := range rounds {
		for _, m := range round {
			sent[m.ID] = true
		}
	}
	type stored struct {
		seq  uint64
		tool string
	}
	inputs := map[string]stored{}
	c := core.New(core.Options{Names: names})
	state := core.NewMemState()
	want := map[string]bool{}
	for _, m := range streamMessages(t, js, "TOOLSENTRY_TELEMETRY") {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatalf("input %d: %v", md.Sequence.Stream, err)
		}
		if ev.Kind != events.KindQualityCheckpoint { // checkpoints are the workers' own
			if _, dup := inputs[ev.ID]; dup || !sent[ev.ID] {
				t.Errorf("input %s stored twice or never sent", ev.ID)
			}
			inputs[ev.ID] = stored{md.Sequence.Stream, ev.Key}
		}
		eff, err := c.Apply(state, core.Input{Event: ev, Subject: m.Subject(), Seq: md.Sequence.Stream})
		if err != nil {
			t.Fatal(err)
		}
		if err := state.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		for _, v := range eff.Verdicts {
			want[v.ID] = true
		}
	}
	if len(inputs) != len(sent) || len(want) != len(sent) {
		t.Fatalf("%d inputs sent, %d stored, %d verdicts in the replay: want one each", len(sent), len(inputs), len(want))
	}

	perInput := map[string]int{}
	lastSeq := map[string]uint64{}
	kinds := map[guards.SchemaVerdict]int{}
	var problems []string
	verdicts := streamMessages(t, js, "TOOLSENTRY_VERDICTS")
	for _, m := range verdicts {
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil || ev.SchemaVerdict == nil {
			t.Fatalf("verdict %s: %v", m.Subject(), err)
		}
		v := ev.SchemaVerdict
		kinds[v.Verdict]++
		in, ok := inputs[v.InputEventID]
		switch {
		case !ok:
			problems = append(problems, "verdict for an unknown input "+v.InputEventID)
		case in.seq != v.InputSequence:
			problems = append(problems, fmt.Sprintf("verdict of %s names seq %d, stored at %d", v.InputEventID, v.InputSequence, in.seq))
		}
		perInput[v.InputEventID]++
		if last, ok := lastSeq[v.ToolID]; ok && v.InputSequence <= last {
			problems = append(problems, fmt.Sprintf("%s: seq %d stored after seq %d", v.ToolID, v.InputSequence, last))
		}
		lastSeq[v.ToolID] = max(lastSeq[v.ToolID], v.InputSequence)
		if !want[ev.ID] {
			problems = append(problems, fmt.Sprintf("verdict %s (%s of %s) is not the replay's", ev.ID, v.Verdict, v.InputEventID))
		}
	}
	for id, in := range inputs {
		if n := perInput[id]; n != 1 {
			problems = append(problems, fmt.Sprintf("input %s has %d verdicts", id, n))
			if n == 0 {
				logLostInput(t, js, verdicts, id, in.seq, in.tool)
			}
		}
	}
	for _, k := range []guards.SchemaVerdict{guards.NoBaseline, guards.DriftOnUnusedFields} {
		if kinds[k] == 0 {
			t.Errorf("no %s verdict among %v: the inputs do not exercise the guard", k, kinds)
		}
	}
	if n := streamCount(t, js, "TOOLSENTRY_DLQ"); n != 0 {
		problems = append(problems, fmt.Sprintf("%d dead letters", n))
	}
	if len(verdicts) != len(sent) {
		problems = append(problems, fmt.Sprintf("%d verdicts stored for %d inputs", len(verdicts), len(sent)))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Errorf("%d problems, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
}

// logPartitions logs the lanes' leases and every worker's engines, to
// diagnose a failure.
func logPartitions(t *testing.T, js jetstream.JetStream, cfg consumer.Config, ws []*scaleWorker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := consumer.ReadStatus(ctx, js, cfg); err != nil {
		t.Logf("status: %v", err)
	} else {
		for _, l := range st.Lanes {
			t.Logf("lane %s: owner %q epoch %d checkpoint %d lag %d (measured %v at %s)", l.Lane, l.Owner, l.Epoch, l.Checkpoint, l.Lag, l.Measured, l.At)
		}
	}
	for _, w := range ws {
		t.Logf("worker %s: owns %v, lanes %+v", w.name, w.svc.Lanes.Owned(), w.svc.Lanes.Status(ctx))
	}
}

// A worker joins mid-stream and another leaves gracefully mid-stream, on
// one server: partitions move both times, and still every input has
// exactly one verdict, in order per tool.
func TestScaleOutJoinAndLeaveMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs workers for several seconds")
	}
	const (
		partitions = 4
		tools      = 20
		rounds     = 30
	)
	_, url := natstest.RunServer(t)
	cfg := scaleConfig(1, partitions)
	js := natstest.JetStream(t, url)
	w1 := startScaleWorker(t, "w1", url, cfg)
	lanes := partitions + 2
	natstest.Eventually(t, 10*time.Second, "w1 owns every lane", func() bool {
		return ownedOnce([]*scaleWorker{w1}, lanes)
	})
	checkReplicas(t, js, cfg, 1)

	inputs := scaleInputs(t, rounds, tools)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var w2 *scaleWorker
	err := publishAll(ctx, js, inputs, func(r int) {
		switch r {
		case rounds / 3:
			w2 = startScaleWorker(t, "w2", url, cfg)
			natstest.Eventually(t, 10*time.Second, "w1 and w2 share the lanes", func() bool {
				return ownedOnce([]*scaleWorker{w1, w2}, lanes)
			})
		case 2 * rounds / 3:
			if err := w1.svc.Close(); err != nil {
				t.Errorf("closing w1: %v", err)
			}
			if err := <-w1.done; err != nil {
				t.Errorf("w1 run: %v", err)
			}
			natstest.Eventually(t, 10*time.Second, "w2 took every lane over", func() bool {
				return ownedOnce([]*scaleWorker{w2}, lanes)
			})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	total := tools * rounds
	natstest.Eventually(t, 30*time.Second, fmt.Sprintf("%d verdicts", total), func() bool {
		return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= total
	})
	waitPartitionsSettled(t, js, cfg)
	checkScaleVerdicts(t, js, inputs)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	kv, err := js.KeyValue(ctx2, cfg.MembersBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx2, "w1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("w1 left, its member entry: %v", err)
	}
}

// Upgrading from the per-message-ack workers: a lane whose lease was never
// committed starts after the ack floor of the durable consumer they left,
// instead of going through the stream's history again.
func TestLanesResumeAfterTheOldConsumer(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	cfg := scaleConfig(1, 1)
	first := startScaleWorker(t, "first", url, cfg)
	inputs := scaleInputs(t, 2, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := publishAll(ctx, js, inputs[:1], func(int) {}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "10 verdicts", func() bool {
		return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= 10
	})
	waitPartitionsSettled(t, js, cfg)
	if err := first.svc.Close(); err != nil {
		t.Fatal(err)
	}
	// What an upgrade finds: no leases, and the old workers' consumer with
	// everything so far acknowledged.
	res := first.svc.Resources
	si, err := res.Telemetry.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floor := si.State.LastSeq
	for _, k := range []string{"tools.0", "composition", "directives", "layout"} {
		if err := res.Leases.Purge(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := res.Telemetry.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "toolsentry-workers",
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: floor + 1,
		Metadata: map[string]string{"toolsentry.max_deliver": "5"}}); err != nil {
		t.Fatal(err)
	}
	if err := publishAll(ctx, js, inputs[1:], func(int) {}); err != nil {
		t.Fatal(err)
	}
	w := startScaleWorker(t, "upgraded", url, cfg)
	natstest.Eventually(t, 20*time.Second, "20 verdicts", func() bool {
		return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= 20
	})
	waitPartitionsSettled(t, js, cfg)
	checkScaleVerdicts(t, js, inputs)
	var applied uint64
	for _, l := range w.svc.Lanes.Status(ctx) {
		if l.Lane == "tools.0" {
			applied = l.Applied
		}
	}
	if applied != 10 {
		t.Errorf("the tool lane applied %d inputs after the upgrade, want the 10 after the old ack floor %d", applied, floor)
	}
}

// Changing the partition count: inputs stored under the old count and not
// yet applied when the workers stopped are read first, by the lane of the
// new count that owns their tool, then the lanes go on with what the new
// count stores: still exactly one verdict per input, in order per tool.
func TestLanesChangeThePartitionCount(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	inputs := scaleInputs(t, 3, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	w := startScaleWorker(t, "two", url, scaleConfig(1, 2))
	if err := publishAll(ctx, js, inputs[:1], func(int) {}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "12 verdicts", func() bool { return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= 12 })
	waitPartitionsSettled(t, js, scaleConfig(1, 2))
	if err := w.svc.Close(); err != nil {
		t.Fatal(err)
	}
	// Stored under 2 partitions while no worker runs.
	if err := publishAll(ctx, js, inputs[1:2], func(int) {}); err != nil {
		t.Fatal(err)
	}

	w3 := startScaleWorker(t, "three", url, scaleConfig(1, 3))
	since := w3.svc.Resources.Layout.Since
	if w3.svc.Resources.Layout.Name != "partition(3)" || since < 25 {
		t.Fatalf("the stream's layout after the change: %+v", w3.svc.Resources.Layout)
	}
	if err := publishAll(ctx, js, inputs[2:], func(int) {}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "36 verdicts", func() bool { return streamCount(t, js, "TOOLSENTRY_VERDICTS") >= 36 })
	waitPartitionsSettled(t, js, scaleConfig(1, 3))
	checkScaleVerdicts(t, js, inputs)
	leases, err := js.KeyValue(ctx, "toolsentry-leases")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		st, ok, err := engine.ReadLease(ctx, leases, fmt.Sprintf("tools.%d", i))
		if err != nil || !ok || st.Layout != "partition(3)" || st.Checkpoint < since {
			t.Errorf("lane tools.%d after the change: %+v %v %v; want partition(3) from %d on", i, st, ok, err, since)
		}
	}
}

// Workers with different partition counts would read different lanes of
// one key: a worker that finds a live one of another count does not start.
func TestScaleOutRefusesAnotherPartitionCount(t *testing.T) {
	_, url := natstest.RunServer(t)
	w1 := startScaleWorker(t, "w1", url, scaleConfig(1, 2))
	natstest.Eventually(t, 10*time.Second, "w1 owns every lane", func() bool {
		return ownedOnce([]*scaleWorker{w1}, 4)
	})
	// Refused before it provisions: the stream keeps w1's transform.
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	_, err := consumer.StartService(ctx, natstest.Connect(t, url), consumer.ServiceOptions{Config: scaleConfig(1, 3), Engine: testOptions(), Member: "w2"})
	if !errors.Is(err, consumer.ErrPartitionsMismatch) {
		t.Fatalf("w2 with 3 partitions next to w1 with 2: %v, want ErrPartitionsMismatch", err)
	}
	info, err := w1.svc.Resources.Telemetry.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tr := info.Config.SubjectTransform; tr == nil || !strings.Contains(tr.Destination, "partition(2,") {
		t.Errorf("the stream's transform %+v: want w1's 2 partitions", tr)
	}
}

// logLostInput logs what the verdict stream and the baseline bucket hold
// for the tool of an input without a verdict, to diagnose a failure.
func logLostInput(t *testing.T, js jetstream.JetStream, verdicts []jetstream.Msg, id string, seq uint64, tool string) {
	t.Helper()
	var seqs []string
	for _, m := range verdicts {
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil || ev.SchemaVerdict == nil || ev.SchemaVerdict.ToolID != tool {
			continue
		}
		md, _ := m.Metadata()
		seqs = append(seqs, fmt.Sprintf("%d@%d", ev.SchemaVerdict.InputSequence, md.Sequence.Stream))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var baseline string
	if kv, err := js.KeyValue(ctx, "toolsentry-baselines"); err == nil {
		if e, err := kv.Get(ctx, mustKVKey(t, tool)); err == nil {
			baseline = fmt.Sprintf("rev %d: %.300s", e.Revision(), e.Value())
		} else {
			baseline = err.Error()
		}
	}
	t.Logf("lost input %s (seq %d, tool %s): verdicts of the tool (input seq@verdict seq) %v; baseline %s", id, seq, tool, seqs, baseline)
}

func mustKVKey(t *testing.T, id string) string {
	t.Helper()
	k, err := events.KVKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
