package mcpproxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy/mcptest"
)

func toolOf(t *testing.T, obs *events.SchemaObserved, name string) events.MCPTool {
	t.Helper()
	for _, tool := range obs.Tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("observation of %s has no tool %q", obs.Server, name)
	return events.MCPTool{}
}

func fingerprint(t *testing.T, tool events.MCPTool) string {
	t.Helper()
	fp, err := events.ToolFingerprint(tool)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// A go-sdk client and a go-sdk server talk through the proxy, with each
// protocol version the SDK speaks: every byte arrives as sent, the
// tools/list result becomes an observation of the server, and each call an
// invocation with the agent, argument types (no values), outcome, latency
// and the fingerprint of the listed tool.
func TestSDKSessionForwardsAndReports(t *testing.T) {
	for _, version := range []string{"", "2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run("protocol="+version, func(t *testing.T) {
			ctx := testContext(t)
			s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1}, "sdk-server", 0)
			cs := s.connect(t, ctx, nil, &mcp.ClientSessionOptions{ProtocolVersion: version})

			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Tools) != 4 {
				t.Fatalf("listed %d tools through the proxy, want 4", len(list.Tools))
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-4711-secret"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := textOf(t, res); got != "found u-4711-secret" {
				t.Fatalf("lookup_user answered %q", got)
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "always_fails", Arguments: map[string]any{"reason": "because"}})
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError {
				t.Fatal("always_fails did not fail")
			}
			s.waitForwarded(t)

			var evs []events.Event
			eventually(t, "two invocations", func() bool { evs = s.sink.events(t); return len(invocations(evs)) == 2 })
			obs := observations(evs)
			if len(obs) != 1 {
				t.Fatalf("%d observations, want 1", len(obs))
			}
			if obs[0].Server != mcptest.Name {
				t.Errorf("observation of %q, want the server's own name %q", obs[0].Server, mcptest.Name)
			}
			lookup, err := invocationOf(evs, "lookup_user", 0)
			if err != nil {
				t.Fatal(err)
			}
			want := &events.Invocation{
				AgentID:           "billing-bot",
				ToolID:            mcptest.Name + "/lookup_user", // the server's tool
				SchemaFingerprint: fingerprint(t, toolOf(t, obs[0], "lookup_user")),
				ArgumentTypes:     events.FieldTypes{"user_id": toolschema.TypeString},
				Outcome:           &events.Outcome{Status: "ok"},
				LatencyMS:         lookup.LatencyMS,
			}
			if diff := cmp.Diff(want, lookup); diff != "" {
				t.Errorf("lookup_user invocation (-want +got):\n%s", diff)
			}
			if lookup.LatencyMS == nil || *lookup.LatencyMS < 0 {
				t.Errorf("latency %v", lookup.LatencyMS)
			}
			failed, err := invocationOf(evs, "always_fails", 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&events.Outcome{Status: "error", ErrorType: "tool_error"}, failed.Outcome); diff != "" {
				t.Errorf("always_fails outcome (-want +got):\n%s", diff)
			}
			if raw := s.sink.raw(); bytes.Contains(raw, []byte("u-4711-secret")) || bytes.Contains(raw, []byte("because")) {
				t.Errorf("an argument value reached the telemetry:\n%s", raw)
			}
		})
	}
}

