package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// batchRig is one embedded server with the resources provisioned and a
// Processor over its store, driven directly (no engine) unless a test
// starts one.
type batchRig struct {
	t     testing.TB
	ctx   context.Context
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	res   *consumer.Resources
	opts  consumer.ProcessorOptions
	store *consumer.Store
	proc  *consumer.Processor
}

func newBatchRig(t testing.TB, opts consumer.ProcessorOptions) *batchRig {
	t.Helper()
	r := &batchRig{t: t, ctx: testContext(t), opts: opts}
	_, r.url = natstest.RunServer(t)
	r.nc = natstest.Connect(t, r.url)
	r.js = natstest.JetStream(t, r.url)
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	res, err := consumer.Provision(ctx, r.js, testConfig())
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	r.res = res
	r.reopen()
	return r
}

// reopen starts a new store and processor on the same server, as a
// restarted worker has them: nothing in memory.
func (r *batchRig) reopen() {
	r.t.Helper()
	if r.store != nil {
		r.store.Close()
	}
	store, err := consumer.OpenStore(r.ctx, r.res, consumer.ViewOptions{})
	if err != nil {
		r.t.Fatalf("OpenStore: %v", err)
	}
	r.t.Cleanup(store.Close)
	pub, err := publisher.New(r.nc, publisher.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.store = store
	r.proc = consumer.NewProcessor(store, pub, r.opts)
}

// publishAll stores the messages in order.
func (r *batchRig) publishAll(msgs ...events.Message) {
	r.t.Helper()
	for _, m := range msgs {
		if _, err := r.js.PublishMsg(r.ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// publishMix stores a bench mix's events in order, asynchronously.
func (r *batchRig) publishMix(mix *benchmix.Mix) {
	r.t.Helper()
	var acks []jetstream.PubAckFuture
	for _, ev := range mix.All() {
		f, err := r.js.PublishMsgAsync(&nats.Msg{Subject: ev.Subject, Header: ev.Header, Data: ev.Data})
		if err != nil {
			r.t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			r.t.Fatal(err)
		case <-time.After(10 * time.Second):
			r.t.Fatal("no PubAck")
		}
	}
}

// backlog reads the telemetry stream, in order, as the engine hands it.
func (r *batchRig) backlog() []*engine.Message {
	r.t.Helper()
	info, err := r.res.Telemetry.Info(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*engine.Message
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := r.res.Telemetry.GetMsg(r.ctx, seq)
		if err != nil {
			r.t.Fatalf("reading telemetry %d: %v", seq, err)
		}
		m := &engine.Message{Subject: raw.Subject, Header: raw.Header, Data: raw.Data, Stream: r.res.Config.TelemetryStream(),
			StreamSeq: raw.Sequence, Timestamp: raw.Time, Attempt: 1}
		m.Key = consumer.EngineKey(m)
		out = append(out, m)
	}
	return out
}

// handleEach applies msgs with Handle one by one, as the old engine does,
// key by key in the order of byKey (the order of HandleBatch calls in
// handleBatches: the order across keys is the engine's choice, and it
// orders what the processor publishes); it returns how many were bad
// input.
func (r *batchRig) handleEach(msgs []*engine.Message) int {
	r.t.Helper()
	keys, of := byKey(msgs)
	bad := 0
	for _, k := range keys {
		for _, m := range of[k] {
			err := r.proc.Handle(r.ctx, &consumer.Message{Subject: m.Subject, Header: m.Header, Data: m.Data, Stream: m.Stream,
				StreamSeq: m.StreamSeq, Timestamp: m.Timestamp, Key: m.Key, Attempt: 1})
			switch {
			case errors.Is(err, consumer.ErrPermanent):
				bad++
			case err != nil:
				r.t.Fatalf("Handle %d: %v", m.StreamSeq, err)
			}
		}
	}
	return bad
}

// drain applies the telemetry stream with apply in rounds: first what is
// stored, then what that round published (quality checkpoints), until a
// round publishes nothing. It returns how many were bad input.
func (r *batchRig) drain(apply func([]*engine.Message) int) int {
	r.t.Helper()
	bad, done := 0, 0
	for {
		msgs := r.backlog()
		if len(msgs) == done {
			return bad
		}
		bad += apply(msgs[done:])
		done = len(msgs)
	}
}

// byKey splits msgs into each key's messages, in stream order, keys in the
// order they first appear.
func byKey(msgs []*engine.Message) (keys []string, of map[string][]*engine.Message) {
	of = map[string][]*engine.Message{}
	for _, m := range msgs {
		if _, ok := of[m.Key]; !ok {
			keys = append(keys, m.Key)
		}
		of[m.Key] = append(of[m.Key], m)
	}
	return keys, of
}

// handleBatches applies msgs with one HandleBatch call per key; it returns
// how many were bad input.
func (r *batchRig) handleBatches(msgs []*engine.Message) int {
	r.t.Helper()
	keys, of := byKey(msgs)
	bad := 0
	for _, k := range keys {
		res := r.proc.HandleBatch(r.ctx, k, of[k])
		if res != nil && len(res) != len(of[k]) {
			r.t.Fatalf("HandleBatch %s: %d results for %d messages", k, len(res), len(of[k]))
		}
		for i, err := range res {
			switch {
			case errors.Is(err, engine.ErrPermanent):
				bad++
			case err != nil:
				r.t.Fatalf("HandleBatch %s, message %d: %v", k, of[k][i].StreamSeq, err)
			}
		}
	}
	return bad
}

// stateBuckets are the processor's state buckets.
func (r *batchRig) stateBuckets() []jetstream.KeyValue {
	return []jetstream.KeyValue{r.res.Baselines, r.res.Usage, r.res.Quality, r.res.Outcomes, r.res.Workflows}
}

// kvWrites is the number of writes ever stored in the state buckets.
func (r *batchRig) kvWrites() uint64 {
	r.t.Helper()
	var n uint64
	for _, kv := range r.stateBuckets() {
		s, err := r.js.Stream(r.ctx, "KV_"+kv.Bucket())
		if err != nil {
			r.t.Fatal(err)
		}
		info, err := s.Info(r.ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		n += info.State.LastSeq
	}
	return n
}

// state returns every state record, bucket/key → value, and its revision.
func (r *batchRig) state() (map[string]string, map[string]uint64) {
	r.t.Helper()
	vals, revs := map[string]string{}, map[string]uint64{}
	for _, kv := range r.stateBuckets() {
		keys, err := kv.Keys(r.ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		if err != nil {
			r.t.Fatal(err)
		}
		for _, k := range keys {
			e, err := kv.Get(r.ctx, k)
			if err != nil {
				r.t.Fatal(err)
			}
			vals[kv.Bucket()+"/"+k] = string(e.Value())
			revs[kv.Bucket()+"/"+k] = e.Revision()
		}
	}
	return vals, revs
}

// stored returns the messages of a stream: Nats-Msg-Id → data, and how
// many there are.
func (r *batchRig) stored(stream jetstream.Stream) (map[string]string, int) {
	r.t.Helper()
	info, err := stream.Info(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := stream.GetMsg(r.ctx, seq)
		if err != nil {
			r.t.Fatal(err)
		}
		out[raw.Header.Get(jetstream.MsgIDHeader)] = string(raw.Data)
	}
	return out, int(info.State.Msgs)
}

func (r *batchRig) flush() {
	r.t.Helper()
	if _, err := r.store.Flush(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// telemetryOf are the rig's telemetry messages after the first n (what the
// processor published: quality checkpoints), Nats-Msg-Id → data.
func (r *batchRig) telemetryAfter(n int) map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, m := range r.backlog()[n:] {
		out[m.Header.Get(jetstream.MsgIDHeader)] = string(m.Data)
	}
	return out
}

func diffMaps(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s missing", what, k)
		} else if g != w {
			t.Errorf("%s: %s differs:\nper message %s\nbatch       %s", what, k, w, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s extra", what, k)
		}
	}
}

// noCheckpoints keeps every outcome count in memory, so that no quality
// checkpoint is published: the per-message path and the batches then read
// the very same stream.
var noCheckpoints = consumer.ProcessorOptions{Core: core.Options{QualityEvery: 1 << 40}}

// TestHandleBatchGivesThePerMessageVerdictsAndState: the bench mix applied
// a key at a time in one HandleBatch per key gives exactly the verdicts
// (ids and bytes) and the state of Handle per message in stream order,
// with fewer state writes.
func TestHandleBatchGivesThePerMessageVerdictsAndState(t *testing.T) {
	mix, err := benchmix.New(benchmix.Options{Events: 1200, Tools: 12, Agents: 6})
	if err != nil {
		t.Fatal(err)
	}
	each, batch := newBatchRig(t, noCheckpoints), newBatchRig(t, noCheckpoints)
	each.publishMix(mix)
	batch.publishMix(mix)
	eachMsgs, batchMsgs := each.backlog(), batch.backlog()
	if len(eachMsgs) != mix.Len() || len(batchMsgs) != mix.Len() {
		t.Fatalf("backlogs of %d and %d messages, want %d", len(eachMsgs), len(batchMsgs), mix.Len())
	}
	w0 := batch.kvWrites()
	if bad := each.drain(each.handleEach); bad != 0 {
		t.Fatalf("%d bad inputs in the mix", bad)
	}
	if bad := batch.drain(batch.handleBatches); bad != 0 {
		t.Fatalf("%d bad inputs in the mix", bad)
	}
	eachWrites, batchWrites := each.kvWrites()-w0, batch.kvWrites()-w0
	each.flush()
	batch.flush()

	wantV, nw := each.stored(each.res.Verdicts)
	gotV, ng := batch.stored(batch.res.Verdicts)
	if nw == 0 || nw != ng {
		t.Fatalf("%d verdicts per message, %d in batches", nw, ng)
	}
	diffMaps(t, "verdict", wantV, gotV)
	wantS, _ := each.state()
	gotS, _ := batch.state()
	diffMaps(t, "state", wantS, gotS)
	diffMaps(t, "quality checkpoint", each.telemetryAfter(mix.Len()), batch.telemetryAfter(mix.Len()))
	t.Logf("%d verdicts; state writes: %d per message, %d in batches", nw, eachWrites, batchWrites)
	if batchWrites >= eachWrites {
		t.Errorf("batches wrote the state %d times, per message %d: want fewer", batchWrites, eachWrites)
	}
}

const (
	crmTool = "crm.lookup"
	// idOnly and idLimit are calls within crmV1's schema: no drift.
	idOnly  = `{"user_id":"u"}`
	idLimit = `{"user_id":"u","limit":5}`
)

// growingCalls are calls of three agents, each first with the required
// field only, then with the optional one: every agent's usage record grows
// twice.
func growingCalls(t *testing.T, n int) []events.Message {
	var out []events.Message
	for i := range n {
		args := idOnly
		if i >= 3 {
			args = idLimit
		}
		out = append(out, invocation(t, crmTool, fmt.Sprintf("agent-%d", i%3), args))
	}
	return out
}

// TestHandleBatchWritesEachRecordOnce: a batch of calls that grow three
// agents' usage records and pass two quality checkpoints writes each of
// the four records it changes once; per message, each is written at
// every change. The checkpoints are the per-message ones.
func TestHandleBatchWritesEachRecordOnce(t *testing.T) {
	opts := consumer.ProcessorOptions{Core: core.Options{QualityEvery: 5}}
	each, batch := newBatchRig(t, opts), newBatchRig(t, opts)
	obs := observation(t, crmTool, crmV1)
	calls := growingCalls(t, 12)
	for _, r := range []*batchRig{each, batch} {
		r.publishAll(obs)
		r.publishAll(calls...)
	}
	eachMsgs, batchMsgs := each.backlog(), batch.backlog()
	each.handleEach(eachMsgs)
	batch.handleBatches(batchMsgs[:1]) // the baseline, and its verdict
	_, before := batch.state()
	w0 := batch.kvWrites()
	if res := batch.proc.HandleBatch(batch.ctx, batchMsgs[1].Key, batchMsgs[1:]); res != nil {
		t.Fatalf("HandleBatch: %v", res)
	}
	writes := batch.kvWrites() - w0
	_, after := batch.state()
	changed := 0
	for k, rev := range after {
		if before[k] != rev {
			changed++
		}
	}
	if changed != 4 || writes != 4 {
		t.Errorf("the batch wrote %d times and changed %d records; want 4 and 4 (3 usage records, 1 outcome record)", writes, changed)
	}
	each.flush()
	batch.flush()
	eachS, _ := each.state()
	batchS, _ := batch.state()
	diffMaps(t, "state", eachS, batchS)
	diffMaps(t, "quality checkpoint", each.telemetryAfter(len(eachMsgs)), batch.telemetryAfter(len(batchMsgs)))
	if n := len(batch.telemetryAfter(len(batchMsgs))); n != 3 {
		t.Errorf("%d quality checkpoints, want 3 (the new version's, then 12 outcomes, every 5)", n)
	}
	if eachW := each.kvWrites(); eachW <= batch.kvWrites() {
		t.Errorf("per message %d state writes, in batches %d: want more", eachW, batch.kvWrites())
	} else {
		t.Logf("state writes: %d per message, %d with the calls in one batch", eachW, batch.kvWrites())
	}
}

// TestHandleBatchBadInputIsThatMessageAlone: in one batch, a message that
// is not a CloudEvent and a tool definition the guards refuse are
// permanent with their reasons; the calls around them are applied.
func TestHandleBatchBadInputIsThatMessageAlone(t *testing.T) {
	r := newBatchRig(t, consumer.ProcessorOptions{})
	r.publishAll(observation(t, crmTool, crmV1), invocation(t, crmTool, "agent-a", idOnly))
	subj, err := names.Telemetry(events.KindInvocation, crmTool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.js.Publish(r.ctx, subj, []byte(`{"specversion":"1.0","id":"broken"`)); err != nil {
		t.Fatal(err)
	}
	badTool, err := names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: crmTool, Version: "2",
		Tool: &events.MCPTool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object","properties":{"user_id":{"type":7}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	r.publishAll(badTool, invocation(t, crmTool, "agent-a", idLimit))
	msgs := r.backlog()
	if len(msgs) != 5 {
		t.Fatalf("%d messages", len(msgs))
	}
	res := r.proc.HandleBatch(r.ctx, msgs[0].Key, msgs)
	if len(res) != 5 {
		t.Fatalf("results %v", res)
	}
	for i, want := range []string{"", "", string(events.ReasonNotCloudEvent), string(events.ReasonInvalidInput), ""} {
		var pe *engine.PermanentError
		switch {
		case want == "" && res[i] != nil:
			t.Errorf("message %d: %v, want applied", i, res[i])
		case want != "" && !errors.As(res[i], &pe):
			t.Errorf("message %d: %v, want a permanent error", i, res[i])
		case want != "" && (pe.Reason != want || !errors.Is(res[i], engine.ErrPermanent)):
			t.Errorf("message %d: reason %q (%v), want %q", i, pe.Reason, res[i], want)
		}
	}
	// Both calls were applied: the usage record has the optional field
	// of the second, and the bad observation changed no baseline.
	e, err := r.res.Usage.Get(r.ctx, mustKey(t, crmTool, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	var u core.UsageRecord
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Input["limit"]; !ok {
		t.Errorf("usage %s lacks the second call's field", e.Value())
	}
	if _, n := r.stored(r.res.Verdicts); n != 1 {
		t.Errorf("%d verdicts, want NO_BASELINE alone", n)
	}
}

func mustKey(t *testing.T, ids ...string) string {
	t.Helper()
	k, err := core.Key(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestHandleBatchAgainChangesNothing: a batch handed again after a restart
// (applied, checkpoint not committed) writes no state and publishes only
// duplicates.
func TestHandleBatchAgainChangesNothing(t *testing.T) {
	r := newBatchRig(t, consumer.ProcessorOptions{Core: core.Options{QualityEvery: 5}})
	r.publishAll(observation(t, crmTool, crmV1))
	r.publishAll(growingCalls(t, 12)...)
	r.publishAll(observation(t, crmTool, crmRenamed), invocation(t, crmTool, "agent-0", idLimit))
	msgs := r.backlog()
	if res := r.proc.HandleBatch(r.ctx, msgs[0].Key, msgs); res != nil {
		t.Fatalf("HandleBatch: %v", res)
	}
	r.flush()
	verdicts, nv := r.stored(r.res.Verdicts)
	telemetry := len(r.backlog())
	writes := r.kvWrites()
	state, _ := r.state()
	if nv < 4 {
		t.Fatalf("%d verdicts, want NO_BASELINE and a drift verdict per agent", nv)
	}
	for _, restart := range []bool{false, true} {
		if restart {
			r.reopen()
		}
		if res := r.proc.HandleBatch(r.ctx, msgs[0].Key, msgs); res != nil {
			t.Fatalf("HandleBatch again (restart %v): %v", restart, res)
		}
		r.flush()
		if w := r.kvWrites(); w != writes {
			t.Errorf("restart %v: %d state writes", restart, w-writes)
		}
		again, n := r.stored(r.res.Verdicts)
		if n != nv {
			t.Errorf("restart %v: %d verdicts stored, want %d", restart, n, nv)
		}
		diffMaps(t, "verdict", verdicts, again)
		if n := len(r.backlog()); n != telemetry {
			t.Errorf("restart %v: %d more telemetry messages", restart, n-telemetry)
		}
		now, _ := r.state()
		diffMaps(t, "state", state, now)
	}
}

// conflictingSigner, once armed, adds 100 calls to the tool's stored
// outcome record behind the processor's back while it publishes its first
// verdict: the batch's write of that record then conflicts.
type conflictingSigner struct {
	kv    jetstream.KeyValue
	key   string
	armed atomic.Bool
	calls atomic.Int32
}

func (s *conflictingSigner) Sign(m events.Message) (events.Message, error) {
	if !s.armed.Load() {
		return m, nil
	}
	if s.calls.Add(1) == 1 {
		ctx := context.Background()
		e, err := s.kv.Get(ctx, s.key)
		if err != nil {
			return events.Message{}, err
		}
		var o core.OutcomeRecord
		if err := json.Unmarshal(e.Value(), &o); err != nil {
			return events.Message{}, err
		}
		o.Calls += 100
		o.Successes += 100
		data, _ := json.Marshal(o)
		if _, err := s.kv.Update(ctx, s.key, data, e.Revision()); err != nil {
			return events.Message{}, err
		}
	}
	return m, nil
}

// TestHandleBatchConflictAppliesTheBatchAgain: a batch of two calls (one
// commit: the usage records) and the tool's rename (a commit of its own:
// two drift verdicts, the chain head, the baseline). Another writer adds
// 100 calls to the tool's outcome record meanwhile, so the second commit
// conflicts after the first was stored; the whole batch is applied again
// on the fresh state: the calls count on top of the 100, the verdicts are
// published again as duplicates, and the chain head is the last verdict's.
func TestHandleBatchConflictAppliesTheBatchAgain(t *testing.T) {
	signer := &conflictingSigner{}
	r := newBatchRig(t, consumer.ProcessorOptions{Signer: signer})
	signer.kv, signer.key = r.res.Outcomes, mustKey(t, crmTool)
	r.publishAll(observation(t, crmTool, crmV1))
	if bad := r.handleBatches(r.backlog()); bad != 0 {
		t.Fatal("the first observation is bad input")
	}
	r.publishAll(invocation(t, crmTool, "agent-a", idOnly), invocation(t, crmTool, "agent-b", idOnly), observation(t, crmTool, crmRenamed))
	all := r.backlog()
	msgs := all[len(all)-3:] // after the observation and its quality checkpoint
	signer.armed.Store(true)
	if res := r.proc.HandleBatch(r.ctx, msgs[0].Key, msgs); res != nil {
		t.Fatalf("HandleBatch: %v", res)
	}
	if n := signer.calls.Load(); n != 4 {
		t.Errorf("%d verdicts signed, want 4 (two, and again once)", n)
	}
	verdicts := streamMessages(t, r.js, "TOOLSENTRY_VERDICTS")
	if len(verdicts) != 3 {
		t.Fatalf("%d verdicts stored, want NO_BASELINE and two drift verdicts", len(verdicts))
	}
	r.flush()
	e, err := r.res.Outcomes.Get(r.ctx, signer.key)
	if err != nil {
		t.Fatal(err)
	}
	var o core.OutcomeRecord
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		t.Fatal(err)
	}
	lastDigest, err := events.VerdictDigest(verdicts[2].Data())
	if err != nil {
		t.Fatal(err)
	}
	if o.Calls != 102 || o.LastSeq != msgs[1].StreamSeq || o.ChainSeq != msgs[2].StreamSeq || o.Chain != lastDigest {
		t.Errorf("outcomes %s, want 102 calls through %d, the chain head at %d (%s)", e.Value(), msgs[1].StreamSeq, msgs[2].StreamSeq, lastDigest)
	}
	b, err := r.res.Baselines.Get(r.ctx, mustKey(t, crmTool))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Value(), []byte(`"held":true`)) {
		t.Errorf("baseline %s: want the drift held", b.Value())
	}
}

// outcomeCalls are n calls of one agent, every third one failed.
func outcomeCalls(t *testing.T, n int) []events.Message {
	var out []events.Message
	for i := range n {
		ft, err := events.FieldTypesOf([]byte(idOnly))
		if err != nil {
			t.Fatal(err)
		}
		status := "ok"
		if i%3 == 2 {
			status = "error"
		}
		m, err := names.NewInvocation(meta(), events.Invocation{ToolID: crmTool, AgentID: "agent-a", ArgumentTypes: ft, Outcome: &events.Outcome{Status: status}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestHandleBatchDeferredOutcomesAreRebuilt: outcome counts of a batch
// stay in memory (deferred); after a crash, the next batch rebuilds them
// from the stream up to its first input and counts its own, so the
// stored counts are every call's, and the checkpoints are the per-message
// path's.
func TestHandleBatchDeferredOutcomesAreRebuilt(t *testing.T) {
	opts := consumer.ProcessorOptions{Core: core.Options{QualityEvery: 7}}
	each, batch := newBatchRig(t, opts), newBatchRig(t, opts)
	obs, calls := observation(t, crmTool, crmV1), outcomeCalls(t, 20)
	for _, r := range []*batchRig{each, batch} {
		r.publishAll(obs)
		r.publishAll(calls...)
	}
	msgs := batch.backlog()
	each.handleEach(each.backlog())
	each.flush()

	// 1 observation and 5 calls, then a crash: their counts were only in
	// memory.
	if res := batch.proc.HandleBatch(batch.ctx, msgs[0].Key, msgs[:6]); res != nil {
		t.Fatalf("HandleBatch: %v", res)
	}
	if n := batch.store.PendingOutcomes(); n != 1 {
		t.Errorf("%d tools with counts in memory, want 1", n)
	}
	batch.reopen()
	if res := batch.proc.HandleBatch(batch.ctx, msgs[6].Key, msgs[6:]); res != nil {
		t.Fatalf("HandleBatch after the crash: %v", res)
	}
	batch.flush()
	e, err := batch.res.Outcomes.Get(batch.ctx, mustKey(t, crmTool))
	if err != nil {
		t.Fatal(err)
	}
	var o core.OutcomeRecord
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		t.Fatal(err)
	}
	if o.Calls != 20 || o.Successes != 14 || o.LastSeq != msgs[len(msgs)-1].StreamSeq {
		t.Errorf("outcomes %+v, want 20 calls, 14 successes, through %d", o, msgs[len(msgs)-1].StreamSeq)
	}
	eachS, _ := each.state()
	batchS, _ := batch.state()
	diffMaps(t, "state", eachS, batchS)
	diffMaps(t, "quality checkpoint", each.telemetryAfter(len(msgs)), batch.telemetryAfter(len(msgs)))
	if n := len(batch.telemetryAfter(len(msgs))); n != 3 {
		t.Errorf("%d quality checkpoints, want 3 (the new version's, then 20 outcomes, every 7)", n)
	}
}

// memCheckpointer is an in-memory engine.Checkpointer.
type memCheckpointer struct {
	mu   sync.Mutex
	cp   uint64
	lost chan struct{}
}

func (c *memCheckpointer) Checkpoint() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cp
}

func (c *memCheckpointer) Commit(_ context.Context, cp uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cp = cp
	return nil
}

func (c *memCheckpointer) Lost() <-chan struct{} { return c.lost }

// TestEngineRunsTheProcessor: the batch engine with the Processor as its
// handler drains a backlog with a malformed message in it: the verdicts
// and state of the per-message path, the bad message dead-lettered with
// its reason, and the checkpoint past the end.
func TestEngineRunsTheProcessor(t *testing.T) {
	mix, err := benchmix.New(benchmix.Options{Events: 1500, Tools: 15, Agents: 8})
	if err != nil {
		t.Fatal(err)
	}
	each, batch := newBatchRig(t, noCheckpoints), newBatchRig(t, noCheckpoints)
	subj, err := names.Telemetry(events.KindInvocation, "tool-3")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*batchRig{each, batch} {
		r.publishMix(mix)
		if _, err := r.js.Publish(r.ctx, subj, []byte(`not json`)); err != nil {
			t.Fatal(err)
		}
	}
	if bad := each.drain(each.handleEach); bad != 1 {
		t.Fatalf("%d bad inputs, want 1", bad)
	}
	cp := &memCheckpointer{lost: make(chan struct{})}
	e, err := engine.New(batch.js, engine.Source{Stream: batch.res.Config.TelemetryStream()}, cp, batch.proc, engine.Options{
		Key: consumer.EngineKey, Workers: 8, BatchSize: 256, BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		DeadLetter: func(_ *engine.Message, reason string) string { return batch.res.Config.DeadLetterSubject(reason) },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(batch.ctx) }()
	last := uint64(mix.Len() + 1)
	natstest.Eventually(t, 30*time.Second, "the engine applied the backlog", func() bool { return e.Stats().Checkpoint > last })
	// The backlog's quality checkpoints were published before the backlog
	// counted as applied: now the stream ends with them.
	last = uint64(len(batch.backlog()))
	natstest.Eventually(t, 30*time.Second, "the engine applied the checkpoints", func() bool { return e.Stats().Checkpoint > last })
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := cp.Checkpoint(); got != last+1 {
		t.Errorf("committed checkpoint %d, want %d", got, last+1)
	}
	if s := e.Stats(); s.DeadLetters != 1 || s.Retries != 0 {
		t.Errorf("stats %+v, want 1 dead letter and no retries", s)
	}
	dead := streamMessages(t, batch.js, "TOOLSENTRY_DLQ")
	if len(dead) != 1 || dead[0].Headers().Get(engine.HeaderDeadLetterReason) != string(events.ReasonNotCloudEvent) {
		t.Fatalf("dead letters %d, want the malformed message as %s", len(dead), events.ReasonNotCloudEvent)
	}
	// The composition lane reads the quality checkpoints that the tool
	// lanes publish in the engine's order across keys, so only the tool
	// lanes' verdicts and records are compared byte for byte.
	each.flush()
	batch.flush()
	wantV, gotV := each.toolVerdicts(), batch.toolVerdicts()
	if len(wantV) == 0 {
		t.Fatal("no schema verdicts")
	}
	diffMaps(t, "schema verdict", wantV, gotV)
	wantS, _ := each.state()
	gotS, _ := batch.state()
	for k := range wantS {
		if !toolLaneRecord(k) {
			delete(wantS, k)
		}
	}
	for k := range gotS {
		if !toolLaneRecord(k) {
			delete(gotS, k)
		}
	}
	diffMaps(t, "tool lane state", wantS, gotS)
}

// toolVerdicts are the schema verdicts (the tool lanes'), id → data.
func (r *batchRig) toolVerdicts() map[string]string {
	r.t.Helper()
	info, err := r.res.Verdicts.Info(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := r.res.Verdicts.GetMsg(r.ctx, seq)
		if err != nil {
			r.t.Fatal(err)
		}
		if strings.Contains(raw.Subject, ".verdicts.schema.") {
			out[raw.Header.Get(jetstream.MsgIDHeader)] = string(raw.Data)
		}
	}
	return out
}

// toolLaneRecord reports whether a state key (bucket/key) is a tool lane's.
func toolLaneRecord(k string) bool {
	return strings.Contains(k, "-baselines/") || strings.Contains(k, "-usage/") || strings.Contains(k, "-outcomes/")
}

// BenchmarkProcessorBatch applies one bench mix backlog per iteration on a
// fresh server, the keys in parallel on 8 goroutines: mode=handle with
// Handle per message, mode=batch with HandleBatch per key (up to 512
// messages a call), as the batch engine calls it.
func BenchmarkProcessorBatch(b *testing.B) {
	const events, workers, keyBatch = 20000, 8, 512
	mix, err := benchmix.New(benchmix.Options{Events: events})
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"handle", "batch"} {
		b.Run("mode="+mode, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				r := newBatchRig(b, consumer.ProcessorOptions{})
				r.publishMix(mix)
				keys, of := byKey(r.backlog())
				b.StartTimer()
				start := time.Now()
				work := make(chan string)
				var wg sync.WaitGroup
				var failed atomic.Int64
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range work {
							msgs := of[k]
							if mode == "handle" {
								for _, m := range msgs {
									if err := r.proc.Handle(r.ctx, &consumer.Message{Subject: m.Subject, Header: m.Header, Data: m.Data,
										Stream: m.Stream, StreamSeq: m.StreamSeq, Key: k}); err != nil {
										failed.Add(1)
									}
								}
								continue
							}
							for chunk := range slices.Chunk(msgs, keyBatch) {
								for _, err := range r.proc.HandleBatch(r.ctx, k, chunk) {
									if err != nil {
										failed.Add(1)
									}
								}
							}
						}
					}()
				}
				for _, k := range keys {
					work <- k
				}
				close(work)
				wg.Wait()
				total += time.Since(start)
				b.StopTimer()
				if n := failed.Load(); n != 0 {
					b.Fatalf("%d inputs failed", n)
				}
				r.store.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}
