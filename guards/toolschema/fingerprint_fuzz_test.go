package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzToolFingerprint covers what the stream processor computes for every
// schema observation: ParseToolDocument then Fingerprint, on MCP tools,
// tools/list results and bare schemas. No panic; errors wrap ErrInvalid;
// the fingerprint is deterministic and does not depend on key order.
func FuzzToolFingerprint(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "toolschema", "*", "*.json"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"b","inputSchema":{"type":"object","properties":{"x":{"type":"string"}}}}]}`))
	f.Add([]byte(`{"type":"object","properties":{"q":{"$ref":"#"}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tools, err := ParseToolDocument(raw)
		if err != nil {
			if !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("ParseToolDocument accepted what json.Unmarshal rejects: %v", err)
		}
		var buf bytes.Buffer
		reorderJSON(&buf, doc)
		reordered, err := ParseToolDocument(buf.Bytes())
		if err != nil {
			t.Fatalf("reordered document rejected: %v", err)
		}
		if len(reordered) != len(tools) {
			t.Fatalf("%d tools, %d after reordering keys", len(tools), len(reordered))
		}
		for i, tool := range tools {
			fp, err := Fingerprint(tool)
			if err != nil {
				if !errors.Is(err, guards.ErrInvalid) {
					t.Fatalf("error %v does not wrap ErrInvalid", err)
				}
				continue
			}
			if again, _ := Fingerprint(tool); again != fp {
				t.Fatalf("fingerprint not deterministic: %s then %s", fp, again)
			}
			if other, _ := Fingerprint(reordered[i]); other != fp {
				t.Fatalf("key order changed the fingerprint of tool %d: %s then %s", i, fp, other)
			}
		}
	})
}