// The server changes a tool and says so; the client lists again: the
// second observation holds the new schema, the proxy sends nothing of its
// own, and later calls carry the new fingerprint.
func TestListChangedClientListsAgain(t *testing.T) {
	ctx := testContext(t)
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: time.Hour}, "sdk-server", 0)
	relisted := make(chan error, 4)
	var cs *mcp.ClientSession
	copts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		go func() {
			_, err := cs.ListTools(ctx, nil)
			relisted <- err
		}()
	}}
	cs = s.connect(t, ctx, copts, nil)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upgrade_schema", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-relisted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client was not told that the tools changed")
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"userId": "u-1"}}); err != nil {
		t.Fatal(err)
	}
	s.waitForwarded(t)

	var evs []events.Event
	eventually(t, "two observations and three invocations", func() bool {
		evs = s.sink.events(t)
		return len(observations(evs)) == 2 && len(invocations(evs)) == 3
	})
	obs := observations(evs)
	v1, v2 := toolOf(t, obs[0], "lookup_user"), toolOf(t, obs[1], "lookup_user")
	if !bytes.Contains(v1.InputSchema, []byte(`"user_id"`)) || !bytes.Contains(v2.InputSchema, []byte(`"userId"`)) {
		t.Fatalf("schemas before and after: %s, %s", v1.InputSchema, v2.InputSchema)
	}
	before, _ := invocationOf(evs, "lookup_user", 0)
	after, _ := invocationOf(evs, "lookup_user", 1)
	if before.SchemaFingerprint != fingerprint(t, v1) || after.SchemaFingerprint != fingerprint(t, v2) {
		t.Errorf("fingerprints of the calls: %s then %s, want %s then %s", before.SchemaFingerprint, after.SchemaFingerprint, fingerprint(t, v1), fingerprint(t, v2))
	}
	if n := s.proxy.Stats().Relists; n != 0 {
		t.Errorf("the proxy listed %d times on its own while the client listed", n)
	}
}

// The client ignores list_changed (protocol 2025-11-25, no handler): the
// proxy lists on its own, keeps the answer from the client, observes the
// new schema, and the agent's calls still carry the fingerprint the client
// saw.
func TestListChangedProxyListsItself(t *testing.T) {
	ctx := testContext(t)
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: 20 * time.Millisecond}, "sdk-server", 0)
	cs := s.connect(t, ctx, nil, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upgrade_schema", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	eventually(t, "the proxy's own observation", func() bool {
		evs = s.sink.events(t)
		return len(observations(evs)) == 2
	})
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-1"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two invocations", func() bool {
		evs = s.sink.events(t)
		return len(invocations(evs)) == 2
	})
	obs := observations(evs)
	if !bytes.Contains(toolOf(t, obs[1], "lookup_user").InputSchema, []byte(`"userId"`)) {
		t.Fatalf("the proxy's observation does not hold the new schema: %s", toolOf(t, obs[1], "lookup_user").InputSchema)
	}
	call, _ := invocationOf(evs, "lookup_user", 0)
	if want := fingerprint(t, toolOf(t, obs[0], "lookup_user")); call.SchemaFingerprint != want {
		t.Errorf("the call carries %s, want the fingerprint the client saw, %s", call.SchemaFingerprint, want)
	}
	if n := s.proxy.Stats().Relists; n != 1 {
		t.Errorf("%d lists of the proxy's own, want 1", n)
	}

	// Byte for byte, but for the proxy's own request and its answer.
	own := func(b []byte) (kept []byte, mine int) {
		for _, l := range lines(b) {
			if strings.Contains(l, "toolsentry-mcp-proxy-") {
				mine++
				continue
			}
			kept = append(kept, l...)
		}
		return kept, mine
	}
	eventually(t, "forwarded", func() bool {
		got, n := own(s.serverGot.bytes())
		sent, m := own(s.serverSent.bytes())
		return n == 1 && m == 1 && bytes.Equal(got, s.clientSent.bytes()) && bytes.Equal(sent, s.clientGot.bytes())
	})
}

// Pages: the client follows nextCursor, and so does the proxy when it
// lists on its own; each page is one observation.
func TestPagesAreObserved(t *testing.T) {
	ctx := testContext(t)
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: 20 * time.Millisecond}, "sdk-server", 1)
	cs := s.connect(t, ctx, nil, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("listed %d tools, want 4", n)
	}
	eventually(t, "one observation per page", func() bool { return len(observations(s.sink.events(t))) == 4 })
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upgrade_schema", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the proxy's own pages", func() bool { return len(observations(s.sink.events(t))) == 8 })
	names := map[string]int{}
	for _, obs := range observations(s.sink.events(t)) {
		if len(obs.Tools) != 1 {
			t.Fatalf("a page of %d tools, want 1", len(obs.Tools))
		}
		names[obs.Tools[0].Name]++
	}
	if diff := cmp.Diff(map[string]int{"always_fails": 2, "big_text": 2, "lookup_user": 2, "upgrade_schema": 2}, names); diff != "" {
		t.Errorf("tools observed (-want +got):\n%s", diff)
	}
	if got := s.proxy.Stats().Relists; got != 4 {
		t.Errorf("%d requests of the proxy's own, want 4 (one per page)", got)
	}
}

