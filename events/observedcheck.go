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
		return observedList.plain(m)
	}
	return observedTool.plain(m)
}

// plainObject is an object of tool.schema.observed.v1 as plainSchemaObserved
// checks it: the members it knows, which are those the schema declares
// (TestFastPathsKnowSchemaMembers holds the two together).
type plainObject struct {
	closed  bool // additionalProperties is false: no other member
	members []plainMember
}

// plainMember is a member of a plainObject: its name, whether the object
// needs it, and what its value must plainly be.
type plainMember struct {
	name     string
	required bool
	ok       func(v any) bool
}

// The objects of tool.schema.observed.v1, by where the schema declares them.
var (
	// observedList is #/then, a tools/list result of a server.
	observedList = plainObject{closed: true, members: []plainMember{
		{"tools", true, toolsListResult.plain},
		{"server", true, plainID},
	}}
	// observedTool is #/else, one tool.
	observedTool = plainObject{closed: true, members: []plainMember{
		{"tool_id", true, plainID},
		{"version", true, func(v any) bool { return plainText(v, 1, 128) }},
		{"tool", true, mcpTool.plain},
		{"server", false, plainID},
	}}
	// toolsListResult is #/$defs/toolsListResult, an MCP tools/list result.
	toolsListResult = plainObject{members: []plainMember{
		{"tools", true, plainTools},
		{"nextCursor", false, anyText},
		{"_meta", false, isObject},
	}}
	// mcpTool is #/$defs/tool, an MCP Tool object.
	mcpTool = plainObject{members: []plainMember{
		{"name", true, func(v any) bool { return plainText(v, 1, 128) }},
		{"title", false, anyText},
		{"description", false, anyText},
		{"inputSchema", true, objectSchema.plain},
		{"outputSchema", false, objectSchema.plain},
		{"annotations", false, isObject},
		{"_meta", false, isObject},
	}}
	// objectSchema is #/$defs/objectSchema: an object whose type, if
	// present, is "object" (a schema without type, anything goes, is taken).
	objectSchema = plainObject{members: []plainMember{
		{"type", false, func(v any) bool { return v == "object" }},
	}}
)

// knows reports whether name is one of the members of o.
func (o *plainObject) knows(name string) bool {
	for _, m := range o.members {
		if m.name == name {
			return true
		}
	}
	return false
}

// plain reports whether v is an object that plainly satisfies o: no
// member o does not know if o is closed, every required member present,
// and every member present plainly what it must be.
func (o *plainObject) plain(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if o.closed {
		for k := range m {
			if !o.knows(k) {
				return false
			}
		}
	}
	for _, member := range o.members {
		x, ok := m[member.name]
		if !ok {
			if member.required {
				return false
			}
			continue
		}
		if !member.ok(x) {
			return false
		}
	}
	return true
}

// plainID is #/$defs/id: a string of 1 to 128 code points.
func plainID(v any) bool { return plainText(v, 1, 128) }

// plainText reports whether v is a string of min to max code points (max
// < 0: no bound).
func plainText(v any, min, max int) bool {
	s, ok := v.(string)
	return ok && textLen(s, min, max)
}

// anyText reports whether v is a string.
func anyText(v any) bool { return plainText(v, 0, -1) }

// plainTools is the tools of #/$defs/toolsListResult: at most 1000 MCP
// tools.
func plainTools(v any) bool {
	tools, ok := v.([]any)
	if !ok || len(tools) > 1000 {
		return false
	}
	for _, t := range tools {
		if !mcpTool.plain(t) {
			return false
		}
	}
	return true
}

// isObject reports whether v is an object.
func isObject(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}
