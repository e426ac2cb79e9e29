package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fingerprintRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func TestFingerprintCommand(t *testing.T) {
	one := filepath.Join(toolschemaCases, "snake_to_camel", "old.json")
	out, errOut, code := runToolsentry(t, "", "fingerprint", one)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	single := strings.TrimSpace(out)
	if !fingerprintRE.MatchString(single) {
		t.Fatalf("output %q is not one fingerprint", out)
	}

	// The same tool from standard input, keys reordered and types respelled.
	raw, err := os.ReadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["annotations"] = map[string]any{"openWorldHint": true, "readOnlyHint": true, "title": "List issues", "destructiveHint": true}
	respelled, _ := json.MarshalIndent(doc, "", "\t")
	out, _, code = runToolsentry(t, string(respelled), "fingerprint", "-")
	if code != 0 || strings.TrimSpace(out) != single {
		t.Errorf("stdin: exit %d, %q; want %s", code, out, single)
	}

	out, _, code = runToolsentry(t, "", "fingerprint", "testdata/diff/tools_list_v1.json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[0], "  read_file") || !strings.HasSuffix(lines[1], "  write_file") {
		t.Errorf("tools/list: exit %d\n%s", code, out)
	}
	for _, l := range lines {
		if fp, _, _ := strings.Cut(l, "  "); !fingerprintRE.MatchString(fp) {
			t.Errorf("line %q does not start with a fingerprint", l)
		}
	}

	out, _, code = runToolsentry(t, "", "fingerprint", "--json", "testdata/diff/tools_list_v1.json")
	var list []struct{ Name, Fingerprint string }
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list) != 2 || list[0].Name != "read_file" {
		t.Errorf("--json: exit %d, %v\n%s", code, err, out)
	}
	if !strings.HasPrefix(lines[0], list[0].Fingerprint) {
		t.Errorf("--json and text disagree: %s vs %s", list[0].Fingerprint, lines[0])
	}
}

func TestFingerprintErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fingerprint"}, 2, "needs one FILE"},
		{[]string{"fingerprint", "a.json", "b.json"}, 2, "needs one FILE"},
		{[]string{"fingerprint", "nope.json"}, 1, "nope.json"},
		{[]string{"fingerprint", "testdata/diff/not_json.txt"}, 1, "not valid JSON"},
	} {
		_, errOut, code := runToolsentry(t, "", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	out, _, _ := runToolsentry(t, "", "fingerprint", "--help")
	if !strings.Contains(out, "RFC 8785") || !strings.Contains(out, "Example:") {
		t.Errorf("help:\n%s", out)
	}
}
