package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/agent"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
)

func init() {
	register(&command{
		name:    "mcp-proxy",
		summary: "run a stdio MCP server behind a proxy that reports its tools/list and tools/call telemetry",
		usage:   mcpProxyUsage,
		run:     runMCPProxy,
	})
}

const mcpProxyUsage = `Usage: toolsentry mcp-proxy [flags] -- CMD [ARGS...]

Starts the stdio MCP server CMD ARGS... and stands between it and the MCP
client that started toolsentry: every JSON-RPC message is forwarded
unchanged, byte for byte, in both directions (standard input to the server,
the server's output to standard output; the server's standard error is
ours). Put it in front of the server in the client's configuration, e.g.
"command": "toolsentry", "args": ["mcp-proxy", "--agent", "billing-bot",
"--", "npx", "-y", "@acme/crm-mcp"].

What it reports to the telemetry stream (TOOLSENTRY_TELEMETRY):
  - every tools/list result (each page) as a schema observation of the
    server (toolsentry.telemetry.schema.<server>);
  - after notifications/tools/list_changed, the new list: the client lists
    again, or, if it has not within --relist-after, the proxy sends the
    server the client's last tools/list request under an id of its own and
    keeps the answer to itself;
  - every tools/call as an invocation of the server's tool, whose id is
    <server>/<tool> (toolsentry.telemetry.invocation.<server>/<tool>)
    once answered: agent, paths and JSON types of the arguments (never
    their values), latency, outcome (error for a JSON-RPC error or
    "isError": true, else ok) and the fingerprint of the tool's schema as
    the client last saw it, so that ` + "`toolsentry serve`" + ` tells the agent
    when the tool drifted under the fields it uses.

Telemetry never holds up or breaks the session: events are queued and
published in the background; when NATS is unreachable they are dropped and
counted, the session goes on, and a summary goes to standard error at the
end (standard output carries the protocol and nothing else).

The proxy exits with the server's exit status (128 + N when signal N ended
it). SIGINT, SIGTERM and SIGHUP are forwarded to the server, which runs in
a process group of its own; the end of standard input closes the server's.

Flags (each defaults to its environment variable, if set):
  --agent NAME          agent id of the invocations ($TOOLSENTRY_MCP_AGENT;
                        default: the client's clientInfo.name, else
                        ` + mcpproxy.DefaultAgent + `)
  --server NAME         the server's name: key of the schema observations and
                        server part of its tools' ids (NAME/TOOL)
                        ($TOOLSENTRY_MCP_SERVER; default: the server's
                        serverInfo.name, else CMD's base name)
  --source URI          CloudEvents source of the events
                        ($TOOLSENTRY_MCP_SOURCE, default ` + mcpproxy.DefaultSource + `)
  --relist-after D      how long to wait for the client to list the tools
                        again after list_changed before the proxy does; a
                        negative duration never lists on its own
                        ($TOOLSENTRY_MCP_RELIST_AFTER, default 2s)
  --apply-migrations    rewrite each tools/call's arguments by the migration
                        in force for the agent (the directives that
                        toolsentry serve keeps): an agent still sending
                        user_id to a tool that renamed it sends userId; a
                        call that already fits the tool's current schema
                        goes as it is
                        ($TOOLSENTRY_MCP_APPLY_MIGRATIONS, default false)
  --halt-on-drift       answer a tools/call that the directive in force
                        halts (arguments that fit the tool's current schema
                        neither as sent nor migrated) with an MCP error naming the
                        directive and its manifest digest, instead of
                        letting the tool silently misbehave
                        ($TOOLSENTRY_MCP_HALT_ON_DRIFT, default false)
                        Both need --agent: the directives are the agent's.
                        They answer from a local view of the directives,
                        baselines and usage buckets kept by watches (no
                        round trip per call). Each tools/list the server
                        answers is judged at once against the tool's
                        baseline, before the client sees it, so the first
                        call after a silent upgrade is already migrated or
                        halted; serve's verdict follows and agrees;
                        when NATS cannot be reached at start, the proxy
                        warns on standard error and forwards calls as they
                        are.
  --log-level LEVEL     debug, info, warn or error, on standard error
                        ($TOOLSENTRY_LOG_LEVEL, default warn)

` + connFlagsHelp + `
Examples:
  toolsentry mcp-proxy --agent billing-bot --nats-url nats://nats.internal:4222 -- \
      npx -y @acme/crm-mcp
  toolsentry mcp-proxy --agent billing-bot --apply-migrations --halt-on-drift -- \
      npx -y @acme/crm-mcp
`