// A hook that rewrites arguments: the server gets the call re-encoded
// with the new arguments and nothing else changed; every other message
// goes through byte for byte; the telemetry keeps what the agent sent.
func TestHookRewritesArguments(t *testing.T) {
	ctx := testContext(t)
	var seen []mcpproxy.Call
	hook := func(_ context.Context, c mcpproxy.Call) (json.RawMessage, *mcpproxy.HaltError, error) {
		seen = append(seen, c)
		if c.Tool != "lookup_user" {
			return nil, nil, nil
		}
		return json.RawMessage(`{"user_id":"migrated <&>"}`), nil, nil
	}
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1, Hook: hook}, "sdk-server", 0)
	cs := s.connect(t, ctx, nil, nil)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "original", "extra": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "found migrated <&>" {
		t.Fatalf("the server answered %q: it did not get the rewritten arguments", got)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "always_fails", Arguments: map[string]any{"reason": "r"}}); err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	eventually(t, "two invocations", func() bool { evs = s.sink.events(t); return len(invocations(evs)) == 2 })

	var sent, got []string
	eventually(t, "every line forwarded", func() bool {
		sent, got = lines(s.clientSent.bytes()), lines(s.serverGot.bytes())
		return len(sent) == len(got)
	})
	if len(sent) != len(got) {
		t.Fatalf("the client sent %d lines, the server got %d", len(sent), len(got))
	}
	rewritten := 0
	for i := range sent {
		if sent[i] == got[i] {
			continue
		}
		rewritten++
		var a, b map[string]any
		if err := json.Unmarshal([]byte(sent[i]), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(got[i]), &b); err != nil {
			t.Fatalf("the rewritten message is not JSON: %v\n%s", err, got[i])
		}
		if strings.Count(got[i], "\n") != 1 || !strings.HasSuffix(got[i], "\n") {
			t.Errorf("the rewritten message is not one line: %q", got[i])
		}
		a["params"].(map[string]any)["arguments"] = map[string]any{"user_id": "migrated <&>"}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("the rewritten call differs in more than its arguments (-want +got):\n%s", diff)
		}
	}
	if rewritten != 1 {
		t.Errorf("%d messages changed on the way, want 1", rewritten)
	}
	inv, _ := invocationOf(evs, "lookup_user", 0)
	if diff := cmp.Diff(events.FieldTypes{"user_id": toolschema.TypeString, "extra": toolschema.TypeInteger}, inv.ArgumentTypes); diff != "" {
		t.Errorf("argument types are not what the agent sent (-want +got):\n%s", diff)
	}
	if len(seen) != 2 || seen[0].Agent != "billing-bot" || seen[0].Server != mcptest.Name || seen[0].ToolID != mcptest.Name+"/lookup_user" || seen[0].SchemaFingerprint == "" || string(seen[0].Arguments) == "" {
		t.Errorf("the hook saw %+v", seen)
	}
	if st := s.proxy.Stats(); st.Rewritten != 1 || st.Halted != 0 || st.HookErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A hook that refuses a call: the client gets a JSON-RPC error naming the
