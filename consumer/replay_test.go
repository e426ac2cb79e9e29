package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// replayCore is the core configuration of the live service and of the
// replay in these tests: quality checkpoints every 20 outcomes of a tool, so
// that the generated mix makes many of them while tools' lanes and the
// composition lane run concurrently. Composition verdicts read only what the
// composition lane applied in stream order, so the replay re-derives them.
var replayCore = core.Options{QualityEvery: 20}

// startReplayWorker runs a live service with replayCore.
func startReplayWorker(t *testing.T, url string) *worker {
	t.Helper()
	return startReplayWorkerWith(t, url, testConfig())
}

// startReplayWorkerWith runs a live service of cfg with replayCore.
func startReplayWorkerWith(t *testing.T, url string, cfg consumer.Config) *worker {
	t.Helper()
	w := &worker{t: t, ctx: testContext(t)}
	w.nc = natstest.Connect(t, url)
	w.js = natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	svc, err := consumer.StartService(ctx, w.nc, consumer.ServiceOptions{
		Config:    cfg,
		Engine:    testOptions(),
		Processor: consumer.ProcessorOptions{Core: replayCore},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.svc = svc
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := svc.Run(w.ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	var once sync.Once
	t.Cleanup(func() { once.Do(w.stop) })
	return w
}

// waitHandled waits until the lanes applied (or dead-lettered) every input
// of the stream and committed their checkpoints past it.
func waitHandled(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, "every input handled", func() bool { return lanesSettled(js) })
}

// recordSeedScenarios publishes the seeds' scenarios: the silent rename
// with bad input between (two dead letters) and the chain of five.
func recordSeedScenarios(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	publish(t, js, observation(t, "crm.lookup", crmV1))
	publish(t, js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"alice@example.com","limit":5}`))
	if _, err := js.Publish(context.Background(), "toolsentry.telemetry.invocation.crm=2Elookup", []byte(`{"specversion":"1.0","id":"broken"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), "toolsentry.telemetry.contract.crm=2Elookup",
		[]byte(`{"specversion":"1.0","id":"bad-accuracy","source":"test","type":"io.toolsentry.tool.contract.v1","data":{"tool_id":"crm.lookup","accuracy":1.5,"determinism":"DETERMINISTIC"}}`)); err != nil {
		t.Fatal(err)
	}
	publish(t, js, observation(t, "crm.lookup", crmRenamed))
	waitHandled(t, js)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		publish(t, js, contractMsg(t, id, 0.95))
	}
	wf, err := names.NewWorkflow(meta(), []byte(`{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":true},"structure":{"chain":["a","b","c","d","e"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, wf)
	waitHandled(t, js)
}

// recordMix publishes a generated mix over many tools and agents as fast as
// it can, while the live service consumes it with every lane in parallel.
func recordMix(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	mix, err := benchmix.New(benchmix.Options{Events: n, IDPrefix: "mix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ev := range mix.All() {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: ev.Subject, Header: ev.Header, Data: ev.Data}); err != nil {
			t.Fatal(err)
		}
	}
	waitHandled(t, js)
}

func replay(t *testing.T, js jetstream.JetStream, opts consumer.ReplayOptions) *consumer.ReplayReport {
	t.Helper()
	opts.Core = replayCore
	opts.MaxDifferences = 100000
	ctx, cancel := context.WithTimeout(testContext(t), 60*time.Second)
	defer cancel()
	rep, err := consumer.Replay(ctx, js, opts)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return rep
}

// liveFootprint is what the replay must not change: the last sequences of
// the verdict stream, the state buckets and the lanes' leases.
func liveFootprint(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]uint64{}
	for _, s := range []string{"TOOLSENTRY_VERDICTS", "TOOLSENTRY_DLQ", "KV_toolsentry-baselines", "KV_toolsentry-usage", "KV_toolsentry-quality", "KV_toolsentry-workflows", "KV_toolsentry-leases"} {
		st, err := js.Stream(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[s] = info.State.LastSeq
	}
	return out
}

// recordedVerdict is one verdict of the verdict stream.
type recordedVerdict struct {
	seq uint64
	ev  events.Event
}

func recordedVerdicts(t *testing.T, js jetstream.JetStream) []recordedVerdict {
	t.Helper()
	var out []recordedVerdict
	for _, m := range streamMessages(t, js, "TOOLSENTRY_VERDICTS") {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recordedVerdict{seq: md.Sequence.Stream, ev: ev})
	}
	return out
}

func streamOf(t *testing.T, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// republish stores an edited copy of a recorded verdict and, with
// replace, deletes the original: what someone with write access to the
// verdict stream can do.
func republish(t *testing.T, js jetstream.JetStream, v recordedVerdict, replace bool, edit func(*events.SchemaVerdict)) {
	t.Helper()
	sv := *v.ev.SchemaVerdict
	edit(&sv)
	m, err := names.NewSchemaVerdict(sv, v.ev.Time)
	if err != nil {
		t.Fatal(err)
	}
	// Without Nats-Msg-Id: the verdict id does not change with every
	// member, and the stream would drop the copy as a duplicate.
	h := nats.Header(m.Header)
	h.Del(events.HeaderMsgID)
	if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
		t.Fatal(err)
	}
	if replace {
		if err := streamOf(t, js, "TOOLSENTRY_VERDICTS").DeleteMsg(context.Background(), v.seq); err != nil {
			t.Fatal(err)
		}
	}
}

func otherDigest(d string) string {
	if strings.HasSuffix(d, "0") {
		return d[:len(d)-1] + "1"
	}
	return d[:len(d)-1] + "0"
}

// diffsText shows differences with their payloads as text.
func diffsText(diffs []consumer.ReplayDifference) string {
	b, _ := json.MarshalIndent(diffs, "", "  ")
	return string(b)
}

func kinds(diffs []consumer.ReplayDifference) map[consumer.DifferenceKind]int {
	out := map[consumer.DifferenceKind]int{}
	for _, d := range diffs {
		out[d.Kind]++
	}
	return out
}

// TestReplayAudit records the seeds' scenarios and a few thousand generated
// events through the live service, then audits them: the replay matches
// every verdict and touches nothing; a what-if workflow reports policy
// changes only; an edited, a deleted, a forged and an older guard's
// verdict are each reported as what they are; a window agrees with the
// full replay on that window; a key filter compares only its key; a
// dead letter removed from the DLQ is noticed.
func TestReplayAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("records a few thousand events through the live service")
	}
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	js := w.js
	recordSeedScenarios(t, js)
	recordMix(t, js, 3000)
	w.stop()
	verdicts := recordedVerdicts(t, js)
	telemetry := streamMessages(t, js, "TOOLSENTRY_TELEMETRY")

	t.Run("matches 100% and touches nothing", func(t *testing.T) {
		before := liveFootprint(t, js)
		rep := replay(t, js, consumer.ReplayOptions{})
		if after := liveFootprint(t, js); !cmp.Equal(before, after) {
			t.Errorf("the replay changed live state: %s", cmp.Diff(before, after))
		}
		if len(rep.Differences) != 0 || rep.Tampered() != 0 || rep.PolicyChanges() != 0 {
			t.Fatalf("differences on an untouched record: %s", diffsText(rep.Differences))
		}
		if rep.InputsReplayed != len(telemetry) || rep.InputsCompared != len(telemetry) || rep.InputsUnhandled != 0 {
			t.Errorf("replayed %d, compared %d, unhandled %d of %d inputs", rep.InputsReplayed, rep.InputsCompared, rep.InputsUnhandled, len(telemetry))
		}
		if rep.VerdictsRecorded != len(verdicts) || rep.VerdictsRederived != len(verdicts) || rep.Matched != len(verdicts) {
			t.Errorf("recorded %d, re-derived %d, matched %d; the stream holds %d", rep.VerdictsRecorded, rep.VerdictsRederived, rep.Matched, len(verdicts))
		}
		if rep.InputsRejected != 2 || rep.DeadLettersConfirmed != 2 || !rep.DeadLettersChecked {
			t.Errorf("rejected %d, confirmed dead letters %d (checked %v), want the seed's 2", rep.InputsRejected, rep.DeadLettersConfirmed, rep.DeadLettersChecked)
		}
		var composition, drift int
		for _, v := range verdicts {
			if v.ev.CompositionVerdict != nil {
				composition++
			} else if v.ev.SchemaVerdict.Verdict == guards.DriftOnUsedFields {
				drift++
			}
		}
		if composition < 10 || drift < 10 {
			t.Errorf("the record holds %d composition and %d drift verdicts: it does not exercise both guards", composition, drift)
		}
	})

	t.Run("what-if workflow reports policy changes", func(t *testing.T) {
		var declared map[string]any
		for _, m := range telemetry {
			if a, err := names.ParseSubject(m.Subject()); err == nil && a.Kind == events.KindWorkflow && a.Key == "workflow-000" {
				ev, err := names.Decode(m.Subject(), m.Headers(), m.Data())
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(ev.Workflow.Raw, &declared); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		if declared == nil {
			t.Fatal("the mix declares no workflow-000")
		}
		declared["workflow_quality_requirement"] = 0.999
		raw, _ := json.Marshal(declared)
		rep := replay(t, js, consumer.ReplayOptions{WhatIf: consumer.WhatIf{Workflows: map[string][]byte{"workflow-000": raw}}})
		if rep.Tampered() != 0 {
			t.Errorf("a what-if is reported as tampering: %s", diffsText(rep.Differences))
		}
		if rep.WhatIf == nil || rep.WhatIf.Changed == 0 || rep.PolicyChanges() != rep.WhatIf.Changed+rep.WhatIf.Added+rep.WhatIf.Removed {
			t.Fatalf("what-if report %+v", rep.WhatIf)
		}
		for _, d := range rep.Differences {
			if d.Kind != consumer.DiffWhatIf || d.Key != "workflow-000" {
				t.Errorf("difference %s: want what-if changes of workflow-000 only", diffsText([]consumer.ReplayDifference{d}))
				continue
			}
			if d.Change == "changed" && (!strings.Contains(string(d.WhatIf), `"COMPOSITION_DEGRADED"`) || d.Rederived == nil) {
				t.Errorf("a requirement of 99.9%% should degrade workflow-000: %s (was %s)", d.WhatIf, d.Rederived)
			}
		}
		if rep.Matched != len(verdicts) {
			t.Errorf("under the recorded configuration %d of %d verdicts matched", rep.Matched, len(verdicts))
		}
	})

	// Tamper with the record: four verdicts of schema drift or match, spread
	// over the stream.
	var schema []recordedVerdict
	for _, v := range verdicts {
		if v.ev.SchemaVerdict != nil && strings.HasPrefix(v.ev.SchemaVerdict.InputEventID, "mix-") {
			schema = append(schema, v)
		}
	}
	edited, deleted, forged, older := schema[len(schema)/5], schema[2*len(schema)/5], schema[3*len(schema)/5], schema[4*len(schema)/5]
	republish(t, js, edited, true, func(v *events.SchemaVerdict) { v.ManifestDigest = otherDigest(v.ManifestDigest) })
	if err := streamOf(t, js, "TOOLSENTRY_VERDICTS").DeleteMsg(context.Background(), deleted.seq); err != nil {
		t.Fatal(err)
	}
	republish(t, js, forged, false, func(v *events.SchemaVerdict) { v.AgentID = "agent-forged" })
	republish(t, js, forged, false, func(*events.SchemaVerdict) {}) // stored twice, identically
	republish(t, js, older, true, func(v *events.SchemaVerdict) {
		v.GuardVersion = "0.0.1-older"
		v.Directive = "PROCEED: an older policy."
	})

	var full *consumer.ReplayReport
	t.Run("tampering is reported", func(t *testing.T) {
		full = replay(t, js, consumer.ReplayOptions{})
		want := map[consumer.DifferenceKind]int{consumer.DiffMismatch: 1, consumer.DiffMissing: 1, consumer.DiffExtra: 1, consumer.DiffPolicyChanged: 1}
		if got := kinds(full.Differences); !cmp.Equal(want, got) {
			t.Fatalf("differences by kind (-want +got):\n%s\n%s", cmp.Diff(want, got), diffsText(full.Differences))
		}
		if full.Mismatched != 1 || full.Missing != 1 || full.Extra != 1 || full.PolicyChanged != 1 || full.Tampered() != 3 || full.PolicyChanges() != 1 {
			t.Errorf("counts %+v", *full)
		}
		if full.Matched != len(verdicts)-3 || full.Duplicates != 1 {
			t.Errorf("matched %d, want %d; duplicates %d, want 1", full.Matched, len(verdicts)-3, full.Duplicates)
		}
		for _, d := range full.Differences {
			switch d.Kind {
			case consumer.DiffMismatch:
				if d.InputSequence != edited.ev.SchemaVerdict.InputSequence || d.Recorded == nil || d.Rederived == nil ||
					!strings.Contains(string(d.Recorded), otherDigest(edited.ev.SchemaVerdict.ManifestDigest)) ||
					!strings.Contains(string(d.Rederived), edited.ev.SchemaVerdict.ManifestDigest) || !strings.Contains(d.Reason, "manifest digest") {
					t.Errorf("mismatch %s", diffsText([]consumer.ReplayDifference{d}))
				}
			case consumer.DiffMissing:
				if d.InputSequence != deleted.ev.SchemaVerdict.InputSequence || d.Rederived == nil || d.Key != deleted.ev.SchemaVerdict.ToolID {
					t.Errorf("missing %s", diffsText([]consumer.ReplayDifference{d}))
				}
			case consumer.DiffExtra:
				if d.AgentID != "agent-forged" || d.Recorded == nil || d.InputSequence != forged.ev.SchemaVerdict.InputSequence {
					t.Errorf("extra %s", diffsText([]consumer.ReplayDifference{d}))
				}
			case consumer.DiffPolicyChanged:
				if d.InputSequence != older.ev.SchemaVerdict.InputSequence || !strings.Contains(d.Reason, "0.0.1-older") || !strings.Contains(string(d.Recorded), "an older policy") {
					t.Errorf("policy change %s", diffsText([]consumer.ReplayDifference{d}))
				}
			}
		}
	})
	if full == nil {
		t.FailNow()
	}

	t.Run("a window agrees with the full replay on that window", func(t *testing.T) {
		// From the deleted verdict's input to the older one's: the edit
		// falls before the window, the forgery and the older guard inside.
		from, to := deleted.ev.SchemaVerdict.InputSequence, older.ev.SchemaVerdict.InputSequence
		tele := streamOf(t, js, "TOOLSENTRY_TELEMETRY")
		first, err := tele.GetMsg(context.Background(), from)
		if err != nil {
			t.Fatal(err)
		}
		last, err := tele.GetMsg(context.Background(), to)
		if err != nil {
			t.Fatal(err)
		}
		win := replay(t, js, consumer.ReplayOptions{Since: first.Time, Until: last.Time})
		lo, hi := win.Window.FromSeq, win.Window.ToSeq
		if lo > from || lo < from-10 || hi < to || hi > to+10 {
			t.Fatalf("window %d..%d, want about %d..%d", lo, hi, from, to)
		}
		var want []consumer.ReplayDifference
		for _, d := range full.Differences {
			if d.InputSequence >= lo && d.InputSequence <= hi {
				want = append(want, d)
			}
		}
		if len(want) != 3 {
			t.Fatalf("the window holds %d of the full replay's differences, want 3", len(want))
		}
		if diff := cmp.Diff(want, win.Differences); diff != "" {
			t.Errorf("window differences (-full on the window +window):\n%s", diff)
		}
		recorded := 0
		for _, v := range recordedVerdicts(t, js) {
			if s := v.ev.SchemaVerdict; s != nil && s.InputSequence >= lo && s.InputSequence <= hi {
				recorded++
			} else if c := v.ev.CompositionVerdict; c != nil && c.InputSequence >= lo && c.InputSequence <= hi {
				recorded++
			}
		}
		if win.VerdictsRecorded != recorded || win.InputsCompared != int(hi-lo+1) || win.InputsReplayed != len(telemetry) {
			t.Errorf("window recorded %d (want %d), compared %d of %d..%d, replayed %d", win.VerdictsRecorded, recorded, win.InputsCompared, lo, hi, win.InputsReplayed)
		}
		bySeq := replay(t, js, consumer.ReplayOptions{FromSeq: lo, Until: last.Time})
		if diff := cmp.Diff(win.Differences, bySeq.Differences); diff != "" || bySeq.Matched != win.Matched {
			t.Errorf("--from-seq %d and --since its time disagree (matched %d, %d):\n%s", lo, bySeq.Matched, win.Matched, diff)
		}
	})

	t.Run("a tool filter compares that tool's verdicts only", func(t *testing.T) {
		tool := edited.ev.SchemaVerdict.ToolID
		rep := replay(t, js, consumer.ReplayOptions{Tools: []string{tool}})
		recorded := 0
		for _, v := range recordedVerdicts(t, js) {
			if v.ev.SchemaVerdict != nil && v.ev.SchemaVerdict.ToolID == tool {
				recorded++
			}
		}
		if rep.VerdictsRecorded != recorded || recorded == 0 {
			t.Errorf("recorded %d, the stream holds %d of tool %s", rep.VerdictsRecorded, recorded, tool)
		}
		for _, d := range rep.Differences {
			if d.Key != tool || d.Guard != "schema" {
				t.Errorf("difference outside the filter: %s", diffsText([]consumer.ReplayDifference{d}))
			}
		}
		if rep.Mismatched != 1 {
			t.Errorf("the edited verdict of %s: %d mismatches", tool, rep.Mismatched)
		}
	})

	t.Run("a dead letter removed from the DLQ is noticed", func(t *testing.T) {
		dlq := streamOf(t, js, "TOOLSENTRY_DLQ")
		info, err := dlq.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The last one: without the first, the stream would look aged out.
		m, err := dlq.GetMsg(context.Background(), info.State.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		if err := dlq.DeleteMsg(context.Background(), m.Sequence); err != nil {
			t.Fatal(err)
		}
		dl, err := events.ParseDeadLetter(m.Header)
		if err != nil {
			t.Fatal(err)
		}
		rep := replay(t, js, consumer.ReplayOptions{})
		var found bool
		for _, d := range rep.Differences {
			if d.Kind == consumer.DiffRejectedNotDeadLettered {
				found = d.InputSequence == dl.Sequence
			}
		}
		if !found || rep.InputsRejected != 2 || rep.DeadLettersConfirmed != 1 || rep.Other != 1 {
			t.Errorf("rejected %d, confirmed %d, other %d, differences %s", rep.InputsRejected, rep.DeadLettersConfirmed, rep.Other, diffsText(rep.Differences))
		}
	})
}

// TestReplayRefusesTruncatedHistory: once the oldest inputs are gone the
// state cannot be rebuilt; the replay says so unless told to go on.
func TestReplayRefusesTruncatedHistory(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1))                       // 1, its checkpoint 2
	publishHandled(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`)) // 3
	publishHandled(t, w.js, observation(t, "crm.lookup", crmRenamed))                  // 4, its checkpoint 5
	if err := streamOf(t, w.js, "TOOLSENTRY_TELEMETRY").Purge(context.Background(), jetstream.WithPurgeSequence(2)); err != nil {
		t.Fatal(err)
	}
	_, err := consumer.Replay(testContext(t), w.js, consumer.ReplayOptions{Core: replayCore})
	if !errors.Is(err, consumer.ErrTruncatedHistory) {
		t.Fatalf("Replay of a truncated history: %v, want ErrTruncatedHistory", err)
	}
	rep := replay(t, w.js, consumer.ReplayOptions{AllowTruncated: true})
	if !rep.Truncated || rep.FirstSeq != 2 || rep.InputsReplayed != 4 {
		t.Errorf("truncated %v, first %d, replayed %d", rep.Truncated, rep.FirstSeq, rep.InputsReplayed)
	}
	// Without the first observation, the replay knows no baseline: the
	// drift verdict becomes another one, which the report shows.
	if rep.Tampered() == 0 {
		t.Errorf("a replay without the first observation matched everything: %+v", rep)
	}
}

