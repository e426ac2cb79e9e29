package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

var verdictTime = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func schemaVerdict(t *testing.T, names events.Names, verdict guards.SchemaVerdict, tool, agent, input string) events.Message {
	t.Helper()
	v := events.SchemaVerdict{
		Verdict:             verdict,
		Directive:           "PROCEED: Schema matches baseline.",
		ManifestDigest:      strings.Repeat("ab", 32),
		ToolID:              tool,
		AgentID:             agent,
		Version:             "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64),
		CurrentFingerprint:  "sha256:" + strings.Repeat("b", 64),
		Changes:             json.RawMessage(`[]`),
		Affected:            json.RawMessage(`[]`),
		Migration:           json.RawMessage(`{"steps":[],"blocked":[]}`),
		GuardVersion:        "test",
		InputEventID:        input,
		InputSubject:        "toolsentry.telemetry.schema.x",
		InputSequence:       1,
	}
	if verdict == guards.DriftOnUsedFields {
		v.Directive = "HALT: Drift on used fields ['user_id']. Apply migration."
		v.Affected = json.RawMessage(`["user_id"]`)
		v.Migration = json.RawMessage(`{"steps":[{"op":"move","path":"user_id","to":"userId"}],"blocked":[]}`)
	}
	msg, err := names.NewSchemaVerdict(v, verdictTime)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func compositionVerdict(t *testing.T, names events.Names, verdict guards.CompositionVerdict, composition, input string) events.Message {
	t.Helper()
	lo, hi := 0.70, 0.82
	v := events.CompositionVerdict{
		Verdict:              verdict,
		Directive:            "HALT: Composed quality 77.38% < requirement 90.00%.",
		ManifestDigest:       strings.Repeat("cd", 32),
		CompositionID:        composition,
		ComposedQuality:      0.7738,
		ComposedQualityLower: &lo,
		ComposedQualityUpper: &hi,
		Confidence:           "CONFIRMED",
		GuardVersion:         "test",
		InputEventID:         input,
		InputSubject:         "toolsentry.telemetry.workflow.x",
		InputSequence:        2,
	}
	msg, err := names.NewCompositionVerdict(v, verdictTime)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func publishMsg(t *testing.T, ctx context.Context, js jetstream.JetStream, m events.Message) {
	t.Helper()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}, jetstream.WithMsgID(m.ID)); err != nil {
		t.Fatal(err)
	}
}

// watchFixture publishes five verdicts, ordered so that for every filter
// the tests use a verdict that must be filtered out comes first.
type watchFixture struct {
	srv  testNATS
	msgs map[string]events.Message // by name
}

func newWatchFixture(t *testing.T) watchFixture {
	t.Helper()
	srv := startProvisioned(t, "")
	names := events.Names{}
	f := watchFixture{srv: srv, msgs: map[string]events.Message{
		"match":      schemaVerdict(t, names, guards.SchemaMatch, "billing.charge", "", "e1"),
		"degraded":   compositionVerdict(t, names, guards.CompositionDegraded, "checkout", "e2"),
		"drift-o":    schemaVerdict(t, names, guards.DriftOnUsedFields, "crm.lookup", "other-agent", "e3"),
		"drift-b":    schemaVerdict(t, names, guards.DriftOnUsedFields, "crm.lookup", "billing-7", "e3"),
		"semantic":   compositionVerdict(t, names, guards.SemanticIncompatible, "refunds", "e4"),
		"match-late": schemaVerdict(t, names, guards.SchemaMatch, "crm.lookup", "", "e5"),
	}}
	ctx := testCtx(t, 10*time.Second)
	for _, name := range []string{"match", "degraded", "drift-o", "drift-b", "semantic", "match-late"} {
		publishMsg(t, ctx, srv.js, f.msgs[name])
	}
	return f
}