// directive, the server never sees the call, and the session goes on. A
// failing hook lets the call through.
func TestHookHaltsCall(t *testing.T) {
	ctx := testContext(t)
	hook := func(_ context.Context, c mcpproxy.Call) (json.RawMessage, *mcpproxy.HaltError, error) {
		switch c.Tool {
		case "lookup_user":
			return nil, &mcpproxy.HaltError{Message: "toolsentry: DRIFT_ON_USED_FIELDS: HALT_AND_MIGRATE user_id -> userId", Data: json.RawMessage(`{"directive":"HALT_AND_MIGRATE"}`)}, nil
		case "always_fails":
			return nil, nil, errors.New("guard unavailable")
		}
		return nil, nil, nil
	}
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1, Hook: hook}, "sdk-server", 0)
	cs := s.connect(t, ctx, nil, nil)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-1"}})
	if err == nil || !strings.Contains(err.Error(), "HALT_AND_MIGRATE") {
		t.Fatalf("halted call: err = %v, want the directive", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "always_fails", Arguments: map[string]any{"reason": "r"}})
	if err != nil || !res.IsError {
		t.Fatalf("a call the hook failed on did not reach the server: %v %+v", err, res)
	}
	if bytes.Contains(s.serverGot.bytes(), []byte(`"lookup_user"`)) {
		t.Error("the server got the halted call")
	}
	if !bytes.Contains(s.clientGot.bytes(), []byte(`"code":-32090`)) {
		t.Errorf("the client did not get error code %d: %s", mcpproxy.CodeHalted, s.clientGot.bytes())
	}
	var evs []events.Event
	eventually(t, "two invocations", func() bool { evs = s.sink.events(t); return len(invocations(evs)) == 2 })
	if inv, _ := invocationOf(evs, "lookup_user", 0); inv.Outcome != nil {
		t.Errorf("the halted call has outcome %+v; the tool never ran", inv.Outcome)
	}
	if st := s.proxy.Stats(); st.Halted != 1 || st.HookErrors != 1 || st.Rewritten != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Raw bytes from both sides: odd spacing, escapes, CRLF, a line that is not
// JSON, a batch, a 1 MiB request and a 2 MB answer all go through
// untouched, and the batch's calls are reported.
func TestRawFramingBatchesAndLargeMessages(t *testing.T) {
	ctx := testContext(t)
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1}, "script", 0)
	got := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, s.clientOut)
		close(got)
	}()
	big := strings.Repeat("p", 1<<20)
	in := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","clientInfo":{"name":"raw-agent","version":"1"},"capabilities":{}}}` + "\n",
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n",
		`{ "method" : "tools/list", "id" : "a\u0062", "jsonrpc":"2.0" }` + "\r\n",
		"not json at all\n",
		"\n",
		`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"crm.lookup","arguments":{"user_id":"u-secret","opts":{"limit":5}},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}},{"jsonrpc":"2.0","method":"notifications/progress","params":{}},{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fail","arguments":{},"_meta":{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}}]` + "\n",
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"big","arguments":{"pad":"` + big + `","size":2000000}}}` + "\n",
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"rpcfail"}}` + "\n",
	}
	client := teeWriteCloser{s.clientIn, s.clientSent}
	for i, l := range in {
		if _, err := client.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
		if i == 4 { // calls follow the list, as a client's do
			eventually(t, "the observation", func() bool { return len(observations(s.sink.events(t))) == 1 })
		}
	}
	var evs []events.Event
	eventually(t, "four invocations", func() bool { evs = s.sink.events(t); return len(invocations(evs)) == 4 })
	s.waitForwarded(t)
	if want := strings.Join(in, ""); string(s.serverGot.bytes()) != want {
		t.Fatal("the server did not get the client's bytes")
	}
	if !bytes.Contains(s.clientGot.bytes(), []byte(strings.Repeat("y", 2000000))) {
		t.Fatal("the 2 MB answer did not reach the client")
	}
	obs := observations(evs)
	if len(obs) != 1 || obs[0].Server != "script-server" || obs[0].Tools[0].Name != "crm.lookup" {
		t.Fatalf("observations %+v", obs)
	}
	want := map[string]*events.Outcome{
		"crm.lookup": {Status: "ok"},
		"fail":       {Status: "error", ErrorType: "tool_error"},
		"big":        {Status: "ok"},
		"rpcfail":    {Status: "error", ErrorType: "jsonrpc_-32603"},
	}
	for tool, outcome := range want {
		inv, err := invocationOf(evs, tool, 0)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if diff := cmp.Diff(outcome, inv.Outcome); diff != "" {
			t.Errorf("%s outcome (-want +got):\n%s", tool, diff)
		}
		if inv.AgentID != "raw-agent" {
			t.Errorf("%s agent %q", tool, inv.AgentID)
		}
	}
	lookup, _ := invocationOf(evs, "crm.lookup", 0)
	if diff := cmp.Diff(events.FieldTypes{"user_id": toolschema.TypeString, "opts": toolschema.TypeObject, "opts.limit": toolschema.TypeInteger}, lookup.ArgumentTypes); diff != "" {
		t.Errorf("argument types (-want +got):\n%s", diff)
	}
	if lookup.SchemaFingerprint == "" {
		t.Error("no fingerprint on a call to a listed tool")
	}
	if lookup.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || lookup.ParentSpanID != "00f067aa0ba902b7" {
		t.Errorf("trace %q parent span %q: want those of the call's traceparent", lookup.TraceID, lookup.ParentSpanID)
	}
	if fail, _ := invocationOf(evs, "fail", 0); fail.TraceID != "" || fail.ParentSpanID != "" {
		t.Errorf("an invalid traceparent (zero trace id) gave trace %q span %q", fail.TraceID, fail.ParentSpanID)
	}
	if raw := s.sink.raw(); bytes.Contains(raw, []byte("u-secret")) || bytes.Contains(raw, []byte("ppppp")) {
		t.Error("argument values reached the telemetry")
	}
	if st := s.proxy.Stats(); st.NotJSON != 1 {
		t.Errorf("%d lines counted as not JSON, want 1", st.NotJSON)
	}
	s.close(t)
	<-got
}

