package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// replayRecord runs the live service on a fresh server over the seed's
// silent rename (with a malformed input between) and chain of five, and
// stops it once every input is handled.
func replayRecord(t *testing.T) (url string, js jetstream.JetStream) {
	t.Helper()
	_, url = natstest.RunServer(t)
	nc := natstest.Connect(t, url)
	js = natstest.JetStream(t, url)
	ctx := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).WithContext(testCtx(t, 60*time.Second))
	svc, err := consumer.StartService(ctx, nc, consumer.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := svc.Run(ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	stop := sync.OnceFunc(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("closing the service: %v", err)
		}
		wg.Wait()
	})
	t.Cleanup(stop)

	names := events.Names{}
	at := time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC)
	n := 0
	meta := func() events.Meta {
		n++
		return events.Meta{ID: fmt.Sprintf("replay-cmd-%d", n), Source: "test", Time: at}
	}
	tool := func(schema string) *events.MCPTool {
		return &events.MCPTool{Name: "lookup", Description: "Find a CRM user.", InputSchema: json.RawMessage(schema)}
	}
	settled := func() {
		natstest.Eventually(t, 20*time.Second, "every input handled", func() bool {
			n, err := consumer.Unapplied(ctx, svc.Resources)
			return err == nil && n == 0
		})
	}
	var msgs []events.Message
	add := func(m events.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	add(names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: "crm.lookup", Version: "1",
		Tool: tool(`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}`)}))
	types, err := events.FieldTypesOf([]byte(`{"user_id":"alice@example.com","limit":5}`))
	if err != nil {
		t.Fatal(err)
	}
	add(names.NewInvocation(meta(), events.Invocation{ToolID: "crm.lookup", AgentID: "agent-a", ArgumentTypes: types, Outcome: &events.Outcome{Status: "ok"}}))
	// Each input is handled before the next is published, so that the
	// quality checkpoint a new schema version makes lands right after it:
	// 1 observation, 2 its checkpoint, 3 invocation, 4 broken, 5 the new
	// version, 6 its checkpoint, 7-11 contracts, 12 the workflow.
	for _, m := range msgs {
		publishMsg(t, ctx, js, m)
		settled()
	}
	if _, err := js.Publish(ctx, "toolsentry.telemetry.invocation.crm=2Elookup", []byte(`{"specversion":"1.0","id":"broken"`)); err != nil {
		t.Fatal(err)
	}
	settled()
	msgs = nil
	add(names.NewSchemaObserved(meta(), events.SchemaObserved{ToolID: "crm.lookup", Version: "2",
		Tool: tool(`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}`)}))
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		add(names.NewContract(meta(), events.Contract{ToolID: id, Accuracy: 0.95, Determinism: guards.Deterministic, OutputSchemaHash: "h", ExpectedInputSchemaHash: "h"}))
	}
	add(names.NewWorkflow(meta(), []byte(etlWorkflow(0.95))))
	for _, m := range msgs {
		publishMsg(t, ctx, js, m)
		settled()
	}
	settled()
	stop()
	return url, js
}

func etlWorkflow(requirement float64) string {
	b, _ := json.Marshal(map[string]any{
		"composition_id": "etl", "workflow_quality_requirement": requirement,
		"introduction_of_nondeterminism_acceptable": false,
		"policy":    map[string]any{"require_schema_compatibility": true},
		"structure": map[string]any{"chain": []string{"a", "b", "c", "d", "e"}},
	})
	return string(b)
}

type replayJSON struct {
	Result         string `json:"result"`
	ExitStatus     int    `json:"exit_status"`
	InputsReplayed int    `json:"inputs_replayed"`
	InputsRejected int    `json:"inputs_rejected"`
	Matched        int    `json:"matched"`
	Missing        int    `json:"missing"`
	Differences    []struct {
		Kind      string          `json:"kind"`
		Key       string          `json:"key"`
		Rederived json.RawMessage `json:"rederived"`
	} `json:"differences"`
	WhatIf *struct {
		Changed int `json:"changed"`
	} `json:"what_if"`
}

func replayJSONOf(t *testing.T, out string) replayJSON {
	t.Helper()
	var r replayJSON
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("--json printed more than one line:\n%s", out)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	return r
}

