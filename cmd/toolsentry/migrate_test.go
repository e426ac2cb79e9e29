package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestMigrateCommand(t *testing.T) {
	caseFiles := func(name string) (string, string) {
		dir := filepath.Join(toolschemaCases, name)
		return filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	}
	tests := []struct {
		name, tool, payload string
		code                int
		stdout, stderr      string
	}{
		{"rename at depth and in arrays", "snake_to_camel",
			`{"owner":"o","repo":"r","per_page":10,"label_filter":{"match_all":true},"assignees":[{"user_login":"mona"}]}`, 0,
			`{"assignees":[{"userLogin":"mona"}],"labelFilter":{"matchAll":true},"owner":"o","perPage":10,"repo":"r"}` + "\n", ""},
		{"numbers kept as written", "snake_to_camel", `{"owner":"o","repo":"r","per_page":1.50e1}`, 0,
			`{"owner":"o","perPage":1.50e1,"repo":"r"}` + "\n", ""},
		{"enum mapped", "enum_uppercased", `{"owner":"o","repo":"r","state":"closed"}`, 0,
			`{"owner":"o","repo":"r","state":"CLOSED"}` + "\n", ""},
		{"enum value without counterpart", "enum_uppercased", `{"owner":"o","repo":"r","state":"all"}`, 1,
			"", "cannot migrate state: enum values of state were removed and have no unique counterpart"},
		{"boolean replaced by an enum", "boolean_to_enum", `{"query":"q","safesearch":false}`, 1, "", "cannot migrate safesearch"},
		{"recursive", "recursive_filter", `{"database_id":"d","filter":{"op":"equals","and":[{"op":"contains","and":[{"op":"equals"}]}]}}`, 0,
			`{"database_id":"d","filter":{"and":[{"and":[{"operator":"equals"}],"operator":"contains"}],"operator":"equals"}}` + "\n", ""},
		{"default relied on, field replaced", "default_replaced", `{"ref":"HEAD"}`, 1, "",
			"cannot migrate include_diff: field include_diff (default true) was removed: a payload that omits it relied on its default"},
		{"empty schema typed, payload fits", "typed_empty_schema", `{"path":"/srv/a.txt"}`, 0, `{"path":"/srv/a.txt"}` + "\n", ""},
		{"empty schema typed, required field omitted", "typed_empty_schema", `{}`, 1, "", "cannot migrate path: path is now required"},
		{"not JSON", "enum_uppercased", `{"owner":`, 1, "", "reading the payload from standard input"},
		{"two values", "enum_uppercased", `{} {}`, 1, "", "data after the JSON value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, new := caseFiles(tc.tool)
			out, errOut, code := runToolsentry(t, tc.payload, "migrate", old, new)
			if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr containing %q", code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestMigrateUsage(t *testing.T) {
	if _, errOut, code := runToolsentry(t, "{}", "migrate", "only-one.json"); code != 2 || !strings.Contains(errOut, "needs two files") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	out, _, code := runToolsentry(t, "", "migrate", "-h")
	if code != 0 || !strings.Contains(out, "Usage: toolsentry migrate") || !strings.Contains(out, "Example:") || !strings.Contains(out, "--tool NAME") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	// A tools/list needs --tool; with it the right tool is migrated.
	out, errOut, code := runToolsentry(t, `{"path":"a.txt","content":"x"}`, "migrate", "testdata/diff/tools_list_v1.json", "testdata/diff/tools_list_v2.json", "--tool", "write_file")
	if code != 0 || out != `{"content":"x","path":"a.txt"}`+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
