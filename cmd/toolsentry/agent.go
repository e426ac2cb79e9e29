package main

import (
	"context"
	"flag"

	"github.com/toolsentry/toolsentry/events"
)

func init() {
	register(&command{
		name:    "agent",
		summary: "mark an agent migrated to a tool's current version, or forget its usage",
		usage:   agentUsage,
		run:     runAgent,
	})
}

const agentUsage = `Usage: toolsentry agent migrated --agent AGENT --tool TOOL [--fingerprint FP] [--reason TEXT]
       toolsentry agent forget --agent AGENT --tool TOOL --yes [--reason TEXT]

Changes what ` + "`toolsentry serve`" + ` knows of one agent's use of one tool (KV
bucket toolsentry-usage: the input fields it sends and the output fields it
reads), which decides whether a tool's drift touches the agent.

  migrated  the agent now sends what the tool's current version asks: its
            recorded fields move along the migration of its drift (a renamed
            field takes its new name, a converted one its new type), fields
            the current version does not declare are dropped, and a
            SCHEMA_MATCH verdict for the agent replaces its directive
            (toolsentry guard: PROCEED, no migration). Use it once the agent
            was updated, typically after ` + "`toolsentry baseline accept`" + `.
  forget    delete the agent's usage of the tool (a retired agent): its
            fields no longer hold the tool's baseline on drift. Its next call
            records its usage anew. Its directive in force stays until the
            next verdict about it.

Neither writes the bucket: each publishes an operator event
(io.toolsentry.operator.agent.migrated.v1 / ...agent.forgotten.v1) on the
tool's telemetry subject, recording who (--operator) and why (--reason), and
waits until serve's lane for the tool has applied it, in stream order with
the tool's observations and calls, so that ` + "`toolsentry replay`" + ` re-derives what
follows.

Exit status: 0 on success (also when there was nothing to forget); 1 when
serve refused the action (no usage recorded, no baseline, or the current
version is not --fingerprint: the reason is printed) or did not apply it
within --wait, or NATS cannot be reached; 2 on a usage error.

Flags (they may come before or after the subcommand):
  --agent AGENT      the agent's id, as its invocations name it (required)
  --tool TOOL        the tool's id, qualified by its server as verdicts name
                     it (github/search_issues; required)
  --fingerprint FP   migrated: only if the tool's current version has this
                     fingerprint (default: whatever it is when applied)
  --yes              forget: confirm the deletion (required)
` + operatorFlagsHelp + `
` + connFlagsHelp + `
Examples:
  toolsentry agent migrated --agent triage-bot --tool github/search_issues --reason "bot v2.3 sends perPage"
  toolsentry agent forget --agent old-bot --tool crm.lookup --yes
`

func runAgent(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	agent := fs.String("agent", "", "")
	tool := fs.String("tool", "", "")
	fingerprint := fs.String("fingerprint", "", "")
	yes := fs.Bool("yes", false, "")
	op := addOperatorFlags(fs)
	conn := addConnFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("agent needs one subcommand, migrated or forget; got %q", pos)
	}
	var kind events.Kind
	switch pos[0] {
	case "migrated":
		kind = events.KindAgentMigrated
	case "forget":
		kind = events.KindAgentForgotten
	default:
		return usageErrorf("unknown agent subcommand %q: want migrated or forget", pos[0])
	}
	switch {
	case *agent == "" || *tool == "":
		return usageErrorf("agent %s needs --agent and --tool", pos[0])
	case *fingerprint != "" && kind != events.KindAgentMigrated:
		return usageErrorf("--fingerprint goes with agent migrated")
	case *yes && kind != events.KindAgentForgotten:
		return usageErrorf("--yes goes with agent forget")
	case kind == events.KindAgentForgotten && !*yes:
		return usageErrorf("agent forget deletes what %s is known to do with %s: add --yes to do it", *agent, *tool)
	}
	if err := op.validate(); err != nil {
		return err
	}
	if _, err := events.KVKey(*tool, *agent); err != nil {
		return usageErrorf("--tool %q, --agent %q: %v", *tool, *agent, err)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	nc, js, err := conn.connect(ctx, "toolsentry agent")
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := js.Stream(ctx, names.TelemetryStream()); err != nil {
		return conn.notProvisioned(err, "stream "+names.TelemetryStream())
	}
	return operate(ctx, js, names, kind, events.OperatorAction{ToolID: *tool, AgentID: *agent, Fingerprint: *fingerprint}, op, "toolsentry/agent", sio)
}