func TestReplayCommand(t *testing.T) {
	url, js := replayRecord(t)
	ctx := testCtx(t, cmdTimeout)

	out, errOut, code := runCtx(ctx, "", "replay", "--nats-url", url)
	if code != 0 {
		t.Fatalf("replay of an untouched record: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"inputs:   12 replayed, 12 compared, 1 rejected as bad input (1 of them in the dead-letter stream), 0 not yet handled by serve",
		"verdicts: 3 recorded, 3 re-derived: 3 matched, 0 mismatched, 0 missing, 0 extra, 0 policy changed",
		"RESULT: every verdict matches",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url, "--json")
	if r := replayJSONOf(t, out); code != 0 || r.Result != "match" || r.ExitStatus != 0 || r.Matched != 3 || r.InputsReplayed != 12 || r.InputsRejected != 1 {
		t.Errorf("--json: exit %d, %+v", code, r)
	}

	// What if etl had required only 70%: a policy change, exit 3.
	file := filepath.Join(t.TempDir(), "etl.json")
	if err := os.WriteFile(file, []byte(etlWorkflow(0.70)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCtx(ctx, "", "replay", "--nats-url", url, "--workflow", file)
	if code != replayExitPolicy || !strings.Contains(out, "WHAT IF (changed)") || !strings.Contains(out, `"verdict":"COMPOSITION_MEETS_QUALITY"`) ||
		!strings.Contains(out, `"verdict":"COMPOSITION_DEGRADED"`) || !strings.Contains(out, "< requirement 95.00%") || !strings.Contains(out, "what-if (--workflow etl): 1 verdicts changed") {
		t.Errorf("--workflow: exit %d\n%s%s", code, out, errOut)
	}

	// A workflow the history never declares changes nothing, and says so.
	nope := filepath.Join(t.TempDir(), "nope.json")
	if err := os.WriteFile(nope, []byte(strings.ReplaceAll(etlWorkflow(0.9), `"etl"`, `"nope"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCtx(ctx, "", "replay", "--nats-url", url, "--workflow", nope)
	if code != 0 || !strings.Contains(out, "what-if: never declared in the history, so unchanged: nope") {
		t.Errorf("--workflow of an undeclared composition: exit %d\n%s%s", code, out, errOut)
	}

	// Delete the drift verdict: missing, exit 1; the window and the key
	// filter that hold it say so too, the others do not.
	verdicts, err := js.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	drift, err := verdicts.GetLastMsgForSubject(ctx, "toolsentry.verdicts.schema.drift_on_used_fields.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := verdicts.DeleteMsg(ctx, drift.Sequence); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url)
	if code != replayExitDifferences || !strings.Contains(out, "MISSING  input 5") || !strings.Contains(out, `re-derived: {"verdict":"DRIFT_ON_USED_FIELDS"`) {
		t.Errorf("deleted verdict: exit %d\n%s", code, out)
	}
	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url, "--tool", "crm.lookup", "--json")
	if r := replayJSONOf(t, out); code != 1 || r.Result != "differences" || r.Missing != 1 || len(r.Differences) != 1 || r.Differences[0].Key != "crm.lookup" {
		t.Errorf("--tool crm.lookup: exit %d, %+v", code, r)
	}
	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url, "--composition", "etl", "--since", "1h")
	if code != 0 || !strings.Contains(out, "1 matched") {
		t.Errorf("--composition etl: exit %d\n%s", code, out)
	}
	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url, "--from-seq", "6")
	if code != 0 || !strings.Contains(out, "compared: sequences 6-12") {
		t.Errorf("--from-seq 6: exit %d\n%s", code, out)
	}

	// Truncated history: refused, unless allowed.
	tele, err := js.Stream(ctx, "TOOLSENTRY_TELEMETRY")
	if err != nil {
		t.Fatal(err)
	}
	if err := tele.Purge(ctx, jetstream.WithPurgeSequence(2)); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runCtx(ctx, "", "replay", "--nats-url", url)
	if code != 1 || !strings.Contains(errOut, "history truncated") || !strings.Contains(errOut, "--allow-truncated") {
		t.Errorf("truncated: exit %d, %s", code, errOut)
	}
	out, _, code = runCtx(ctx, "", "replay", "--nats-url", url, "--allow-truncated")
	if code != 1 || !strings.Contains(out, "WARNING: truncated history: the telemetry starts at sequence 2") {
		t.Errorf("--allow-truncated: exit %d\n%s", code, out)
	}
}

func TestReplayEnvironment(t *testing.T) {
	url, _ := replayRecord(t)
	t.Setenv("TOOLSENTRY_NATS_URL", url)
	t.Setenv("TOOLSENTRY_REPLAY_JSON", "true")
	t.Setenv("TOOLSENTRY_REPLAY_COMPOSITION", "etl")
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "replay")
	if r := replayJSONOf(t, out); code != 0 || r.Matched != 1 {
		t.Errorf("from the environment: exit %d, %+v %s", code, r, errOut)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "not.json")
	noID := filepath.Join(dir, "noid.json")
	if err := os.WriteFile(notJSON, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noID, []byte(`{"workflow_quality_requirement":0.9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--since", "1h", "--from-seq", "3"},
		{"--since", "yesterday"},
		{"--until", "tomorrow"},
		{"--since", "2026-10-03T00:00:00Z", "--until", "2026-10-02T00:00:00Z"},
		{"--workflow", filepath.Join(dir, "missing.json")},
		{"--workflow", notJSON},
		{"--workflow", noID},
		{"--max-differences", "-1"},
		{"--from-seq", "x"},
		{"extra-argument"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"replay", "--nats-url", freeURL(t)}, args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
}

func TestReplayNeedsTheStreams(t *testing.T) {
	_, url := natstest.RunServer(t)
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "replay", "--nats-url", url)
	if code != 1 || !strings.Contains(errOut, "toolsentry serve") {
		t.Errorf("exit %d, %s", code, errOut)
	}
}

func TestReplayHelpNamesEveryFlag(t *testing.T) {
	out, _, code := runCtx(context.Background(), "", "replay", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	fs := []string{"--since", "--until", "--from-seq", "--tool", "--composition", "--workflow", "--allow-truncated", "--max-differences", "--json", "--nats-url", "--prefix", "Example"}
	for _, f := range fs {
		if !strings.Contains(out, f) {
			t.Errorf("help lacks %s", f)
		}
	}
	for _, env := range []string{"SINCE", "UNTIL", "FROM_SEQ", "TOOL", "COMPOSITION", "WORKFLOW", "ALLOW_TRUNCATED", "MAX_DIFFERENCES", "JSON"} {
		if !strings.Contains(out, "TOOLSENTRY_REPLAY_"+env) {
			t.Errorf("help lacks TOOLSENTRY_REPLAY_%s", env)
		}
	}
}
