// Package mcpproxy is a stdio proxy between an MCP client (an agent) and an
// MCP server that it starts as a child process: it forwards every message
// unchanged and turns what it sees into toolsentry telemetry, so that an
// agent using stdio MCP servers is watched without a line of code changed.
//
//	MCP client ── stdin ──▶ Proxy ── child's stdin ──▶ MCP server (CMD ARGS...)
//	           ◀─ stdout ──       ◀─ child's stdout ──
//	                          │
//	                          └─ Sink (non-blocking) ──▶ toolsentry.telemetry.schema.<server>
//	                                                      toolsentry.telemetry.invocation.<server>/<tool>
//
// Messages are newline-delimited JSON-RPC, as the MCP stdio transport
// specifies; the proxy reads lines of any length and writes each one out
// with the very bytes it read. It pairs requests with their responses by
// id, in both directions' terms:
//
//   - every tools/list result the server sends (each page: the client
//     follows nextCursor itself) becomes a schema observation of the server;
//   - notifications/tools/list_changed tells the client to list again; if
//     it does not within Config.RelistAfter, the proxy sends the server the
//     client's last tools/list request again under an id of its own (a
//     string no client uses), follows its pages, and swallows the
//     responses: the client never sees them, and the fingerprints the
//     agent integrated against stay those the client saw;
//   - every tools/call becomes an invocation event when its response
//     arrives: the tool (its qualified id, server/tool, the server being
//     Config.Server or the one serverInfo names), the agent, the paths and JSON types of the
//     arguments (never their values), the latency, the outcome (error for a
//     JSON-RPC error or "isError": true, else ok), the fingerprint of the
//     tool's schema as the client last saw it listed, and the trace and
//     parent span ids of a W3C traceparent in the request's _meta (so that
//     the call joins the agent's OpenTelemetry trace).
//
// Batches (JSON arrays of messages, protocol 2025-03-26) are read element by
// element, whatever the protocol version (the server decides whether to
// accept them), and forwarded as they came.
//
// Telemetry never blocks or breaks the forwarding: events go to a Sink whose
// Send does not wait (JetStreamSink queues them, publishes asynchronously and
// counts what it drops or the stream does not acknowledge), so a NATS server
// that is down costs telemetry, never messages.
//
// A CallHook sees every outgoing tools/call before it is forwarded. It may
// let it pass (the bytes are forwarded unchanged), rewrite its arguments
// (the message is re-encoded with the new arguments, nothing else changed)
// or refuse it with a HaltError, which the client receives as the JSON-RPC
// error response of its request while the server never sees the call:
// the place where migrations are applied and drifted calls halted.
//
// RunCommand starts the server process, forwards signals to it, and returns
// its exit status once it has exited.
package mcpproxy