func TestWatchAllLines(t *testing.T) {
	f := newWatchFixture(t)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--count", "6", "--timeout", "15s", "--nats-url", f.srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{
		"2026-11-29T10:00:00Z  PROCEED  schema       SCHEMA_MATCH               billing.charge  billing.charge matches its baseline  directive: PROCEED: Schema matches baseline.",
		"2026-11-29T10:00:00Z  HALT     composition  COMPOSITION_DEGRADED       checkout        workflow checkout must not run: composed quality 77.38% < requirement 90.00%  directive: HALT: Composed quality 77.38% < requirement 90.00%.  quality 77.38% [70.00%, 82.00%] CONFIRMED",
		"2026-11-29T10:00:00Z  MIGRATE  schema       DRIFT_ON_USED_FIELDS       crm.lookup      other-agent must send userId instead of user_id; migration available  directive: HALT: Drift on used fields ['user_id']. Apply migration.  affected: user_id  migration: move user_id → userId",
		"2026-11-29T10:00:00Z  MIGRATE  schema       DRIFT_ON_USED_FIELDS       crm.lookup      billing-7 must send userId instead of user_id; migration available  directive: HALT: Drift on used fields ['user_id']. Apply migration.  affected: user_id  migration: move user_id → userId",
		"2026-11-29T10:00:00Z  HALT     composition  SEMANTIC_INCOMPATIBLE      refunds         workflow refunds must not run: composed quality 77.38% < requirement 90.00%  directive: HALT: Composed quality 77.38% < requirement 90.00%.  quality 77.38% [70.00%, 82.00%] CONFIRMED",
		"2026-11-29T10:00:00Z  PROCEED  schema       SCHEMA_MATCH               crm.lookup      crm.lookup matches its baseline  directive: PROCEED: Schema matches baseline.",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}

func TestWatchFilters(t *testing.T) {
	f := newWatchFixture(t)
	cases := []struct {
		name string
		args []string
		want []string // fixture names, in stream order
	}{
		{"guard schema", []string{"--guard", "schema"}, []string{"match", "drift-o", "drift-b", "match-late"}},
		{"guard composition", []string{"--guard", "composition"}, []string{"degraded", "semantic"}},
		{"verdict, lower case", []string{"--verdict", "drift_on_used_fields"}, []string{"drift-o", "drift-b"}},
		{"verdict of the other guard", []string{"--verdict", "SEMANTIC_INCOMPATIBLE"}, []string{"semantic"}},
		{"guard and verdict", []string{"--guard", "composition", "--verdict", "COMPOSITION_DEGRADED"}, []string{"degraded"}},
		{"key", []string{"--key", "crm.lookup"}, []string{"drift-o", "drift-b", "match-late"}},
		{"composition key", []string{"--key", "checkout"}, []string{"degraded"}},
		{"agent", []string{"--agent", "billing-7"}, []string{"drift-b"}},
		{"key and verdict", []string{"--key", "crm.lookup", "--verdict", "schema_match"}, []string{"match-late"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// --count stops at the expected number: a filter that let
			// anything else through shows it among the first, since every
			// case has a non-matching verdict before its matches.
			args := append([]string{"watch", "--all", "--json", "--count", strconv.Itoa(len(tc.want)), "--timeout", "15s", "--nats-url", f.srv.url}, tc.args...)
			out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var want []string
			for _, name := range tc.want {
				want = append(want, string(f.msgs[name].Data))
			}
			if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("got:\n%s\nwant the CloudEvents of %v:\n%s", out, tc.want, strings.Join(want, "\n"))
			}
		})
	}
}

// TestWatchTimeoutWithoutCount: --timeout ends a watch that found what was
// there; nothing beyond the filter is printed.
func TestWatchTimeoutWithoutCount(t *testing.T) {
	f := newWatchFixture(t)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--key", "checkout", "--timeout", "700ms", "--nats-url", f.srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "COMPOSITION_DEGRADED       checkout") {
		t.Errorf("output %q, want the one checkout verdict", out)
	}
}

func TestWatchTimeoutBeforeCount(t *testing.T) {
	f := newWatchFixture(t)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--key", "checkout", "--count", "2", "--timeout", "700ms", "--nats-url", f.srv.url)
	if code != 1 || !strings.Contains(errOut, "timed out after 700ms: 1 of 2 verdicts arrived") {
		t.Errorf("exit %d, stderr %q; want 1 and the count that arrived", code, errOut)
	}
	if !strings.Contains(out, "checkout") {
		t.Errorf("output %q: the verdict that arrived should still be printed", out)
	}
}

