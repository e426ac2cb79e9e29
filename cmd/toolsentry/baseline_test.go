package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
)

func fp(c string) string { return "sha256:" + strings.Repeat(c, 64) }

func toolVersion(c, version string, seq uint64) core.ToolVersion {
	return core.ToolVersion{
		Fingerprint: fp(c),
		Version:     version,
		Tool:        json.RawMessage(`{"name":"t","inputSchema":{"type":"object"}}`),
		Seq:         seq,
		EventID:     "obs-" + c,
	}
}

// heldRecord is a tool whose drift on used fields is held: baseline a,
// current b.
func heldRecord(tool string) core.BaselineRecord {
	a, b := toolVersion("a", "1", 3), toolVersion("b", "2", 7)
	return core.BaselineRecord{ToolID: tool, Baseline: a, Current: b, Held: true, Known: []core.ToolVersion{a, b}, LastSeq: 7}
}

func settledRecord(tool string) core.BaselineRecord {
	c := toolVersion("c", "", 4)
	return core.BaselineRecord{ToolID: tool, Baseline: c, Current: c, Known: []core.ToolVersion{c}, LastSeq: 4}
}

func putRecord(t *testing.T, ctx context.Context, kv jetstream.KeyValue, rec core.BaselineRecord) uint64 {
	t.Helper()
	key, err := core.Key(rec.ToolID)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func getRecord(t *testing.T, ctx context.Context, kv jetstream.KeyValue, tool string) (core.BaselineRecord, uint64) {
	t.Helper()
	key, _ := core.Key(tool)
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", tool, err)
	}
	var rec core.BaselineRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec, e.Revision()
}

func TestBaselineList(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)

	out, errOut, code := runCtx(ctx, "", "baseline", "list", "--nats-url", srv.url)
	if code != 0 || !strings.Contains(out, "no baselines yet") {
		t.Errorf("empty bucket: exit %d, output %q, stderr %s", code, out, errOut)
	}
	out, _, code = runCtx(ctx, "", "baseline", "list", "--json", "--nats-url", srv.url)
	if code != 0 || out != "[]\n" {
		t.Errorf("empty bucket --json: exit %d, output %q; want []", code, out)
	}

	revHeld := putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	revSettled := putRecord(t, ctx, srv.res.Baselines, settledRecord("fs.read"))
	deleted := putRecord(t, ctx, srv.res.Baselines, settledRecord("gone"))
	key, _ := core.Key("gone")
	if err := srv.res.Baselines.Delete(ctx, key); err != nil || deleted == 0 {
		t.Fatal(err)
	}

	// A later observation that left the record as it was (a match) is in
	// the tool's outcome record; an earlier one changes nothing.
	for tool, seq := range map[string]uint64{"fs.read": 9, "crm.lookup": 5} {
		key, _ := core.Key(tool)
		data, _ := json.Marshal(core.OutcomeRecord{ToolID: tool, ObservedSeq: seq})
		if _, err := srv.res.Outcomes.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}

	out, errOut, code = runCtx(ctx, "", "baseline", "list", "--nats-url", srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "TOOL        BASELINE              CURRENT               HELD  VERSION  LAST SEQ\n" +
		"crm.lookup  sha256:aaaaaaaaaaaa…  sha256:bbbbbbbbbbbb…  held  2        7\n" +
		"fs.read     sha256:cccccccccccc…  (same)                -     -        9\n"
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}

	out, errOut, code = runCtx(ctx, "", "baseline", "list", "--json", "--nats-url", srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []baselineSummary
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	wantJSON := []baselineSummary{
		{ToolID: "crm.lookup", BaselineFingerprint: fp("a"), CurrentFingerprint: fp("b"), Held: true, Version: "2", LastSeq: 7, Revision: revHeld},
		{ToolID: "fs.read", BaselineFingerprint: fp("c"), CurrentFingerprint: fp("c"), LastSeq: 9, Revision: revSettled},
	}
	if d := cmp.Diff(wantJSON, got); d != "" {
		t.Errorf("list --json (-want +got):\n%s", d)
	}
}

