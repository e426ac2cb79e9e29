package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher/agent"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy/mcptest"
)

// mcpHelperEnv makes the test binary, run as
// `BIN -test.run=^TestMCPProxyHelperProcess$ ROLE ARGS...`, play a part of
// an MCP session instead of testing: "proxy" runs `toolsentry mcp-proxy
// ARGS...` exactly as the binary's main does; "server" runs the go-sdk MCP
// server of package mcptest on its standard streams.
const mcpHelperEnv = "TOOLSENTRY_TEST_MCP_HELPER"

func TestMCPProxyHelperProcess(t *testing.T) {
	if os.Getenv(mcpHelperEnv) != "1" {
		t.Skip("runs only as a helper process of the mcp-proxy tests")
	}
	args := flag.Args()
	switch args[0] {
	case "proxy":
		err := run(context.Background(), append([]string{"mcp-proxy"}, args[1:]...), stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
		os.Exit(exitCode(err, os.Stderr))
	case "server", "server-upgraded":
		if err := mcptest.Serve(context.Background(), mcptest.Options{Upgraded: args[0] == "server-upgraded"}); err != nil {
			os.Stderr.WriteString("mcp test server: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(2)
}

// helperCommand is the test binary as a helper in role.
func helperCommand(role string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestMCPProxyHelperProcess$", role}, args...)...)
	cmd.Env = append(os.Environ(), mcpHelperEnv+"=1")
	return cmd
}

// connectThroughProxy starts `toolsentry mcp-proxy FLAGS -- <the go-sdk
// test server>` as an MCP client configuration would, and connects a go-sdk
// client to it over stdio.
func connectThroughProxy(t *testing.T, ctx context.Context, copts *mcp.ClientOptions, flags ...string) (*mcp.ClientSession, *lockedBuffer) {
	t.Helper()
	return connectThroughProxyTo(t, ctx, "server", copts, flags...)
}

// connectThroughProxyTo is connectThroughProxy to the helper server in
// role: "server", or "server-upgraded" (lookup_user already takes userId).
func connectThroughProxyTo(t *testing.T, ctx context.Context, role string, copts *mcp.ClientOptions, flags ...string) (*mcp.ClientSession, *lockedBuffer) {
	t.Helper()
	args := append(append([]string{}, flags...), "--", os.Args[0], "-test.run=^TestMCPProxyHelperProcess$", role)
	cmd := helperCommand("proxy", args...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "billing-bot", Version: "1.0"}, copts)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting through mcp-proxy: %v\n%s", err, stderr)
	}
	return cs, stderr
}

// The scenario end to end: a go-sdk client talks to a go-sdk server
// through `toolsentry mcp-proxy`; the agent calls lookup_user with user_id,
// the server renames it to userId and says its tools changed, the client
// lists them again, and `toolsentry serve` tells the agent:
// DRIFT_ON_USED_FIELDS with the migration user_id → userId. The isError
// call counts as a failure in the tool's measured quality.
func TestMCPProxyDriftVerdictEndToEnd(t *testing.T) {
	s := startServe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	names, _ := events.NewNames("")

	relisted := make(chan error, 4)
	var cs *mcp.ClientSession
	copts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		go func() {
			_, err := cs.ListTools(ctx, nil)
			relisted <- err
		}()
	}}
	cs, stderr := connectThroughProxy(t, ctx, copts, "--nats-url", s.natsURL)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-4711"}})
	if err != nil || res.IsError {
		t.Fatalf("lookup_user: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "always_fails", Arguments: map[string]any{"reason": "r"}})
	if err != nil || !res.IsError {
		t.Fatalf("always_fails: %v %+v", err, res)
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
	if err := cs.Close(); err != nil {
		t.Fatalf("the proxy did not exit cleanly: %v\n%s", err, stderr)
	}

	// The verdict, through the real consumer.
	filter, err := names.VerdictFilter(events.KindSchemaVerdict, string(guards.DriftOnUsedFields), mcptest.Name+"/lookup_user")
	if err != nil {
		t.Fatal(err)
	}
	verdicts, err := js.Stream(ctx, names.VerdictsStream())
	if err != nil {
		t.Fatal(err)
	}
	var verdict *events.SchemaVerdict
	natstest.Eventually(t, 30*time.Second, "a DRIFT_ON_USED_FIELDS verdict for lookup_user", func() bool {
		m, err := verdicts.GetLastMsgForSubject(ctx, filter)
		if err != nil {
			return false
		}
		ev, err := names.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("verdict does not decode: %v", err)
		}
		verdict = ev.SchemaVerdict
		return true
	})
	if verdict.AgentID != "billing-bot" {
		t.Errorf("verdict for agent %q, want billing-bot", verdict.AgentID)
	}
	if !strings.Contains(string(verdict.Migration), "user_id") || !strings.Contains(string(verdict.Migration), "userId") {
		t.Errorf("the migration does not rename user_id to userId: %s", verdict.Migration)
	}

	// The fingerprints the proxy computes are the processor's: the verdict's
	// current fingerprint is that of the last observed lookup_user.
	var observed []events.MCPTool
	var called *events.Invocation
	for _, m := range streamMessages(t, ctx, js, names, names.TelemetryStream()) {
		if inv := m.event.Invocation; inv != nil && inv.ToolID == mcptest.Name+"/lookup_user" {
			called = inv
		}
		if obs := m.event.SchemaObserved; obs != nil {
			for _, tool := range obs.Tools {
				if tool.Name == "lookup_user" {
					observed = append(observed, tool)
				}
			}
		}
	}
	if len(observed) != 2 {
		t.Fatalf("%d observations of lookup_user, want 2 (before and after the rename)", len(observed))
	}
	if fp, _ := events.ToolFingerprint(observed[0]); called == nil || called.SchemaFingerprint != fp || called.AgentID != "billing-bot" {
		t.Errorf("the call of lookup_user %+v: want agent billing-bot and the fingerprint the client saw, %s", called, fp)
	}
	if fp, err := events.ToolFingerprint(observed[1]); err != nil || fp != verdict.CurrentFingerprint {
		t.Errorf("the proxy's fingerprint of the renamed tool %s (%v), the verdict's %s", fp, err, verdict.CurrentFingerprint)
	}

	// isError counted as a failure of always_fails, in the tool lane's
	// outcome counters.
	kv, err := js.KeyValue(ctx, names.OutcomesBucket())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := events.KVKey(mcptest.Name + "/always_fails")
	var q struct {
		Calls     int64 `json:"calls"`
		Successes int64 `json:"successes"`
	}
	natstest.Eventually(t, 30*time.Second, "always_fails' quality", func() bool {
		e, err := kv.Get(ctx, key)
		return err == nil && json.Unmarshal(e.Value(), &q) == nil && q.Calls == 1
	})
	if q.Successes != 0 {
		t.Errorf("always_fails answered isError, and counts %d successes of %d calls", q.Successes, q.Calls)
	}
	if out := stderr.String(); strings.Contains(out, "u-4711") {
		t.Errorf("an argument value reached the proxy's log:\n%s", out)
	}
}

// With NATS unreachable the session works all the same, the proxy exits
// with the server's status, and it says on standard error what telemetry
// was lost.
func TestMCPProxyWithoutNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	_ = l.Close() // nothing listens there any more
	cs, stderr := connectThroughProxy(t, ctx, nil, "--nats-url", url, "--agent", "billing-bot")
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 4 {
		t.Fatalf("tools/list with NATS down: %v", err)
	}
	for range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u"}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call with NATS down: %v %+v", err, res)
		}
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("the proxy did not exit cleanly: %v\n%s", err, stderr)
	}
	if out := stderr.String(); !strings.Contains(out, "telemetry: 0 events published, 4 not") {
		t.Errorf("no summary of the lost telemetry on stderr:\n%s", out)
	}
}

func TestMCPProxyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp-proxy"}, "needs the MCP server's command"},
		{[]string{"mcp-proxy", "--relist-after", "0", "--", "true"}, "--relist-after 0"},
		{[]string{"mcp-proxy", "--agent", strings.Repeat("a", 129), "--", "true"}, "agent"},
		{[]string{"mcp-proxy", "--nats-user", "u", "--nats-nkey", "k", "--", "true"}, "exclude each other"},
	} {
		err := run(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}})
		var b strings.Builder
		if code := exitCode(err, &b); code != 2 || !strings.Contains(b.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", tc.args, code, b.String(), tc.want)
		}
	}
}

// The closing of the loop through the proxy: after lookup_user
// renamed user_id to userId, an agent that still sends user_id gets "no
// user id" from the tool (the silent misbehaviour). With --apply-migrations
// the proxy rewrites the call by the directive in force for the agent, and
// the call with the old field reaches the server with the new one.
func TestMCPProxyAppliesMigrationInForce(t *testing.T) {
	s := startServe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	js := natstest.JetStream(t, s.natsURL)
	names, _ := events.NewNames("")

	relisted := make(chan error, 4)
	var cs *mcp.ClientSession
	copts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		go func() {
			_, err := cs.ListTools(ctx, nil)
			relisted <- err
		}()
	}}
	cs, stderr := connectThroughProxy(t, ctx, copts, "--nats-url", s.natsURL, "--agent", "billing-bot")
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	lookup := func(cs *mcp.ClientSession) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-4711"}})
		if err != nil {
			t.Fatal(err)
		}
		return textOf(t, res)
	}
	if got := lookup(cs); got != "found u-4711" {
		t.Fatalf("before the rename: %q", got)
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
	if got := lookup(cs); got != "no user id" {
		t.Fatalf("after the rename, without the proxy's help: %q, want the tool's silent miss", got)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("the proxy did not exit cleanly: %v\n%s", err, stderr)
	}

	// The directive in force for billing-bot: migrate user_id → userId.
	kv, err := js.KeyValue(ctx, names.DirectivesBucket())
	if err != nil {
		t.Fatal(err)
	}
	key, err := events.SchemaDirectiveKey(mcptest.Name+"/lookup_user", "billing-bot")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "billing-bot's directive for lookup_user says MIGRATE", func() bool {
		e, err := kv.Get(ctx, key)
		var d events.Directive
		return err == nil && json.Unmarshal(e.Value(), &d) == nil && d.Action == guards.ActionMigrate
	})

	// A new session of the same agent, with the proxy applying migrations:
	// the server is upgraded, and the agent's call with user_id finds the
	// user.
	cs2, stderr2 := connectThroughProxy(t, ctx, nil, "--nats-url", s.natsURL, "--agent", "billing-bot",
		"--apply-migrations", "--halt-on-drift", "--relist-after", "-1s")
	if _, err := cs2.CallTool(ctx, &mcp.CallToolParams{Name: "upgrade_schema", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if got := lookup(cs2); got != "found u-4711" {
		t.Fatalf("with --apply-migrations: %q, want the call rewritten to userId\n%s", got, stderr2)
	}
	if err := cs2.Close(); err != nil {
		t.Fatalf("the proxy did not exit cleanly: %v\n%s", err, stderr2)
	}
	if out := stderr2.String(); strings.Contains(out, "u-4711") {
		t.Errorf("an argument value reached the proxy's log:\n%s", out)
	}
}

// TestDirectiveHookAnswersHaltsAsMCPErrors: a HALT of the agent's guard
// becomes the JSON-RPC error the client receives, naming the directive and
// its digest; a rewrite passes through; another failure lets the call go on.
func TestDirectiveHookAnswersHaltsAsMCPErrors(t *testing.T) {
	halt := &agent.HaltError{Agent: "billing-bot", Tool: "lookup_user", Directive: events.Directive{
		Action: guards.ActionHalt, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		Verdict: events.VerdictRef{Name: "DRIFT_ON_USED_FIELDS", ManifestDigest: "abc123"},
	}}
	for name, tc := range map[string]struct {
		guard    agent.CallHook
		wantArgs string
		wantHalt bool
		wantErr  bool
	}{
		"rewrite": {guard: func(_ context.Context, tool string, _ json.RawMessage) (json.RawMessage, error) {
			if tool != "crm/lookup_user" {
				return nil, fmt.Errorf("the guard was asked about %q, not the qualified id", tool)
			}
			return json.RawMessage(`{"userId":"u"}`), nil
		}, wantArgs: `{"userId":"u"}`},
		"halt": {guard: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
			return nil, halt
		}, wantHalt: true},
		"guard failed": {guard: func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
			return nil, context.Canceled
		}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			args, h, err := directiveHook(tc.guard)(context.Background(), mcpproxy.Call{Agent: "billing-bot", Server: "crm", Tool: "lookup_user", ToolID: "crm/lookup_user", Arguments: json.RawMessage(`{"user_id":"u"}`)})
			if string(args) != tc.wantArgs || (h != nil) != tc.wantHalt || (err != nil) != tc.wantErr {
				t.Fatalf("args %s, halt %v, err %v", args, h, err)
			}
			if h != nil {
				var data map[string]string
				if err := json.Unmarshal(h.Data, &data); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(h.Message, "HALT") || data["manifest_digest"] != "abc123" || data["verdict"] != "DRIFT_ON_USED_FIELDS" || data["action"] != "HALT" {
					t.Errorf("message %q, data %v", h.Message, data)
				}
			}
		})
	}
}

// textOf is the text of a tool's answer.
func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	text, err := mcptest.Text(res)
	if err != nil {
		t.Fatal(err)
	}
	return text
}
