// Package otlp translates OpenTelemetry traces into toolsentry telemetry:
// what agents already emit (GenAI spans, MCP client spans) becomes the
// events the stream processor judges, with no hand-written events. It is
// pure: bytes or an OTLP ExportTraceServiceRequest in, events.Message out.
//
//	OTLP/HTTP protobuf ──ParseProtobuf─┐
//	OTLP/JSON ─────────ParseJSON───────┼─▶ ExportTraceServiceRequest ──Translate──▶ Result{Messages, Rejected}
//	trace file ────────ReadFile────────┘   (collector file exporter lines, or the Go SDK stdout exporter)
//
// # Mapping (OpenTelemetry GenAI and MCP semantic conventions)
//
// Tool calls. A span with gen_ai.operation.name = "execute_tool" (named
// "execute_tool {gen_ai.tool.name}"), or an MCP span with mcp.method.name =
// "tools/call" (named "tools/call {gen_ai.tool.name}"), is one invocation
// (io.toolsentry.tool.invocation.v1):
//
//	tool_id         gen_ai.tool.name (else the tool in the span name), qualified
//	                with its server when the span or its MCP partner names one
//	                in mcp.server.name (events.QualifiedToolID: server/tool)
//	agent_id        gen_ai.agent.name of the nearest enclosing invoke_agent span,
//	                else the span's own gen_ai.agent.name, else the resource's service.name
//	argument_types  the paths and JSON types of gen_ai.tool.call.arguments (structured,
//	                or a JSON string); the values are dropped here and never leave
//	outcome         "error" when error.type is set (its value is error_type) or the
//	                span status is ERROR, else "ok"; correct from the span's
//	                gen_ai.evaluation.result events (below)
//	trace_id, span_id, parent_span_id, latency_ms (end − start)
//	workflow_id     the enclosing agent's composition id (below)
//
// A framework execute_tool span and an MCP tools/call span describe the same
// call when they carry the same gen_ai.tool.call.id in one trace, or when the
// MCP span is a child of the execute_tool span for the same tool: the call is
// counted once, as the framework span, with the arguments, errors and
// evaluations of both.
//
// Correctness. gen_ai.evaluation.result events on a tool span judge it by
// gen_ai.evaluation.score.label (case-insensitive): pass, passed, correct,
// true, yes, success, succeeded are correct; fail, failed, incorrect, false,
// no, failure are not; any other label (and a bare score, whose scale the
// conventions leave to the evaluator) is no judgement, nor is an evaluation
// that carries error.type (it did not complete). One failing evaluation
// makes the call incorrect. Evaluations exported as log records, not span
// events, do not reach a traces receiver.
//
// Observed workflows. The tool calls whose nearest enclosing span with
// gen_ai.operation.name = "invoke_agent" is the same become one observed run
// (io.toolsentry.workflow.observed.v1): the calls in start order, calls that
// overlap in time grouped in a parallel (mode all) block, each with its
// outcome; success when every call succeeded (ok, not judged incorrect) and
// the agent span has no error (error.type, status ERROR, a failing
// evaluation). Its composition_id is the agent span's
// toolsentry.composition.id attribute, else its gen_ai.agent.name.
//
// Tool definitions. gen_ai.tool.definitions (on inference and agent spans:
// a list of {type, name, description, parameters, response}, structured or
// a JSON string) becomes one schema observation per tool, an MCP Tool with
// inputSchema = parameters and outputSchema = response. Definitions name no
// MCP server, so their tools keep bare ids: where call spans name their
// server, list its tools with the MCP proxy or `toolsentry emit --server`
// too, so that the calls meet the baselines of the server's tools.
//
// MCP servers. OpenTelemetry's MCP conventions have no attribute that names
// an MCP server as its serverInfo.name does (client spans carry the network
// peer, server.address and server.port); the receiver reads
// mcp.server.name, which MCP clients' instrumentation emits, on a call span
// or its MCP partner. A call without it keeps the tool's bare id.
//
// Provider. gen_ai.provider.name, or the deprecated gen_ai.system, of the
// span (for a tool call: else of its agent span) travels as the CloudEvents
// extension attribute genaiprovider.
//
// Every other span is ignored, as are attributes not named here.
//
// # Ids and duplicates
//
// An invocation's event id is "<trace id>-<span id>" of its span, an
// observed run's that of its invoke_agent span: exporting the same trace
// again yields the same ids, and the telemetry stream's duplicate window
// drops them. A definition's id and version derive from the definition
// itself, because every inference span repeats the definitions: the stream
// keeps one observation per definition per duplicate window.
//
// # Traces split across exports
//
// Translate sees one export at a time. A tool span whose invoke_agent span
// is in another export is still an invocation (its agent falls back to the
// span's own gen_ai.agent.name or service.name) but is not part of an
// observed run, and an MCP span is paired only with a framework span of the
// same export. SDK batch processors export a trace's spans together when
// they end within one batch; a collector's groupbytrace processor guarantees
// it. ReadFile merges a whole file into one request.
//
// # Errors
//
// A GenAI span that cannot be translated (a tool span with no tool name,
// arguments that are not a JSON object, ids of the wrong length, definitions
// that are not a list of tools, an invoke_agent span with calls but no
// composition id) is reported in Result.Rejected as a *SpanError naming the
// span and wrapping ErrBadSpan; the rest of the export is translated.
// Input that is not OTLP at all is ErrNotOTLP. No error quotes an attribute
// value.
package otlp