func TestBaselineListReportsCorruptRecords(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, settledRecord("fs.read"))
	if _, err := srv.res.Baselines.Put(ctx, "junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCtx(ctx, "", "baseline", "list", "--nats-url", srv.url)
	if code != 1 || !strings.Contains(out, "fs.read") || !strings.Contains(errOut, "key junk: not a baseline record") {
		t.Errorf("exit %d, output %q, stderr %q; want 1, the good row, and the bad key named", code, out, errOut)
	}
}

func TestBaselineShow(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	rec := heldRecord("crm.lookup")
	putRecord(t, ctx, srv.res.Baselines, rec)
	out, errOut, code := runCtx(ctx, "", "baseline", "show", "crm.lookup", "--nats-url", srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "{\n  \"tool_id\": \"crm.lookup\",\n") {
		t.Errorf("want indented JSON, got:\n%s", out)
	}
	var got core.BaselineRecord
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(rec, got, cmp.Comparer(func(a, b json.RawMessage) bool { return string(a) == string(b) || jsonEqual(a, b) })); d != "" {
		t.Errorf("show (-want +got):\n%s", d)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && cmp.Equal(x, y)
}

func TestBaselineAccept(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	out, errOut, code := runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--nats-url", srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "crm.lookup: baseline sha256:aaaaaaaaaaaa… → sha256:bbbbbbbbbbbb… (version 2)\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	got, rev := getRecord(t, ctx, srv.res.Baselines, "crm.lookup")
	want := heldRecord("crm.lookup")
	want.Accept()
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b json.RawMessage) bool { return jsonEqual(a, b) })); d != "" {
		t.Errorf("record after accept (-want +got):\n%s", d)
	}

	// Accepting again finds nothing held and writes nothing.
	out, errOut, code = runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--nats-url", srv.url)
	if code != 0 || out != "crm.lookup: nothing held: the baseline sha256:bbbbbbbbbbbb… is the current version\n" {
		t.Errorf("second accept: exit %d, output %q, stderr %s", code, out, errOut)
	}
	if _, again := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); again != rev {
		t.Errorf("nothing to accept, yet the record was written (revision %d → %d)", rev, again)
	}
}

func TestBaselineAcceptFingerprint(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	rev := putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	_, errOut, code := runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--fingerprint", fp("d"), "--nats-url", srv.url)
	if code != 1 || !strings.Contains(errOut, "the current version is "+fp("b")+", not "+fp("d")) {
		t.Errorf("exit %d, stderr %q; want a refusal naming both fingerprints", code, errOut)
	}
	if rec, now := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); now != rev || !rec.Held {
		t.Errorf("a refused accept wrote the record")
	}
	_, errOut, code = runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--fingerprint", fp("b"), "--nats-url", srv.url)
	if rec, _ := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); code != 0 || rec.Held || rec.Baseline.Fingerprint != fp("b") {
		t.Errorf("accept --fingerprint of the current version: exit %d, stderr %s, record %+v", code, errOut, rec)
	}
}

// racingKV is a real bucket on which another writer (as serve would) writes
// the record right after accept reads it, for the first `races` reads.
type racingKV struct {
	jetstream.KeyValue
	t     *testing.T
	mu    sync.Mutex
	races int
	write func(rec *core.BaselineRecord)
}

func (k *racingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil || k.races == 0 {
		return e, err
	}
	k.races--
	var rec core.BaselineRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		k.t.Error(err)
	}
	k.write(&rec)
	data, _ := json.Marshal(rec)
	if _, err := k.KeyValue.Update(ctx, key, data, e.Revision()); err != nil {
		k.t.Errorf("concurrent writer: %v", err)
	}
	return e, nil
}

func TestBaselineAcceptRetriesOnConflict(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	rev := putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	// serve applies a re-observation of the same current version meanwhile.
	kv := &racingKV{KeyValue: srv.res.Baselines, t: t, races: 1, write: func(r *core.BaselineRecord) { r.LastSeq = 9 }}
	msg, err := acceptBaseline(ctx, kv, "crm.lookup", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "→ sha256:bbbbbbbbbbbb…") {
		t.Errorf("message %q", msg)
	}
	got, now := getRecord(t, ctx, srv.res.Baselines, "crm.lookup")
	if now != rev+2 {
		t.Errorf("revision %d, want %d: the concurrent write and then accept's", now, rev+2)
	}
	if got.Held || got.Baseline.Fingerprint != fp("b") || got.LastSeq != 9 {
		t.Errorf("record %+v: want accepted (baseline b, not held) with the concurrent writer's last_seq 9 kept", got)
	}
}