// TestReplaySkipsInputsNotYetHandled: inputs the workers have not
// acknowledged yet have no verdicts to compare with; they rebuild state
// but are counted apart, not reported as missing verdicts.
func TestReplaySkipsInputsNotYetHandled(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1))                       // 1, its checkpoint 2
	publishHandled(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`)) // 3
	w.stop()
	publish(t, w.js, observation(t, "crm.lookup", crmRenamed))
	rep := replay(t, w.js, consumer.ReplayOptions{})
	if rep.HandledThrough != 3 || rep.InputsUnhandled != 1 || rep.InputsCompared != 3 || rep.InputsReplayed != 4 {
		t.Errorf("handled through %d, unhandled %d, compared %d, replayed %d", rep.HandledThrough, rep.InputsUnhandled, rep.InputsCompared, rep.InputsReplayed)
	}
	if len(rep.Differences) != 0 || rep.Matched != 1 {
		t.Errorf("matched %d, differences %s", rep.Matched, diffsText(rep.Differences))
	}
}

func TestReplayRejectsBadOptions(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	ctx := testContext(t)
	for name, opts := range map[string]consumer.ReplayOptions{
		"window backwards":    {Since: time.Date(2026, 10, 3, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC)},
		"bad prefix":          {Prefix: "Not A Prefix"},
		"what-if not json":    {WhatIf: consumer.WhatIf{Workflows: map[string][]byte{"etl": []byte(`{`)}}},
		"what-if other id":    {WhatIf: consumer.WhatIf{Workflows: map[string][]byte{"etl": []byte(`{"composition_id":"other","workflow_quality_requirement":0.9,"structure":{"chain":["a","b"]}}`)}}},
		"what-if meaningless": {WhatIf: consumer.WhatIf{Workflows: map[string][]byte{"etl": []byte(`{"composition_id":"etl","workflow_quality_requirement":7,"structure":{"chain":["a","b"]}}`)}}},
	} {
		if _, err := consumer.Replay(ctx, js, opts); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := consumer.Replay(ctx, js, consumer.ReplayOptions{}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("no streams: %v, want ErrStreamNotFound", err)
	}
}

// TestReplayComparesFromTheFirstRemainingVerdict: verdicts age out of
// their stream while the telemetry may be kept longer. The inputs whose
// verdicts may be gone are replayed into state, not compared: their
// verdicts are not reported missing.
func TestReplayComparesFromTheFirstRemainingVerdict(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1))                       // 1, its checkpoint 2
	publishHandled(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`)) // 3
	publishHandled(t, w.js, observation(t, "crm.lookup", crmRenamed))                  // 4, its checkpoint 5
	if err := streamOf(t, w.js, "TOOLSENTRY_VERDICTS").Purge(context.Background(), jetstream.WithPurgeSequence(2)); err != nil {
		t.Fatal(err)
	}
	publish(t, w.js, observation(t, "crm.lookup", crmV1)) // 6: back to the baseline, one SCHEMA_MATCH
	waitHandled(t, w.js)
	rep := replay(t, w.js, consumer.ReplayOptions{})
	// The window starts after the first remaining verdict (of input 4): at
	// input 6, or at 5, the checkpoint of input 4, when the stream stored it
	// before the verdict (the worker publishes both at once). The
	// checkpoint has no verdict of its own, so both windows compare the same.
	if from := rep.Window.FromSeq; !rep.VerdictsTruncated || rep.VerdictsFirstTime == nil || (from != 5 && from != 6) ||
		rep.InputsReplayed != 7 || rep.InputsCompared != int(8-from) { // 6's checkpoint is 7
		t.Errorf("verdicts truncated %v, window from %d, replayed %d, compared %d", rep.VerdictsTruncated, rep.Window.FromSeq, rep.InputsReplayed, rep.InputsCompared)
	}
	if len(rep.Differences) != 0 || rep.Matched != 1 {
		t.Errorf("matched %d, differences %s", rep.Matched, diffsText(rep.Differences))
	}
}