func TestWatchSince(t *testing.T) {
	f := newWatchFixture(t)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--since", "1h", "--count", "6", "--timeout", "15s", "--nats-url", f.srv.url)
	if code != 0 || strings.Count(out, "\n") != 6 {
		t.Errorf("--since 1h: exit %d, %d lines, stderr %s; want the 6 verdicts", code, strings.Count(out, "\n"), errOut)
	}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	out, errOut, code = runCtx(testCtx(t, cmdTimeout), "", "watch", "--since", past, "--guard", "composition", "--count", "2", "--timeout", "15s", "--nats-url", f.srv.url)
	if code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("--since %s: exit %d, output %q, stderr %s; want the 2 composition verdicts", past, code, out, errOut)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	out, errOut, code = runCtx(testCtx(t, cmdTimeout), "", "watch", "--since", future, "--timeout", "500ms", "--nats-url", f.srv.url)
	if code != 0 || out != "" {
		t.Errorf("--since %s: exit %d, output %q, stderr %s; want nothing", future, code, out, errOut)
	}
}

// cmdResult is what a command run in the background returned.
type cmdResult struct {
	out, errOut string
	code        int
}

// startWatch runs watch in the background and waits until its consumer
// exists on the verdict stream.
func startWatch(t *testing.T, ctx context.Context, srv testNATS, args ...string) <-chan cmdResult {
	t.Helper()
	st, err := srv.js.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan cmdResult, 1)
	go func() {
		out, errOut, code := runCtx(ctx, "", append([]string{"watch", "--nats-url", srv.url}, args...)...)
		done <- cmdResult{out, errOut, code}
	}()
	natstest.Eventually(t, 10*time.Second, "watch's consumer on the verdict stream", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Consumers > before.State.Consumers
	})
	return done
}

func TestWatchDeliversNewVerdictsByDefault(t *testing.T) {
	f := newWatchFixture(t)
	ctx := testCtx(t, cmdTimeout)
	done := startWatch(t, ctx, f.srv, "--count", "1", "--json", "--timeout", "15s")
	fresh := schemaVerdict(t, events.Names{}, guards.NoBaseline, "new.tool", "", "e9")
	publishMsg(t, ctx, f.srv.js, fresh)
	select {
	case r := <-done:
		if r.code != 0 || r.out != string(fresh.Data)+"\n" {
			t.Errorf("exit %d, output %q, stderr %s; want only the verdict published after the start", r.code, r.out, r.errOut)
		}
	case <-ctx.Done():
		t.Fatal("watch did not return")
	}
}