func TestBaselineAcceptRefusesWhenTheCurrentVersionChanges(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	// serve observes yet another version while the operator accepts.
	kv := &racingKV{KeyValue: srv.res.Baselines, t: t, races: 1, write: func(r *core.BaselineRecord) {
		r.Current, r.LastSeq = toolVersion("e", "3", 11), 11
	}}
	_, err := acceptBaseline(ctx, kv, "crm.lookup", "")
	if err == nil || !strings.Contains(err.Error(), "changed from sha256:bbbbbbbbbbbb… to sha256:eeeeeeeeeeee… while accepting") {
		t.Fatalf("err %v; want a refusal naming both versions", err)
	}
	if got, _ := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); !got.Held || got.Baseline.Fingerprint != fp("a") || got.Current.Fingerprint != fp("e") {
		t.Errorf("record %+v: want the concurrent writer's, not accepted", got)
	}
}

func TestBaselineAcceptGivesUp(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	kv := &racingKV{KeyValue: srv.res.Baselines, t: t, races: maxAcceptAttempts, write: func(r *core.BaselineRecord) { r.LastSeq++ }}
	_, err := acceptBaseline(ctx, kv, "crm.lookup", "")
	if err == nil || !strings.Contains(err.Error(), "changed under each of 5 attempts") {
		t.Fatalf("err %v; want giving up after %d attempts", err, maxAcceptAttempts)
	}
	if got, _ := getRecord(t, ctx, srv.res.Baselines, "crm.lookup"); !got.Held {
		t.Error("accepted despite every attempt conflicting")
	}
}

func TestBaselineReset(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))

	_, errOut, code := runCtx(ctx, "", "baseline", "reset", "crm.lookup", "--nats-url", srv.url)
	if code != 2 || !strings.Contains(errOut, "add --yes") {
		t.Errorf("reset without --yes: exit %d, stderr %q; want 2 and the advice", code, errOut)
	}
	getRecord(t, ctx, srv.res.Baselines, "crm.lookup") // still there

	out, errOut, code := runCtx(ctx, "", "baseline", "reset", "--yes", "crm.lookup", "--nats-url", srv.url)
	if code != 0 || out != "crm.lookup: baseline sha256:aaaaaaaaaaaa… deleted; the next observation becomes the baseline\n" {
		t.Errorf("reset --yes: exit %d, output %q, stderr %s", code, out, errOut)
	}
	key, _ := core.Key("crm.lookup")
	if _, err := srv.res.Baselines.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after reset, get: %v; want key not found", err)
	}
}

func TestBaselineMissingTool(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	putRecord(t, ctx, srv.res.Baselines, heldRecord("crm.lookup"))
	for _, args := range [][]string{{"show", "nope"}, {"accept", "nope"}, {"reset", "nope", "--yes"}} {
		_, errOut, code := runCtx(ctx, "", append([]string{"baseline", "--nats-url", srv.url}, args...)...)
		if code != 1 || errOut != "toolsentry: no baseline for tool nope\n" {
			t.Errorf("%q: exit %d, stderr %q; want 1 and no baseline for tool nope", args, code, errOut)
		}
	}
}

func TestBaselineUsageErrors(t *testing.T) {
	url := freeURL(t) // usage errors are found before connecting
	for _, args := range [][]string{
		{},
		{"frob"},
		{"list", "extra"},
		{"show"},
		{"accept", "a", "b"},
		{"show", "x", "--json"},
		{"list", "--yes"},
		{"show", "x", "--fingerprint", "sha256:x"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"baseline", "--nats-url", url}, args...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %s", args, code, errOut)
		}
	}
}

func TestShortFingerprint(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "-",
		fp("a"):                      "sha256:aaaaaaaaaaaa…",
		"sha256:abc":                 "sha256:abc",
		"0123456789abcdef0123456789": "0123456789ab…",
	} {
		if got := shortFingerprint(in); got != want {
			t.Errorf("shortFingerprint(%q) = %q, want %q", in, got, want)
		}
	}
}
