// Package agent is the client that an agent embeds to close the loop with
// toolsentry: its invocation telemetry goes out off the call path, and its
// calls are guarded by the directives in force. It imports NATS's client
// (nats.go and its jetstream package), the event contract and the guards,
// and nothing of the server: no nats-server, no OpenTelemetry, no
// Prometheus, so an agent's binary stays small (a test checks this).
//
//	client, _ := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "billing-7"})
//	args, err := client.Guard(ctx, "crm.lookup", args)  ◀─ local view of the agent's directives
//	var halt *agent.HaltError                            (KV watch on schema.*.<agent>, schema.*,
//	if errors.As(err, &halt) { ... do not call ... }      composition.*): no round trip per call
//	... call the tool with args (rewritten by the migration in force) ...
//	client.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: args})
//	    ─▶ bounded queue ─▶ batched async publishes ─▶ TOOLSENTRY_TELEMETRY
//	       (full or NATS down: dropped and counted in Stats, never blocking)
//	d, err := client.Workflow(ctx, "etl")                ◀─ a degraded composition is a *HaltError
//
// See ExampleAgent for the whole loop on an embedded server.
//
// Guard's answer is the payload's, under the directive in force: PROCEED
// (or no directive) sends it as given; under MIGRATE or HALT it is judged
// against the tool's current input schema, which the view follows in the
// baselines bucket (ToolState): migrated by the verdict's
// toolschema.MigrationPlan when the result fits, as given when it already fits
// (the agent speaks the new version), else a HALT whose Cause is the
// plan's blocker it hits or ErrDoesNotFit with the places that do not fit.
// Without a known current schema the directive's action applies as it is.
// Guard has the shape of a call hook, func(ctx, tool, args) (args, error),
// for proxies (CallHook, Agent.Hook); DirectiveView.Guard decides for any
// agent (the HTTP endpoint of `toolsentry serve` uses it).
package agent