func TestWatchEndsCleanlyWhenInterrupted(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx, cancel := context.WithCancel(testCtx(t, cmdTimeout))
	done := startWatch(t, ctx, srv)
	cancel()
	select {
	case r := <-done:
		if r.code != 0 {
			t.Errorf("exit %d, stderr %s; want 0 on interrupt", r.code, r.errOut)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not return after its context was cancelled")
	}
}

func TestWatchSkipsMessagesThatAreNotVerdicts(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	if _, err := srv.js.Publish(ctx, "toolsentry.verdicts.schema.schema_match.x", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	good := schemaVerdict(t, events.Names{}, guards.SchemaMatch, "x", "", "e1")
	publishMsg(t, ctx, srv.js, good)
	out, errOut, code := runCtx(ctx, "", "watch", "--all", "--count", "1", "--json", "--timeout", "15s", "--nats-url", srv.url)
	if code != 0 || out != string(good.Data)+"\n" {
		t.Errorf("exit %d, output %q; want the one valid verdict", code, out)
	}
	if !strings.Contains(errOut, "skipping message 1 on toolsentry.verdicts.schema.schema_match.x: not a CloudEvent") {
		t.Errorf("stderr %q: want the skipped message reported", errOut)
	}
}

func TestWatchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--guard", "quality"},
		{"--verdict", "DRIFTED"},
		{"--guard", "schema", "--verdict", "COMPOSITION_DEGRADED"},
		{"--guard", "composition", "--agent", "a"},
		{"--all", "--since", "1h"},
		{"--since", "yesterday"},
		{"--since", "-5m"},
		{"--count", "-1"},
		{"--timeout", "-1s"},
		{"extra"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"watch", "--nats-url", freeURL(t)}, args...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %s", args, code, errOut)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"90s":                       now.Add(-90 * time.Second),
		"1h":                        now.Add(-time.Hour),
		"2025-06-01T12:00:00Z":      time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		"2025-06-01T14:00:00+02:00": time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		"2025-06-01T12:00:00.5Z":    time.Date(2025, 6, 1, 12, 0, 0, 5e8, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestWatchLineColumns: the action and the summary are columns: the key
// column widens to the widest key so far, and on a terminal the action is
// coloured and the details dimmed; escapes never change the widths.
func TestWatchLineColumns(t *testing.T) {
	names := events.Names{}
	decode := func(m events.Message) events.Event {
		ev, err := names.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	halt := decode(compositionVerdict(t, names, guards.CompositionDegraded, "checkout", "e1"))
	long := decode(schemaVerdict(t, names, guards.SchemaMatch, "a-rather-long-server/a-rather-long-tool", "", "e2"))
	drift := decode(schemaVerdict(t, names, guards.DriftOnUsedFields, "crm.lookup", "billing-7", "e3"))

	opts := &watchOptions{}
	first := verdictLine(halt, verdictTime, opts)
	if !strings.HasPrefix(first, "2026-11-29T10:00:00Z  HALT     composition  COMPOSITION_DEGRADED       checkout        workflow checkout must not run") {
		t.Errorf("first line %q", first)
	}
	verdictLine(long, verdictTime, opts)
	after := verdictLine(drift, verdictTime, opts)
	want := "2026-11-29T10:00:00Z  MIGRATE  schema       DRIFT_ON_USED_FIELDS       crm.lookup" + strings.Repeat(" ", len("a-rather-long-server/a-rather-long-tool")-len("crm.lookup")) + "  billing-7 must send userId"
	if !strings.HasPrefix(after, want) {
		t.Errorf("after a longer key:\n%q\nwant the prefix\n%q", after, want)
	}

	colored := verdictLine(halt, verdictTime, &watchOptions{color: true})
	if !strings.HasPrefix(colored, "2026-11-29T10:00:00Z  \x1b[1;31mHALT   \x1b[0m  composition  ") ||
		!strings.Contains(colored, "\x1b[2m  directive: HALT: Composed quality") || !strings.HasSuffix(colored, "\x1b[0m") {
		t.Errorf("coloured line %q", colored)
	}
	if plain := strings.NewReplacer("\x1b[1;31m", "", "\x1b[2m", "", "\x1b[0m", "").Replace(colored); plain != first {
		t.Errorf("without its escapes the coloured line is\n%q\nnot\n%q", plain, first)
	}
	if c := verdictLine(drift, verdictTime, &watchOptions{color: true}); !strings.Contains(c, "\x1b[1;33mMIGRATE\x1b[0m") {
		t.Errorf("MIGRATE not yellow: %q", c)
	}
}

// TestWatchColorsOnlyATerminal: a pipe or a file gets no escapes, and
// NO_COLOR turns them off anywhere.
func TestWatchColorsOnlyATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, out := range map[string]io.Writer{"pipe": w, "file": f, "buffer": &strings.Builder{}} {
		if colorTerminal(out, "") {
			t.Errorf("%s: coloured", name)
		}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil { // only with a controlling terminal
		defer tty.Close()
		if !colorTerminal(tty, "") || colorTerminal(tty, "1") {
			t.Errorf("terminal: coloured %v, with NO_COLOR=1 %v; want true, false", colorTerminal(tty, ""), colorTerminal(tty, "1"))
		}
	}
	// Through the command: its output is no terminal.
	f2 := newWatchFixture(t)
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--count", "1", "--timeout", "15s", "--nats-url", f2.srv.url)
	if code != 0 || strings.Contains(out, "\x1b[") || !strings.Contains(out, "PROCEED  schema") {
		t.Errorf("exit %d, output %q, stderr %s", code, out, errOut)
	}
}
