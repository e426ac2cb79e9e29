// Package schemas holds the JSON Schema (draft 2020-12) of every toolsentry
// event payload, embedded in the binary, and validates payloads against them.
//
// One file per payload and version, named after the CloudEvents type without
// its "io.toolsentry." prefix:
//
//	tool.schema.observed.v1.json   io.toolsentry.tool.schema.observed.v1
//	tool.invocation.v1.json        io.toolsentry.tool.invocation.v1
//	tool.contract.v1.json          io.toolsentry.tool.contract.v1
//	workflow.declared.v1.json      io.toolsentry.workflow.declared.v1
//	verdict.schema.v1.json         io.toolsentry.verdict.schema.v1
//	verdict.composition.v1.json    io.toolsentry.verdict.composition.v1
//	workflow.observed.v1.json      io.toolsentry.workflow.observed.v1
//
// Envelopes are closed (additionalProperties: false): a misspelt field is an
// error, never ignored. Objects defined by others (an MCP Tool, a JSON Schema
// inside a workflow) stay open. The documents are compiled once, on first
// use, and validation allocates little: it is on the hot path of every event.
//
//	v, _ := jsonschema.UnmarshalJSON(r) // or encoding/json with UseNumber
//	if err := schemas.Validate(schemas.ToolInvocationV1, v); err != nil {
//		// errors.Is(err, schemas.ErrInvalid); the message names the JSON Pointer
//	}
//
// Package events decodes CloudEvents and calls this package; most code
// should use events, not schemas directly.
package schemas