// TestReplayReportsADeletedInput: an input removed from the audit log is a
// hole that the replay names, with the verdicts that no longer follow.
func TestReplayReportsADeletedInput(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1))                       // 1, its checkpoint 2
	publishHandled(t, w.js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`)) // 3
	publishHandled(t, w.js, observation(t, "crm.lookup", crmRenamed))                  // 4, its checkpoint 5
	if err := streamOf(t, w.js, "TOOLSENTRY_TELEMETRY").DeleteMsg(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	rep := replay(t, w.js, consumer.ReplayOptions{})
	got := kinds(rep.Differences)
	if got[consumer.DiffInputDeleted] != 1 || rep.Differences[0].InputSequence != 3 || rep.InputsReplayed != 4 {
		t.Fatalf("replayed %d, differences %s", rep.InputsReplayed, diffsText(rep.Differences))
	}
	// Without agent-a's call, the drift is judged for nobody: the recorded
	// verdict for agent-a is extra, the re-derived one missing.
	if got[consumer.DiffExtra] != 1 || got[consumer.DiffMissing] != 1 || rep.Tampered() != 3 {
		t.Errorf("differences %s", diffsText(rep.Differences))
	}
}

// publishHandled publishes one input and waits until the workers handled
// it, so that the quality checkpoint a new schema version makes lands right
// after it in the stream and the sequences the tests name are fixed.
func publishHandled(t *testing.T, js jetstream.JetStream, m events.Message) {
	t.Helper()
	publish(t, js, m)
	waitHandled(t, js)
}

// TestReplayOlderGuardsSilence: an input that an older guard passed over
// in silence (a change of _meta only, which guard 2 took for a repeat) and
// the current guard reports has no recorded verdict of its own. The
// tool's verdict recorded before it, written by the older guard, tells the
// audit that the policy changed: not a deleted verdict.
func TestReplayOlderGuardsSilence(t *testing.T) {
	_, url := natstest.RunServer(t)
	w := startReplayWorker(t, url)
	// Another tool first: the verdict stream starts with a verdict this
	// test leaves alone, so the edits below are not taken for truncation.
	publishHandled(t, w.js, observation(t, "kb.search", crmV1))
	publishHandled(t, w.js, observation(t, "crm.lookup", crmV1))
	withMeta := observation(t, "crm.lookup", crmV1)
	ev, err := names.Decode(withMeta.Subject, nats.Header(withMeta.Header), withMeta.Data)
	if err != nil {
		t.Fatal(err)
	}
	so := *ev.SchemaObserved
	tool := *so.Tool
	tool.Meta = json.RawMessage(`{"build":"2026.10.3"}`)
	so.Tool = &tool
	if withMeta, err = names.NewSchemaObserved(meta(), so); err != nil {
		t.Fatal(err)
	}
	publishHandled(t, w.js, withMeta)
	w.stop()
	verdicts := recordedVerdicts(t, w.js)
	var first, meta *recordedVerdict
	for i, v := range verdicts {
		switch sv := v.ev.SchemaVerdict; {
		case sv == nil:
		case sv.Verdict == guards.NoBaseline && sv.ToolID == "crm.lookup":
			first = &verdicts[i]
		case sv.Verdict == guards.DriftOnUnusedFields:
			meta = &verdicts[i]
		}
	}
	if first == nil || meta == nil {
		t.Fatalf("want a NO_BASELINE and a DRIFT_ON_UNUSED_FIELDS verdict, recorded %d verdicts", len(verdicts))
	}
	// The stream as guard 2 recorded it: its first verdict, and nothing
	// for the _meta change.
	republish(t, w.js, *first, true, func(v *events.SchemaVerdict) { v.GuardVersion = "2" })
	if err := streamOf(t, w.js, "TOOLSENTRY_VERDICTS").DeleteMsg(context.Background(), meta.seq); err != nil {
		t.Fatal(err)
	}
	rep := replay(t, w.js, consumer.ReplayOptions{})
	if got := kinds(rep.Differences); got[consumer.DiffPolicyChanged] != 2 || rep.Tampered() != 0 {
		t.Fatalf("want two policy changes and no tampering, got %s", diffsText(rep.Differences))
	}
	for _, d := range rep.Differences {
		if d.InputSequence == meta.ev.SchemaVerdict.InputSequence && !strings.Contains(d.Reason, "recorded before it was written by another guard version") {
			t.Errorf("the _meta change: %s", diffsText([]consumer.ReplayDifference{d}))
		}
	}

}
