package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// TestUpgradeOfAnUntransformedTelemetryStream: a telemetry stream created
// before the subject transform (subjects <prefix>.telemetry.>, no
// transform) that holds messages is updated in place when a worker starts:
// the known kinds' subjects and the transform. The messages stored before
// keep their 4-token subjects, later ones are stored as
// <prefix>.telemetry.<kind>.<p>.<key>, and every reader handles both: the
// worker, the outcome counts rebuilt after a crash from invocations of both
// forms, and the replay.
func TestUpgradeOfAnUntransformedTelemetryStream(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(testContext(t), time.Minute)
	defer cancel()
	cfg := testConfig()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.TelemetryStream(),
		Subjects:   []string{cfg.TelemetrySubjects()},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
		MaxAge:     consumer.DefaultMaxAge,
	}); err != nil {
		t.Fatal(err)
	}

	const tool = "crm.lookup"
	calls := 0
	send := func(n int) {
		for range n {
			m, err := names.NewInvocation(meta(), events.Invocation{ToolID: tool, AgentID: "agent-a", Outcome: &events.Outcome{Status: "ok"}})
			if err != nil {
				t.Fatal(err)
			}
			publish(t, js, m)
			calls++
		}
	}
	settled := func() bool { return lanesSettled(js) }

	publish(t, js, observation(t, tool, crmV1))
	send(5) // stored in the legacy form, before any worker ran

	w1 := startOutcomeWorker(t, url) // provisions: the stream is updated in place
	st := streamOf(t, js, cfg.TelemetryStream())
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layout := cfg.Layout()
	if diff := cmp.Diff(layout.StreamSubjects(), info.Config.Subjects); diff != "" {
		t.Errorf("stream subjects after the upgrade (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(layout.Transform(), info.Config.SubjectTransform); diff != "" {
		t.Errorf("stream transform after the upgrade (-want +got):\n%s", diff)
	}
	if got, want := engine.ReadStreamLayout(info.Config), (engine.StreamLayout{Name: "partition(1)", Since: 7}); got != want {
		t.Errorf("recorded layout %+v, want %+v: the 6 legacy messages are below it", got, want)
	}
	natstest.Eventually(t, 20*time.Second, "legacy messages applied", settled)
	send(3) // stored in the partitioned form
	natstest.Eventually(t, 20*time.Second, "new messages applied", settled)
	w1.crash(t) // 8 outcomes counted in memory only (QualityEvery 10)

	var stored []string
	for _, m := range streamMessages(t, js, cfg.TelemetryStream()) {
		a, err := names.ParseSubject(m.Subject())
		if err != nil {
			t.Fatalf("stored subject %q: %v", m.Subject(), err)
		}
		if a.Kind == events.KindInvocation {
			stored = append(stored, fmt.Sprintf("%v/%d", a.Stored, a.Partition))
		}
	}
	want := []string{"false/0", "false/0", "false/0", "false/0", "false/0", "true/0", "true/0", "true/0"}
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Fatalf("invocations' stored form/partition (-want +got):\n%s", diff)
	}

	// The next worker rebuilds the 8 counts from both forms, then reaches
	// the checkpoint at 10.
	w2 := startOutcomeWorker(t, url)
	send(4)
	natstest.Eventually(t, 20*time.Second, "second worker settled", settled)
	if got := storedOutcomes(t, js, tool); got.Calls < 10 {
		t.Errorf("stored after %d outcomes: %d calls, want at least 10 (the batch of the checkpoint)", calls, got.Calls)
	}
	w2.close(t)
	if got := storedOutcomes(t, js, tool); got.Calls != int64(calls) {
		t.Errorf("stored at the graceful stop: %d calls, want %d", got.Calls, calls)
	}
	if n := len(deadLettersOf(t, js)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}

	rep := replay(t, js, consumer.ReplayOptions{})
	if rep.Tampered() != 0 || rep.InputsRejected != 0 {
		t.Errorf("replay of the upgraded stream: %s", diffsText(rep.Differences))
	}
	if n := len(streamMessages(t, js, cfg.TelemetryStream())); rep.InputsReplayed != n {
		t.Errorf("replayed %d inputs of %d", rep.InputsReplayed, n)
	}
}

// TestProvisionRecordsTheLayout: the telemetry stream records the layout
// it stores under and the first sequence stored under it. Another
// partition count updates the transform in place and records where the
// new layout starts (the sequences below it keep their partition tokens);
// a start interrupted between the transform and the record is completed
// by the next one.
func TestProvisionRecordsTheLayout(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(testContext(t), time.Minute)
	defer cancel()
	provision := func(n int) *consumer.Resources {
		t.Helper()
		cfg := testConfig()
		cfg.Partitions = n
		res, err := consumer.Provision(ctx, js, cfg)
		if err != nil {
			t.Fatalf("Provision with %d partitions: %v", n, err)
		}
		info, err := res.Telemetry.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := engine.ReadStreamLayout(info.Config); got != res.Layout {
			t.Errorf("Resources.Layout %+v, the stream records %+v", res.Layout, got)
		}
		if diff := cmp.Diff(cfg.Layout().Transform(), info.Config.SubjectTransform); diff != "" {
			t.Errorf("transform with %d partitions (-want +got):\n%s", n, diff)
		}
		return res
	}
	publishN := func(n int) {
		for i := range n {
			publish(t, js, invocation(t, fmt.Sprintf("tool-%d", i), "agent-a", `{}`))
		}
	}
	want := func(res *consumer.Resources, name string, since uint64) {
		t.Helper()
		if got := res.Layout; got != (engine.StreamLayout{Name: name, Since: since}) {
			t.Errorf("layout %+v, want %s since %d", got, name, since)
		}
	}

	want(provision(1), "partition(1)", 1) // a new stream
	publishN(3)
	want(provision(1), "partition(1)", 1) // a restart keeps it
	res := provision(4)
	want(res, "partition(4)", 4)
	publishN(8)
	want(provision(4), "partition(4)", 4)

	tokens := map[int]bool{}
	for _, m := range streamMessages(t, js, "TOOLSENTRY_TELEMETRY") {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		a, err := names.ParseSubject(m.Subject())
		if err != nil || !a.Stored {
			t.Fatalf("stored subject %q: %+v, %v", m.Subject(), a, err)
		}
		if md.Sequence.Stream < 4 && a.Partition != 0 {
			t.Errorf("sequence %d, stored under partition(1), on %q", md.Sequence.Stream, m.Subject())
		}
		if md.Sequence.Stream >= 4 {
			tokens[a.Partition] = true
		}
	}
	for p := range tokens {
		if p > 3 {
			t.Errorf("partition token %d under partition(4)", p)
		}
	}
	if len(tokens) < 2 {
		t.Errorf("8 tools stored under partition(4) in partitions %v: want several", tokens)
	}

	// A change interrupted after the transform: no layout recorded.
	info, err := res.Telemetry.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := info.Config
	sc.SubjectTransform = testConfigWith(2).Layout().Transform()
	sc.Metadata = nil
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	want(provision(2), "partition(2)", 12)
}

func testConfigWith(partitions int) consumer.Config {
	cfg := testConfig()
	cfg.Partitions = partitions
	return cfg
}