// RunCommand returns the server's exit status, forwards signals, and ends
// when standard input does.
func TestRunCommandExitStatusAndSignals(t *testing.T) {
	names, _ := events.NewNames("")
	run := func(t *testing.T, role string, signal os.Signal) int {
		ctx := testContext(t)
		p, err := mcpproxy.New(mcpproxy.Config{Names: names, RelistAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
		inR, inW := io.Pipe()
		defer inW.Close()
		signals := make(chan os.Signal, 1)
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			code, err := mcpproxy.RunCommand(ctx, p, cmd, inR, io.Discard, signals)
			done <- result{code, err}
		}()
		if signal != nil {
			signals <- signal // forwarded once the server runs
		} else {
			_ = inW.Close()
		}
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.code
		case <-time.After(30 * time.Second):
			t.Fatal("RunCommand did not return")
		}
		return 0
	}
	if code := run(t, "exit3", nil); code != 3 {
		t.Errorf("after stdin EOF the server exited 3, RunCommand returned %d", code)
	}
	if code := run(t, "exit3", syscall.SIGTERM); code != 128+int(syscall.SIGTERM) {
		t.Errorf("the forwarded SIGTERM: status %d, want %d", code, 128+int(syscall.SIGTERM))
	}
}

// JetStreamSink stores the events on a real server; with NATS unreachable
// the session goes on and the lost events are counted.
func TestJetStreamSink(t *testing.T) {
	names, _ := events.NewNames("")
	t.Run("stores", func(t *testing.T) {
		ctx := testContext(t)
		_, url := natstest.RunServer(t)
		js := natstest.JetStream(t, url)
		if _, err := consumer.Provision(ctx, js, consumer.Config{}); err != nil {
			t.Fatal(err)
		}
		nc := natstest.Connect(t, url)
		sink, err := mcpproxy.NewJetStreamSink(ctx, nc, names, mcpproxy.SinkOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1, Sink: sink}, "sdk-server", 0)
		cs := s.connect(t, ctx, nil, nil)
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u"}}); err != nil {
			t.Fatal(err)
		}
		_ = cs.Close()
		s.close(t)
		if err := sink.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(ctx); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if st := sink.Stats(); st.Stored != 2 || st.Failed+st.Dropped != 0 {
			t.Fatalf("sink stats %+v, want 2 stored", st)
		}
		stream, err := js.Stream(ctx, names.TelemetryStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 2 {
			t.Fatalf("%d messages in %s, want 2", info.State.Msgs, names.TelemetryStream())
		}
		for seq := uint64(1); seq <= 2; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := names.Decode(m.Subject, m.Header, m.Data); err != nil {
				t.Errorf("stored event %d does not decode: %v", seq, err)
			}
		}
	})
	t.Run("nats down", func(t *testing.T) {
		ctx := testContext(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "nats://" + l.Addr().String()
		_ = l.Close() // nothing listens there now
		nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		sink, err := mcpproxy.NewJetStreamSink(ctx, nc, names, mcpproxy.SinkOptions{AckTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1, Sink: sink}, "sdk-server", 0)
		cs := s.connect(t, ctx, nil, nil)
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u"}})
			if err != nil || textOf(t, res) != "found u" {
				t.Fatalf("a call through the proxy with NATS down: %v", err)
			}
		}
		s.waitForwarded(t)
		_ = cs.Close()
		s.close(t)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := sink.Close(cctx); err != nil {
			t.Fatal(err)
		}
		st := sink.Stats()
		if st.Stored != 0 || st.Failed+st.Dropped != 4 {
			t.Fatalf("sink stats %+v, want the 4 events failed or dropped", st)
		}
		if _, err := jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
	})
}

