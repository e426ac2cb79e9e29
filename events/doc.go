// Package events is toolsentry's event contract: the CloudEvents it reads
// and writes on NATS JetStream, their subjects, and the names of the
// streams and buckets that hold them.
//
//	 agents, SDKs, MCP tools/list                     toolsentry worker
//	 NewInvocation, NewSchemaObserved, ...            Decode ──▶ guards ──▶ NewSchemaVerdict
//	        │                                            ▲           │      NewCompositionVerdict
//	        ▼                                            │           ▼
//	toolsentry.telemetry.<kind>.<key>  ── TOOLSENTRY_TELEMETRY    toolsentry.verdicts.<guard>.<verdict>.<key>
//	  kind: schema | invocation | contract | workflow | observed     ── TOOLSENTRY_VERDICTS
//	  (operators: baseline_accepted | baseline_reset | agent_migrated | agent_forgotten)
//	                                   bad input ──▶ toolsentry.dlq.<reason> ── TOOLSENTRY_DLQ
//
// # Types and payloads
//
// Eleven CloudEvents types, each with one Go payload and one JSON Schema in
// package schemas (the four operator types share one Go payload):
//
//	io.toolsentry.tool.schema.observed.v1   SchemaObserved       key: tool_id, or server for a tools/list result
//	io.toolsentry.tool.invocation.v1        Invocation           key: tool_id
//	io.toolsentry.tool.contract.v1          Contract             key: tool_id
//	io.toolsentry.workflow.declared.v1      Workflow             key: composition_id
//	io.toolsentry.verdict.schema.v1         SchemaVerdict        key: tool_id
//	io.toolsentry.verdict.composition.v1    CompositionVerdict   key: composition_id
//	io.toolsentry.workflow.observed.v1      WorkflowObserved     key: composition_id
//	io.toolsentry.operator.baseline.accepted.v1   OperatorAction key: tool_id
//	io.toolsentry.operator.baseline.reset.v1      OperatorAction key: tool_id
//	io.toolsentry.operator.agent.migrated.v1      OperatorAction key: tool_id
//	io.toolsentry.operator.agent.forgotten.v1     OperatorAction key: tool_id
//
// # Decoding
//
// Decode takes what a NATS message has, its subject, headers and body, and
// returns an Event with the attributes, the subject's key and the payload.
// It accepts structured mode (a JSON event, Content-Type
// application/cloudevents+json or none) and binary mode (ce- headers,
// case-insensitive, percent-decoded; data in the body), refuses anything
// that breaks CloudEvents 1.0, its JSON format or NATS binding, validates the
// data against its JSON Schema, and checks the event against its subject.
// Every error wraps one sentinel (ErrNotCloudEvent, ErrSpecViolation,
// ErrUnknownType, ErrSchemaInvalid, ErrSubjectMismatch, ErrBadSubject) that
// ReasonFor maps to a dead-letter reason:
//
//	ev, err := events.Decode(msg.Subject(), msg.Headers(), msg.Data())
//	if err != nil {
//		reason, _ := events.ReasonFor(err) // permanent: the consumer engine dead-letters it
//	}
//	switch ev.Kind {
//	case events.KindInvocation:
//		ev.Invocation.ArgumentTypes.Leaves() // the input surface, as guards computes it
//	}
//
// Argument values never reach an Event: the decoder reads an invocation's
// "arguments" as field paths and JSON types only ("options.limit":
// integer, "items[].id": string) while it parses, and no value becomes a Go
// value. Agents' clients do the same before sending, with FieldTypesOf, so
// values never leave the agent.
//
// # Encoding
//
// The New* constructors and Encode write structured-mode events and return
// a Message: subject, id, headers (Nats-Msg-Id = the CloudEvent id, so the
// stream's duplicate window drops a repeated publish) and body. Encode checks
// its output with Decode. Verdict ids are not random: VerdictID derives
// them from the input event's id, the guard, the key, the agent and the
// manifest digest, and a verdict's time is its input's time, so a
// redelivered or replayed input yields the very same verdict message.
//
// # Signed, chained verdicts
//
// Each verdict can carry two extension attributes. AttrPrevious links it to
// the previous verdict of its chain (ChainKey: guard and key): the
// VerdictDigest of that verdict, set with WithPrevious, absent on a chain's
// first verdict; deleting a verdict breaks its successor's link.
// AttrSignature holds a DSSE envelope signing the verdict's VerdictDigest
// (package publisher signs and verifies), after the CloudEvents
// verifiability extension. The digest covers every attribute but the
// signature, the link included, and the data, in RFC 8785 canonical form.
// Decode accepts verdicts with and without both attributes and returns them
// in Event.Extensions.
//
// # Subjects and keys
//
// Names derives subjects, streams and KV buckets from one prefix (default
// "toolsentry"). A key (any Unicode id) becomes one subject token with
// KeyToken: A-Z a-z 0-9 - _ / stay, every other byte becomes '=' and two
// upper-case hex digits, so "crm.lookup" is "crm=2Elookup". The token is
// also a valid KV key; KVKey joins several.
//
// # Tool identity
//
// A tool is (server, tool name): QualifiedToolID("github", "get_issue") is
// "github/get_issue", the tool_id of that tool in every event, record,
// verdict and subject (toolsentry.telemetry.schema.github/get_issue);
// SplitToolID takes it apart. A tool observed with no server keeps its bare
// name. The worker qualifies the tools of a tools/list result with the
// list's server; producers that know the server (mcp-proxy, the OTLP
// receiver, the agent client, guard) qualify the ids they send.
//
// # Directives
//
// Directive is the value of the directives bucket: what the latest verdict
// about a tool (for one agent, or for all) or a composition tells agents to
// do. DirectiveOf derives it from a verdict; SchemaDirectiveKey,
// CompositionDirectiveKey and AgentDirectiveFilters name its keys and the
// watch filters of one agent's own keys.
package events
