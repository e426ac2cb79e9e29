package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

func postGuard(t *testing.T, addr, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/guard", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response %d %q is not JSON: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, m
}

func compactJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = json.Compact(&out, b)
	return out.String()
}

// TestGuardThreeWaysAgree runs the loop through `toolsentry serve` and asks
// the same questions of the Go client (Agent.Guard), of POST /v1/guard and
// of `toolsentry guard`: a migrated rename, a call with no directive, the
// rename still migrated after `baseline accept`, then a HALT on a removed
// field; and bad input gets a 400 or exit 2.
func TestGuardThreeWaysAgree(t *testing.T) {
	s := startServe(t, "")
	ctx := testCtx(t, 60*time.Second)
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	client, err := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "billing-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	var names events.Names
	observe := func(id, schema string) {
		t.Helper()
		m, err := names.NewSchemaObserved(events.Meta{ID: id, Source: "test"}, events.SchemaObserved{ToolID: "crm.lookup", Version: "1",
			Tool: &events.MCPTool{Name: "lookup", InputSchema: json.RawMessage(schema)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	const args = `{"user_id":"u-42","limit":5}`
	observe("o1", `{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}}}`)
	if err := client.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: json.RawMessage(args)}); err != nil {
		t.Fatal(err)
	}
	consumerWait(t, func() bool { return client.Stats().Published == 1 })
	observe("o2", `{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}}}`)
	consumerWait(t, func() bool {
		d, err := client.Decide(ctx, "crm.lookup", json.RawMessage(args))
		return err == nil && d.Migrated
	})

	type answer struct {
		code      int // HTTP status; the CLI's exit status is compared through it
		arguments string
		action    string
		digest    string
	}
	ask := func(tool, payload string) (goAns, httpAns, cliAns answer) {
		t.Helper()
		out, err := client.Guard(ctx, tool, json.RawMessage(payload))
		dec, _ := client.Decide(ctx, tool, json.RawMessage(payload))
		goAns = answer{code: 200, arguments: string(out), action: string(dec.Action)}
		if dec.Directive != nil {
			goAns.digest = dec.Directive.Verdict.ManifestDigest
		}
		var halt *agent.HaltError
		if errors.As(err, &halt) {
			goAns = answer{code: 409, action: "HALT", digest: halt.ManifestDigest()}
		} else if err != nil {
			t.Fatalf("Guard: %v", err)
		}

		code, m := postGuard(t, s.httpAddr, `{"agent_id":"billing-7","tool_id":"`+tool+`","arguments":`+payload+`}`)
		httpAns = answer{code: code, action: m["action"].(string), digest: m["manifest_digest"].(string)}
		if a, ok := m["arguments"]; ok {
			httpAns.arguments = compactJSON(t, a)
		}

		stdout, stderr, exit := runCtx(ctx, payload, "guard", "--agent", "billing-7", "--tool", tool, "--nats-url", s.natsURL, "--json")
		var r guardResponse
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("guard --json: exit %d, %q, %s", exit, stdout, stderr)
		}
		cliAns = answer{code: map[int]int{0: 200, exitHalt: 409}[exit], action: string(r.Action), digest: r.ManifestDigest}
		if r.Arguments != nil {
			cliAns.arguments = string(r.Arguments)
		}
		if exit == exitHalt && !strings.Contains(stderr, "HALT crm.lookup for agent billing-7") {
			t.Errorf("guard's HALT message: %q", stderr)
		}
		return goAns, httpAns, cliAns
	}
	check := func(what string, want answer, tool, payload string) {
		t.Helper()
		g, h, c := ask(tool, payload)
		if want.digest == "*" {
			want.digest = g.digest
		}
		if g != want || h != want || c != want {
			t.Errorf("%s:\n  want %+v\n  Go   %+v\n  HTTP %+v\n  CLI  %+v", what, want, g, h, c)
		}
		if len(g.digest) != 64 && g.digest != "" {
			t.Errorf("%s: digest %q", what, g.digest)
		}
	}

	check("rename", answer{code: 200, arguments: `{"limit":5,"userId":"u-42"}`, action: "MIGRATE", digest: "*"}, "crm.lookup", args)
	check("no directive", answer{code: 200, arguments: `{"a":1}`, action: "PROCEED"}, "other.tool", `{"a":1}`)

	// Plain output of the CLI: the arguments alone.
	if out, errOut, code := runCtx(ctx, args, "guard", "--agent", "billing-7", "--tool", "crm.lookup", "--nats-url", s.natsURL); code != 0 || out != `{"limit":5,"userId":"u-42"}`+"\n" {
		t.Errorf("guard: exit %d, %q, %s", code, out, errOut)
	}

	// The operator accepts the rename: serve publishes a SCHEMA_MATCH for
	// the accept, and the directives projector marks the agent's directive
	// accepted; the agent still sends user_id, so it keeps the migration.
	out, errOut, code := runCtx(ctx, "", "baseline", "accept", "crm.lookup", "--nats-url", s.natsURL)
	if code != 0 || !strings.Contains(out, "baseline of crm.lookup") || !strings.Contains(out, ", verdict ") {
		t.Errorf("baseline accept: exit %d, %q, %s", code, out, errOut)
	}
	consumerWait(t, func() bool {
		d, err := client.Decide(ctx, "crm.lookup", json.RawMessage(args))
		return err == nil && d.Directive != nil && d.Directive.AcceptedFingerprint != "" && !d.Directive.Held
	})
	check("rename after accept", answer{code: 200, arguments: `{"limit":5,"userId":"u-42"}`, action: "MIGRATE", digest: "*"}, "crm.lookup", args)

	// limit goes: the agent sends it, nothing can carry it over.
	observe("o3", `{"type":"object","properties":{"userId":{"type":"string"}}}`)
	// The schema and the directive come by two watches in either order:
	// until the HALT is here, the rename's MIGRATE already refuses the
	// payload (it fits neither version), under the MIGRATE's digest.
	var haltDigest string
	consumerWait(t, func() bool {
		_, err := client.Guard(ctx, "crm.lookup", json.RawMessage(args))
		var halt *agent.HaltError
		if errors.As(err, &halt) && halt.Directive.Action == guards.ActionHalt {
			haltDigest = halt.ManifestDigest()
			return true
		}
		return false
	})
	// serve's own view of the directives (POST /v1/guard) follows the
	// bucket as the agent's does, not necessarily at the same moment.
	consumerWait(t, func() bool {
		code, m := postGuard(t, s.httpAddr, `{"agent_id":"billing-7","tool_id":"crm.lookup","arguments":`+args+`}`)
		return code == http.StatusConflict && m["manifest_digest"] == haltDigest
	})
	check("removed field", answer{code: 409, action: "HALT", digest: haltDigest}, "crm.lookup", args)

	// Bad input: 400 over HTTP, exit 2 from the CLI, with a message.
	for _, body := range []string{`{`, `{"agent_id":"a","tool_id":"t"}`, `{"agent_id":"a","tool_id":"t","arguments":[1]}`, `{"agent_id":"a","tool_id":"t","arguments":{},"extra":1}`, `{"tool_id":"t","arguments":{}}`} {
		if code, m := postGuard(t, s.httpAddr, body); code != 400 || m["error"] == "" {
			t.Errorf("POST %s: %d %v, want 400 with an error", body, code, m)
		}
	}
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{`{`, []string{"--agent", "a", "--tool", "t"}},
		{`[1]`, []string{"--agent", "a", "--tool", "t"}},
		{``, []string{"--agent", "a", "--tool", "t"}},
		{`{}`, []string{"--tool", "t"}},
		{`{}`, []string{"--agent", "a"}},
		{`{}`, []string{"--agent", "a", "--tool", "t", "extra"}},
	} {
		_, errOut, code := runCtx(ctx, c.stdin, append([]string{"guard", "--nats-url", s.natsURL}, c.args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("guard %v < %q: exit %d, %q; want 2 with a message", c.args, c.stdin, code, errOut)
		}
	}
	if code, _ := get(t, "http://"+s.httpAddr+"/v1/guard"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/guard: %d", code)
	}
}

func TestGuardWithoutServe(t *testing.T) {
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), `{}`, "guard", "--agent", "a", "--tool", "t", "--nats-url", "nats://127.0.0.1:1", "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "cannot connect to NATS") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	srv := startProvisioned(t, "acme")
	_, errOut, code = runCtx(testCtx(t, cmdTimeout), `{}`, "guard", "--agent", "a", "--tool", "t", "--nats-url", srv.url)
	if code != 1 || !strings.Contains(errOut, "toolsentry-directives does not exist") {
		t.Errorf("no bucket: exit %d, %q", code, errOut)
	}
}

func TestGuardHelp(t *testing.T) {
	out, _, code := runCtx(testCtx(t, cmdTimeout), "", "guard", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Usage: toolsentry guard", "--agent ", "--tool ", "--fingerprint ", "--json ", "--timeout ", "TOOLSENTRY_AGENT",
		"TOOLSENTRY_GUARD_TIMEOUT", "--nats-url", "--prefix", "exit status 3", "POST /v1/guard", "Examples"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
