package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// NewToolsListObserved builds the schema observation of an MCP tools/list
// result, the JSON of its "result" member ({"tools": [...], "nextCursor":
// ...}), on server's subject: what `toolsentry emit --mcp-tools` and the MCP
// proxy publish. It returns the message and the observation as the
// processor will decode it (the tools in canonical form, for
// ToolFingerprint). The result is validated as every observation is: a
// result that is not a tools/list result is an error wrapping
// ErrSchemaInvalid or ErrBadEvent, and nothing is built.
func (n Names) NewToolsListObserved(meta Meta, server string, result json.RawMessage) (Message, *SchemaObserved, error) {
	subject, err := n.Telemetry(KindSchemaObserved, server)
	if err != nil {
		return Message{}, nil, err
	}
	body := make([]byte, 0, len(result)+256)
	body = append(body, `{"specversion":"1.0","id":`...)
	body = appendJSONString(body, meta.ID)
	body = append(body, `,"source":`...)
	body = appendJSONString(body, meta.Source)
	body = append(body, `,"type":`...)
	body = appendJSONString(body, TypeSchemaObserved)
	body = append(body, `,"subject":`...)
	body = appendJSONString(body, server)
	if !meta.Time.IsZero() {
		body = append(body, `,"time":`...)
		body = appendJSONString(body, meta.Time.UTC().Format(time.RFC3339Nano))
	}
	body = append(body, `,"data":{"server":`...)
	body = appendJSONString(body, server)
	body = append(body, `,"tools":`...)
	body = append(body, result...)
	body = append(body, `}}`...)
	ev, err := n.Decode(subject, nil, body)
	if err != nil {
		return Message{}, nil, fmt.Errorf("tools/list result: %w", err)
	}
	ev.Extensions = meta.Extensions
	msg, err := n.Encode(ev)
	if err != nil {
		return Message{}, nil, err
	}
	return msg, ev.SchemaObserved, nil
}

// ToolFingerprint is the fingerprint the processor gives a tool of a
// tools/list result (one without a version): the one its verdicts name as
// current_fingerprint, and the one an invocation's schema_fingerprint names
// to say which version the agent integrated against.
func ToolFingerprint(t MCPTool) (string, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("%w: tool %q: %v", guards.ErrInvalid, t.Name, err)
	}
	defs, err := toolschema.ParseToolDocument(raw)
	if err != nil {
		return "", err
	}
	if len(defs) != 1 {
		return "", fmt.Errorf("%w: tool %q holds %d tools", guards.ErrInvalid, t.Name, len(defs))
	}
	def := defs[0]
	def.ID = t.Name
	return toolschema.Fingerprint(def)
}