// mcpProxyShutdown bounds the wait for the last events' acknowledgements
// once the session is over.
const mcpProxyShutdown = 5 * time.Second

func runMCPProxy(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("mcp-proxy", flag.ContinueOnError)
	agentID := fs.String("agent", "", "")
	bindEnv(fs, "agent", "TOOLSENTRY_MCP_AGENT")
	server := fs.String("server", "", "")
	bindEnv(fs, "server", "TOOLSENTRY_MCP_SERVER")
	source := fs.String("source", mcpproxy.DefaultSource, "")
	bindEnv(fs, "source", "TOOLSENTRY_MCP_SOURCE")
	relistAfter := fs.Duration("relist-after", mcpproxy.DefaultRelistAfter, "")
	bindEnv(fs, "relist-after", "TOOLSENTRY_MCP_RELIST_AFTER")
	logLevel := fs.String("log-level", "warn", "")
	bindEnv(fs, "log-level", "TOOLSENTRY_LOG_LEVEL")
	applyMigrations := fs.Bool("apply-migrations", false, "")
	bindEnv(fs, "apply-migrations", "TOOLSENTRY_MCP_APPLY_MIGRATIONS")
	haltOnDrift := fs.Bool("halt-on-drift", false, "")
	bindEnv(fs, "halt-on-drift", "TOOLSENTRY_MCP_HALT_ON_DRIFT")
	conn := addConnFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageErrorf("mcp-proxy needs the MCP server's command: toolsentry mcp-proxy [flags] -- CMD [ARGS...]")
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	if _, err := conn.options("toolsentry mcp-proxy"); err != nil {
		return err
	}
	if (*applyMigrations || *haltOnDrift) && *agentID == "" {
		return usageErrorf("--apply-migrations and --halt-on-drift need --agent NAME: the directives in force are the agent's")
	}
	if *relistAfter == 0 {
		return usageErrorf("--relist-after 0: give a positive duration, or a negative one to never list on its own")
	}
	log, err := newLogger(sio.err, *logLevel, "json")
	if err != nil {
		return usageErrorf("mcp-proxy: %v", err)
	}
	ctx = log.WithContext(ctx)

	cfg := mcpproxy.Config{
		Names:          names,
		Agent:          *agentID,
		Server:         *server,
		FallbackServer: filepath.Base(argv[0]),
		Source:         *source,
		RelistAfter:    *relistAfter,
	}
	if err := cfg.Validate(); err != nil {
		return usageErrorf("mcp-proxy: %v", err)
	}
	// NATS: connect without waiting for it; the session never depends on it.
	nc, _, err := conn.connect(ctx, "toolsentry mcp-proxy",
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	var sink *mcpproxy.JetStreamSink
	if err != nil {
		log.Warn().Err(err).Msg("mcp-proxy: no telemetry for this session")
	} else {
		defer nc.Close()
		if sink, err = mcpproxy.NewJetStreamSink(ctx, nc, names, mcpproxy.SinkOptions{}); err != nil {
			return err
		}
		cfg.Sink = sink
		if *applyMigrations || *haltOnDrift {
			agentClient, err := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: *agentID, Names: names})
			if err != nil {
				fmt.Fprintf(sio.err, "toolsentry mcp-proxy: directives unavailable (%v): calls are forwarded as they are\n", err)
			} else {
				defer func() {
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mcpProxyShutdown)
					defer cancel()
					_ = agentClient.Close(cctx)
				}()
				cfg.Hook = directiveHook(agentClient.Hook(*applyMigrations, *haltOnDrift))
				cfg.ListHook = listedHook(agentClient)
			}
		}
	}
	proxy, err := mcpproxy.New(cfg)
	if err != nil {
		return err
	}

	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = sio.err
	// The session ends when the server does: a signal to the proxy is
	// forwarded to it rather than cutting it off.
	code, runErr := mcpproxy.RunCommand(context.WithoutCancel(ctx), proxy, cmd, sio.in, sio.out, signals)

	mcpProxySummary(ctx, sio, proxy, sink)
	if runErr != nil {
		return runErr
	}
	if code != 0 {
		return errExit(code)
	}
	return nil
}

