package events

// plainSchemaObserved lets Decode skip the JSON Schema validator for the
// schema observations it can see are valid at a glance: the validator is
// the larger part of decoding one (half of it, measured on the bench mix),
// and observations are the second most frequent event. It is sound, not
// complete: whatever it accepts, tool.schema.observed.v1 accepts
// (FuzzPlainSchemaObserved holds it to that); what it does not accept goes
// to the validator, which gives the reason.

// plainSchemaObserved reports whether data, a tree as parseJSON builds it,
// plainly satisfies tool.schema.observed.v1: one tool ({tool_id, version,
// tool, server?}) or a tools/list result ({tools, server}), the envelope
// closed, the MCP objects open.
func plainSchemaObserved(data any) bool {
	m, ok := data.(map[string]any)
	if !ok {
		return false
	}
	if _, list := m["tools"]; list {
		return len(m) == 2 && plainID(m["server"]) && plainToolsList(m["tools"])
	}
	for k := range m {
		switch k {
		case "tool_id", "version", "tool", "server":
		default:
			return false
		}
	}
	if s, ok := m["server"]; ok && !plainID(s) {
		return false
	}
	return plainID(m["tool_id"]) && plainText(m["version"], 1, 128) && plainMCPTool(m["tool"])
}

// plainID is #/$defs/id: a string of 1 to 128 code points.
func plainID(v any) bool { return plainText(v, 1, 128) }

// plainText reports whether v is a string of min to max code points (max
// < 0: no bound).
func plainText(v any, min, max int) bool {
	s, ok := v.(string)
	return ok && textLen(s, min, max)
}

// plainToolsList is #/$defs/toolsListResult.
func plainToolsList(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	tools, ok := m["tools"].([]any)
	if !ok || len(tools) > 1000 {
		return false
	}
	for _, t := range tools {
		if !plainMCPTool(t) {
			return false
		}
	}
	if c, ok := m["nextCursor"]; ok && !plainText(c, 0, -1) {
		return false
	}
	return optionalObject(m, "_meta")
}

// plainMCPTool is #/$defs/tool, an MCP Tool object.
func plainMCPTool(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || !plainText(m["name"], 1, 128) || !objectSchema(m["inputSchema"]) {
		return false
	}
	for _, k := range []string{"title", "description"} {
		if s, ok := m[k]; ok && !plainText(s, 0, -1) {
			return false
		}
	}
	if s, ok := m["outputSchema"]; ok && !objectSchema(s) {
		return false
	}
	return optionalObject(m, "annotations") && optionalObject(m, "_meta")
}

// objectSchema is #/$defs/objectSchema: an object whose type, if present,
// is "object" (a schema without type, anything goes, is taken).
func objectSchema(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	t, typed := m["type"]
	return !typed || t == "object"
}

// optionalObject reports whether m[k] is absent or an object.
func optionalObject(m map[string]any, k string) bool {
	v, ok := m[k]
	if !ok {
		return true
	}
	_, ok = v.(map[string]any)
	return ok
}
