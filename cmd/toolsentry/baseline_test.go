package main

import (
	"context"
	"encoding/json"
	"strings"
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
		{"list", "--reason", "why"},
		{"accept", "x", "--wait", "-1s"},
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