// mcpProxySummary publishes the last events and says on standard error
// what telemetry was lost, if any.
func mcpProxySummary(ctx context.Context, sio stdio, proxy *mcpproxy.Proxy, sink *mcpproxy.JetStreamSink) {
	ps := proxy.Stats()
	log := zerolog.Ctx(ctx)
	if sink == nil {
		if ps.Observations+ps.Invocations > 0 {
			fmt.Fprintf(sio.err, "toolsentry mcp-proxy: telemetry: %d events not published (no NATS connection)\n", ps.Observations+ps.Invocations)
		}
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mcpProxyShutdown)
	defer cancel()
	_ = sink.Close(cctx)
	ss := sink.Stats()
	lost := ps.Observations + ps.Invocations + ps.TelemetryDrops - ss.Stored - ss.Duplicates
	if lost > 0 || ps.TelemetryFails > 0 {
		fmt.Fprintf(sio.err, "toolsentry mcp-proxy: telemetry: %d events published, %d not (dropped %d, not acknowledged %d), %d could not be built\n",
			ss.Stored+ss.Duplicates, lost, ss.Dropped+ps.TelemetryDrops, ss.Failed, ps.TelemetryFails)
		return
	}
	log.Info().Int64("observations", ps.Observations).Int64("invocations", ps.Invocations).Int64("relists", ps.Relists).Msg("mcp-proxy: session over, telemetry published")
}

// directiveHook adapts the agent client's guard (agent.Agent.Hook) to
// the proxy's call hook: a payload rewritten by the migration in force, or
// a HALT answered to the client as a JSON-RPC error that names the
// directive, its verdict and manifest digest. Any other failure of the
// guard lets the call through unchanged: a broken guard never breaks the
// agent.
func directiveHook(guard agent.CallHook) mcpproxy.CallHook {
	return func(ctx context.Context, call mcpproxy.Call) (json.RawMessage, *mcpproxy.HaltError, error) {
		args, err := guard(ctx, call.ToolID, call.Arguments)
		var halt *agent.HaltError
		switch {
		case errors.As(err, &halt):
			data, _ := json.Marshal(map[string]string{
				"action":          string(halt.Directive.Action),
				"directive":       halt.Directive.Directive,
				"verdict":         halt.Directive.Verdict.Name,
				"manifest_digest": halt.Directive.Verdict.ManifestDigest,
			})
			return nil, &mcpproxy.HaltError{Message: halt.Error(), Data: data}, nil
		case err != nil:
			return nil, nil, err
		}
		return args, nil, nil
	}
}

// listedHook tells the agent's guard of every tool the server lists, before
// the client sees the list: a silently upgraded tool is judged at once, so
// the agent's very first call is migrated or halted (agent.Agent.Listed).
func listedHook(client *agent.Agent) mcpproxy.ListHook {
	return func(ctx context.Context, server string, tools []events.MCPTool) {
		for _, t := range tools {
			id := events.QualifiedToolID(server, t.Name)
			d, err := client.Listed(id, t)
			switch {
			case err != nil:
				zerolog.Ctx(ctx).Debug().Err(err).Str("tool", id).Msg("mcp-proxy: listed tool not judged")
			case d != nil:
				plan, _ := json.Marshal(d.Migration) // paths and types, never values
				zerolog.Ctx(ctx).Info().RawJSON("migration", plan).Str("tool", id).Str("verdict", d.Verdict.Name).
					Str("action", string(d.Action)).Str("manifest_digest", d.Verdict.ManifestDigest).
					Str("from_fingerprint", d.FromFingerprint).Str("to_fingerprint", d.ToFingerprint).
					Msg("mcp-proxy: a listed version serve has not judged yet, judged here")
			}
		}
	}
}
