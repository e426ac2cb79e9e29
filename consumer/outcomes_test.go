package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// outcomeWorker is a service whose Run can be abandoned without Close: a
// crash, as far as its state is concerned (nothing is flushed).
type outcomeWorker struct {
	svc    *consumer.Service
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func startOutcomeWorker(t *testing.T, url string) *outcomeWorker {
	t.Helper()
	return startOutcomeWorkerFlushing(t, url, time.Hour)
}

func startOutcomeWorkerFlushing(t *testing.T, url string, flush time.Duration) *outcomeWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	nc := natstest.Connect(t, url)
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	svc, err := consumer.StartService(sctx, nc, consumer.ServiceOptions{
		Config:               testConfig(),
		Engine:               testOptions(),
		Processor:            consumer.ProcessorOptions{Core: core.Options{QualityEvery: 10}},
		OutcomeFlushInterval: flush,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &outcomeWorker{svc: svc, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- svc.Run(ctx) }()
	return w
}

// crash stops consuming without storing anything held in memory.
func (w *outcomeWorker) crash(t *testing.T) {
	t.Helper()
	w.cancel()
	if err := <-w.done; err != nil {
		t.Errorf("run: %v", err)
	}
	w.svc.Store.Close()
	w.nc.Close()
}

func (w *outcomeWorker) close(t *testing.T) {
	t.Helper()
	if err := w.svc.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := <-w.done; err != nil {
		t.Errorf("run: %v", err)
	}
}

func storedOutcomes(t *testing.T, js jetstream.JetStream, tool string) core.OutcomeRecord {
	t.Helper()
	r, err := readOutcomes(js, tool)
	if err != nil {
		t.Fatalf("outcome record of %s: %v", tool, err)
	}
	return r
}

// readOutcomes reads the tool's stored outcome record.
func readOutcomes(js jetstream.JetStream, tool string) (core.OutcomeRecord, error) {
	var r core.OutcomeRecord
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "toolsentry-outcomes")
	if err != nil {
		return r, err
	}
	key, err := core.Key(tool)
	if err != nil {
		return r, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(e.Value(), &r)
}

// Outcome counts are stored with the batch that holds a quality checkpoint
// and at a graceful stop, and kept in memory in between; after a crash the next worker rebuilds
// them from the stored record and the tool's invocations in the stream, so
// that every checkpoint and the final counts are exact.
func TestOutcomeCountsAreRebuiltAfterACrash(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	const tool = "crm.lookup"
	calls, successes := 0, 0
	send := func(n int) {
		for range n {
			status := "ok"
			if calls%4 == 3 {
				status = "error"
			} else {
				successes++
			}
			calls++
			m, err := names.NewInvocation(meta(), events.Invocation{ToolID: tool, AgentID: "agent-a", Outcome: &events.Outcome{Status: status}})
			if err != nil {
				t.Fatal(err)
			}
			publish(t, js, m)
		}
	}
	subject, err := names.Telemetry(events.KindInvocation, tool)
	if err != nil {
		t.Fatal(err)
	}
	settled := func() bool { return lanesSettled(js) }

	w1 := startOutcomeWorker(t, url)
	send(12)
	// A malformed invocation on the tool's subject: dead-lettered live,
	// skipped by a rebuild.
	publish(t, js, events.Message{Subject: subject, Header: map[string][]string{"Content-Type": {"application/cloudevents+json"}}, Data: []byte(`{"not":"an event"}`)})
	send(13)
	natstest.Eventually(t, 20*time.Second, "first worker settled", settled)
	// Stored with the batch that held the checkpoint at 20: at least 20.
	atCheckpoint := storedOutcomes(t, js, tool).Calls
	if atCheckpoint < 20 || atCheckpoint > 25 {
		t.Errorf("stored after 25 outcomes: %d calls, want 20 to 25 (the batch of the last checkpoint)", atCheckpoint)
	}
	// Three more, each applied alone: counted in memory only.
	for range 3 {
		send(1)
		natstest.Eventually(t, 20*time.Second, "first worker settled", settled)
	}
	if got := storedOutcomes(t, js, tool); got.Calls != atCheckpoint {
		t.Errorf("stored after 28 outcomes: %d calls, want still %d", got.Calls, atCheckpoint)
	}
	if n := w1.svc.Store.PendingOutcomes(); n != 1 {
		t.Errorf("%d tools with counts in memory, want 1", n)
	}
	w1.crash(t)

	w2 := startOutcomeWorker(t, url)
	send(12)
	natstest.Eventually(t, 20*time.Second, "second worker settled", settled)
	if got := storedOutcomes(t, js, tool); got.Calls < 30 {
		t.Errorf("stored after 40 outcomes: %d calls, want at least 30 (the first checkpoint after the crash)", got.Calls)
	}
	w2.close(t) // stores what it holds
	got := storedOutcomes(t, js, tool)
	if got.Calls != int64(calls) || got.Successes != int64(successes) {
		t.Errorf("stored at the graceful stop: %d calls, %d successes; want %d and %d", got.Calls, got.Successes, calls, successes)
	}

	// Every checkpoint counts exactly what came before it, once.
	var checkpoints []string
	for _, m := range streamMessages(t, js, "TOOLSENTRY_TELEMETRY") {
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil || ev.QualityCheckpoint == nil || ev.QualityCheckpoint.ToolID != tool {
			continue
		}
		checkpoints = append(checkpoints, fmt.Sprintf("%d/%d", ev.QualityCheckpoint.Successes, ev.QualityCheckpoint.Calls))
	}
	want := fmt.Sprint([]string{"8/10", "15/20", "23/30", "30/40"})
	if fmt.Sprint(checkpoints) != want {
		t.Errorf("checkpoints (successes/calls) %v, want %s", checkpoints, want)
	}
	if len(deadLettersOf(t, js)) != 1 {
		t.Error("the malformed invocation was not dead-lettered once")
	}
}

func deadLettersOf(t *testing.T, js jetstream.JetStream) []jetstream.Msg {
	t.Helper()
	return streamMessages(t, js, "TOOLSENTRY_DLQ")
}

// While the service runs, the counts held in memory are stored every
// OutcomeFlushInterval: a quiet tool's counts do not wait for its next
// checkpoint (or a graceful stop) to be stored.
func TestOutcomeCountsAreStoredPeriodically(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	w := startOutcomeWorkerFlushing(t, url, 200*time.Millisecond)
	for range 4 {
		m, err := names.NewInvocation(meta(), events.Invocation{ToolID: "quiet.tool", AgentID: "a", Outcome: &events.Outcome{Status: "ok"}})
		if err != nil {
			t.Fatal(err)
		}
		publish(t, js, m)
	}
	natstest.Eventually(t, 10*time.Second, "4 outcomes stored without a checkpoint or a stop", func() bool {
		r, err := readOutcomes(js, "quiet.tool")
		return err == nil && r.Calls == 4
	})
	// The flush marks the tool stored once its write returns, a moment
	// after the write is visible in the bucket.
	natstest.Eventually(t, 10*time.Second, "no counts held in memory after the flush", func() bool {
		return w.svc.Store.PendingOutcomes() == 0
	})
	w.crash(t) // nothing left to lose
}
