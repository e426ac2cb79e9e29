package events

import (
	"bytes"
	"encoding/json"
	"testing"
)

// refToolJSON is MCPTool.MarshalJSON as it was written before
// MCPTool.appendJSON: a map, marshalled. The writer must give its bytes.
func refToolJSON(t MCPTool) ([]byte, error) {
	m := make(map[string]any, 7+len(t.Other))
	for k, v := range t.Other {
		m[k] = v
	}
	m["name"] = t.Name
	if t.Title != "" {
		m["title"] = t.Title
	}
	if t.Description != "" {
		m["description"] = t.Description
	}
	m["inputSchema"] = t.InputSchema
	for k, v := range map[string]json.RawMessage{"outputSchema": t.OutputSchema, "annotations": t.Annotations, "_meta": t.Meta} {
		if v != nil {
			m[k] = v
		}
	}
	return marshalJSON(m)
}

// checkJSONWriters compares the writers with encoding/json on a string and
// a raw value used in every place a raw value goes.
func checkJSONWriters(t *testing.T, s string, raw []byte) {
	t.Helper()
	same := func(what string, got []byte, gotErr error, want []byte, wantErr error) {
		t.Helper()
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() || !bytes.Equal(got, want) {
			t.Fatalf("%s (%q, %q):\n got %s (%v)\nwant %s (%v)", what, s, raw, got, gotErr, want, wantErr)
		}
	}
	want, err := marshalJSON(s)
	same("string", appendMarshalString(nil, s), nil, want, err)

	var r json.RawMessage
	if raw != nil {
		r = json.RawMessage(raw)
	}
	v := schemaVerdict()
	v.Directive, v.AgentID, v.Version, v.Changes, v.Migration = s, s, s, r, r
	got, gotErr := v.appendJSON(nil)
	want, wantErr := marshalJSON(&v)
	same("schema verdict", got, gotErr, want, wantErr)
	v.AgentID, v.Affected = "", r
	got, gotErr = v.appendJSON(nil)
	want, wantErr = marshalJSON(&v)
	same("schema verdict without agent", got, gotErr, want, wantErr)

	tool := MCPTool{Name: s, Title: s, Description: s, InputSchema: r, OutputSchema: r, Annotations: r, Meta: r,
		Other: map[string]json.RawMessage{s: r, "title": json.RawMessage(`"other"`), "icons": json.RawMessage(`[]`), "zz": nil}}
	got, gotErr = tool.MarshalJSON()
	want, wantErr = refToolJSON(tool)
	same("tool", got, gotErr, want, wantErr)
	tool.Title, tool.Description, tool.OutputSchema, tool.Annotations, tool.Meta = "", "", nil, nil, nil
	got, gotErr = tool.MarshalJSON()
	want, wantErr = refToolJSON(tool)
	same("tool with Other behind absent fields", got, gotErr, want, wantErr)
	for _, tool := range []MCPTool{tool, {Name: s, Description: s + "<&>", InputSchema: r, Other: map[string]json.RawMessage{"a<b": r}}} {
		got, gotErr = tool.AppendJSON(nil)
		want, wantErr = json.Marshal(tool)
		same("tool, as json.Marshal writes it", got, gotErr, want, wantErr)
	}
}

var jsonWriterCases = []struct{ s, raw string }{
	{"", `null`},
	{"plain", `{"a":[1,2.5,"x"],"b":null}`},
	{"quote \" backslash \\ slash /", " { \"a\" : [ 1 ,\n 2 ] }\t"},
	{"controls \b \f \n \r \t \x00 \x1f \x7f", `"s"`},
	{"html <a href='x'>&amp;</a>", `["<>&", "\u003c"]`},
	{"separators in raw", "{\"a\u2029\":\"x\u2028<\"}"},
	{"separators \u2028 \u2029 and é € 😀", "[\"\u2028\"]"},
	{"invalid \xff \xc3 utf-8", `[]`},
	{"name", `{`},
	{"name", ``},
	{"name", `[1,]`},
	{"name", `"unterminated`},
	{"name", `1 2`},
}

// TestJSONWriters holds the writers of the hot path (strings, raw values,
// schema verdicts, MCP tools) to encoding/json's bytes and errors.
func TestJSONWriters(t *testing.T) {
	for _, tc := range jsonWriterCases {
		checkJSONWriters(t, tc.s, []byte(tc.raw))
	}
	checkJSONWriters(t, "nil raw", nil)
}

// FuzzJSONWriters holds the writers to encoding/json on any string and raw
// value.
func FuzzJSONWriters(f *testing.F) {
	for _, tc := range jsonWriterCases {
		f.Add(tc.s, []byte(tc.raw))
	}
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		checkJSONWriters(t, s, raw)
	})
}
