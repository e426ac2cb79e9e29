package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/toolsentry/toolsentry/publisher/agent"
)

func init() {
	register(&command{
		name:    "guard",
		summary: "rewrite a tool call's arguments by the directive in force for an agent, or refuse it (HALT)",
		usage:   guardUsage,
		run:     runGuard,
	})
}

// exitHalt is guard's exit status when the directive in force forbids the
// call.
const exitHalt = 3

const guardUsage = `Usage: toolsentry guard --agent AGENT --tool TOOL [flags] < arguments.json

Decides one call of TOOL by AGENT before it is made, from the directives that
` + "`toolsentry serve`" + ` keeps in the KV bucket toolsentry-directives (one per tool and
agent, per tool, and per composition, following the latest verdict) and the
tool's current schema (bucket toolsentry-baselines). Reads the call's
arguments, a JSON object, from standard input and prints the arguments to send
on standard output. A directive answers the payload, not only the agent: under
a MIGRATE or a HALT the arguments are judged against the tool's current input
schema.

  PROCEED   the arguments as given: no verdict about TOOL yet, a PROCEED, or
            arguments that already fit the tool's current input schema,
            whatever the directive says
  MIGRATE   the arguments rewritten by the verdict's migration plan (a renamed
            field moved, a type converted, an old default pinned), when they
            then fit the current schema
  HALT      nothing on standard output; the directive, its verdict and
            manifest digest on standard error with the reason; exit status 3:
            arguments that fit the current schema neither as given nor
            migrated (a removed field still sent, a required field missing)

Agents in other languages ask the same over HTTP: POST /v1/guard on serve's
--http address with {"agent_id", "tool_id", "arguments"} (and "server" to
name the tool as --server does) answers 200 with
{"arguments", "action", "directive", "verdict", "manifest_digest", ...}, or
409 with the HALT directive (the body of --json below), or 400 for a bad
request.

Exit status: 0 when the call may go (PROCEED or MIGRATE); 3 on HALT; 1 when
NATS or the bucket cannot be reached; 2 on a usage error or arguments that
are not a JSON object.

Flags (each also read from the environment variable shown):
  --agent ID          the calling agent (TOOLSENTRY_AGENT; required)
  --tool ID           the tool to be called (required): its id, qualified with
                      its server (github/get_issue), or with --server its name
  --server NAME       the MCP server of --tool: the tool's id is NAME/TOOL
                      (default: none, --tool is the id)
  --fingerprint FP    the tool schema fingerprint the agent integrated against;
                      a directive migrating to exactly that version does not
                      apply (default: none)
  --json              print the whole decision as JSON (the body of POST
                      /v1/guard) instead of the arguments; a HALT still exits 3
                      (default: false)
  --timeout D         how long to wait for NATS and the directives
                      (TOOLSENTRY_GUARD_TIMEOUT, default 10s)

` + connFlagsHelp + `
Examples:
  echo '{"user_id":"u-42","limit":5}' | toolsentry guard --agent billing-7 --tool crm.lookup
  {"limit":5,"userId":"u-42"}

  curl -s localhost:9700/v1/guard -d '{"agent_id":"billing-7","tool_id":"crm.lookup","arguments":{"user_id":"u-42"}}'
  echo '{"owner":"acme","repo":"web","issue_number":42}' | toolsentry guard --agent triage-bot --server github --tool get_issue
`

func runGuard(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	agentID := fs.String("agent", "", "")
	bindEnv(fs, "agent", "TOOLSENTRY_AGENT")
	tool := fs.String("tool", "", "")
	server := fs.String("server", "", "")
	fingerprint := fs.String("fingerprint", "", "")
	asJSON := fs.Bool("json", false, "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	bindEnv(fs, "timeout", "TOOLSENTRY_GUARD_TIMEOUT")
	conn := addConnFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		return usageErrorf("guard takes no arguments, got %q: the call's arguments come on standard input", pos)
	case *agentID == "":
		return usageErrorf("guard needs --agent")
	case *tool == "":
		return usageErrorf("guard needs --tool")
	case *timeout <= 0:
		return usageErrorf("--timeout %s: want positive", *timeout)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(sio.in, maxGuardBody+1))
	if err != nil {
		return fmt.Errorf("reading the arguments: %w", err)
	}
	if len(body) > maxGuardBody {
		return usageErrorf("the arguments are longer than %d bytes", maxGuardBody)
	}
	reqBody, err := json.Marshal(map[string]any{"agent_id": *agentID, "tool_id": *tool, "server": *server, "arguments": json.RawMessage(body), "schema_fingerprint": *fingerprint})
	if err != nil {
		return usageErrorf("the arguments on standard input are not JSON: %v", err)
	}
	req, err := decodeGuardRequest(reqBody)
	if err != nil {
		return usageErrorf("%v", err)
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, js, err := conn.connect(ctx, "toolsentry guard")
	if err != nil {
		return err
	}
	defer nc.Close()
	view, err := agent.WatchDirectives(ctx, js, names, agent.ViewOptions{Agent: *agentID, ProbeInterval: -1})
	if err != nil {
		return conn.notProvisioned(err, "bucket "+names.DirectivesBucket())
	}
	defer view.Close()
	resp, halted, err := decideGuard(ctx, view, req)
	if errors.Is(err, agent.ErrBadPayload) {
		return usageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(sio.out)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(resp); err != nil {
			return err
		}
	case !halted:
		if _, err := fmt.Fprintf(sio.out, "%s\n", resp.Arguments); err != nil {
			return err
		}
	}
	if halted {
		fmt.Fprintf(sio.err, "toolsentry: HALT %s for agent %s: %s\n  verdict %s, manifest digest %s\n  %s\n",
			req.ToolID, *agentID, resp.Directive, resp.Verdict, resp.ManifestDigest, resp.Reason)
		return errExit(exitHalt)
	}
	return nil
}