// The server's output ends (it died) while the client goes on: Serve
// returns, and a late call is neither forwarded nor able to crash the
// proxy; its invocation counts as dropped.
func TestClientAfterServerEnds(t *testing.T) {
	ctx := testContext(t)
	names, _ := events.NewNames("")
	halt := func(context.Context, mcpproxy.Call) (json.RawMessage, *mcpproxy.HaltError, error) {
		return nil, &mcpproxy.HaltError{Message: "halted"}, nil
	}
	p, err := mcpproxy.New(mcpproxy.Config{Names: names, Sink: &memSink{}, Hook: halt, RelistAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	clientR, clientW := io.Pipe()
	defer clientW.Close()
	replies := &recorder{}
	serverOutR, serverOutW := io.Pipe()
	_ = serverOutW.Close() // the server is gone
	_, serverInW := io.Pipe()
	if err := p.Serve(ctx, clientR, teeWriteCloser{nopWriteCloser{io.Discard}, replies}, serverOutR, serverInW); err != nil {
		t.Fatal(err)
	}
	if _, err := clientW.Write([]byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"lookup_user","arguments":{}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late call answered and counted as dropped", func() bool {
		return p.Stats().TelemetryDrops == 1 && bytes.Contains(replies.bytes(), []byte(`"id":9`))
	})
	if err := p.Serve(ctx, clientR, io.Discard, serverOutR, serverInW); !errors.Is(err, mcpproxy.ErrServedTwice) {
		t.Errorf("second Serve: %v, want ErrServedTwice", err)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// A hook in a batch: the halted call's error goes back to the client at
// once, the rewritten call goes on re-encoded with the rest of the batch.
func TestHookInBatch(t *testing.T) {
	ctx := testContext(t)
	hook := func(_ context.Context, c mcpproxy.Call) (json.RawMessage, *mcpproxy.HaltError, error) {
		switch c.Tool {
		case "halt_me":
			return nil, &mcpproxy.HaltError{Code: -32001, Message: "stop"}, nil
		case "rewrite_me":
			return json.RawMessage(`{"b":2}`), nil, nil
		}
		return nil, nil, nil
	}
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: -1, Hook: hook}, "script", 0)
	client := teeWriteCloser{s.clientIn, s.clientSent}
	go func() { _, _ = io.Copy(io.Discard, teeReader{s.clientOut, &recorder{}}) }()
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"halt_me","arguments":{"a":1}}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rewrite_me","arguments":{"a":1}}},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"as_is","arguments":{"a":1}}}]` + "\n"
	if _, err := client.Write([]byte(batch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "three invocations", func() bool { return len(invocations(s.sink.events(t))) == 3 })
	wantServer := `[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rewrite_me","arguments":{"b":2}}},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"as_is","arguments":{"a":1}}}]` + "\n"
	if got := string(s.serverGot.bytes()); got != wantServer {
		t.Errorf("the server got\n%s\nwant\n%s", got, wantServer)
	}
	if got, want := string(s.clientGot.bytes()), `[{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"stop"}}]`+"\n"; !strings.HasPrefix(got, want) {
		t.Errorf("the client got\n%s\nwant first\n%s", got, want)
	}
	eventually(t, "the server's answer to the rest", func() bool {
		return bytes.Contains(s.clientGot.bytes(), []byte(`"id":2`)) && bytes.Contains(s.clientGot.bytes(), []byte(`"id":3`))
	})
}
