package events

import (
	"strconv"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/schemas"
)

// observedDocs are schema observation data around the edges of
// tool.schema.observed.v1; plain says whether plainSchemaObserved must
// take it without the validator (the forms agents send every day).
var observedDocs = []struct {
	doc   string
	plain bool
}{
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, true},
	{`{"tool_id":"crm.lookup","version":"2","server":"crm","tool":{"name":"lookup","title":"Lookup","description":"Find a user","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}},"required":["user_id"]},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"_meta":{"v":1},"icons":[{"src":"x.png"}]}}`, true},
	{`{"server":"crm","tools":{"tools":[{"name":"lookup","inputSchema":{"type":"object"}},{"name":"update","inputSchema":{"type":"object"}}],"nextCursor":"p2","_meta":{}}}`, true},
	{`{"server":"crm","tools":{"tools":[]}}`, true},
	{`{"tool_id":"` + strings.Repeat("é", 128) + `","version":"` + strings.Repeat("v", 128) + `","tool":{"name":"` + strings.Repeat("n", 128) + `","inputSchema":{"type":"object"}}}`, true},
	{`{"tool_id":"` + strings.Repeat("é", 129) + `","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"","tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"crm.lookup","version":2,"tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2"}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"}},"extra":1}`, false},
	{`{"tool_id":"crm.lookup","version":"2","server":null,"tool":{"name":"lookup","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"","inputSchema":{"type":"object"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"array"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{}}}`, true},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"},"outputSchema":{}}}`, true},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":null}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":["object"]}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"},"outputSchema":{"type":"string"}}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup"}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"},"outputSchema":null}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"},"title":1}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"},"annotations":[]}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object"},"_meta":"m"}}`, false},
	{`{"tool_id":"crm.lookup","version":"2","tool":[]}`, false},
	{`{"server":"crm","tools":{"tools":[]},"tool_id":"x"}`, false},
	{`{"tools":{"tools":[]}}`, false},
	{`{"server":"crm","tools":null}`, false},
	{`{"server":"crm","tools":{"tools":[{"name":"a"}]}}`, false},
	{`{"server":"crm","tools":{"tools":[],"nextCursor":1}}`, false},
	{`{"server":"crm","tools":{}}`, false},
	{`[]`, false},
	{`null`, false},
	{toolsList(1000), true},
	{toolsList(1001), false},
}

// toolsList is a tools/list result of n tools.
func toolsList(n int) string {
	tools := make([]string, n)
	for i := range tools {
		tools[i] = `{"name":"t` + strconv.Itoa(i) + `","inputSchema":{"type":"object"}}`
	}
	return `{"server":"crm","tools":{"tools":[` + strings.Join(tools, ",") + `]}}`
}

// TestPlainSchemaObserved: what plainSchemaObserved takes, the validator
// takes; and it takes the everyday forms.
func TestPlainSchemaObserved(t *testing.T) {
	for _, tc := range observedDocs {
		checkPlainObserved(t, []byte(tc.doc))
		tree, err := parseJSON([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		if got := plainSchemaObserved(tree); got != tc.plain {
			t.Errorf("plainSchemaObserved(%s) = %t, want %t", tc.doc, got, tc.plain)
		}
	}
}

// FuzzPlainSchemaObserved: plainSchemaObserved never takes data that
// tool.schema.observed.v1 refuses.
func FuzzPlainSchemaObserved(f *testing.F) {
	for _, tc := range observedDocs {
		if len(tc.doc) < 4096 { // not the thousand tools: slow to mutate
			f.Add([]byte(tc.doc))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPlainObserved(t, data)
	})
}

func checkPlainObserved(t *testing.T, data []byte) {
	t.Helper()
	tree, err := parseJSON(data)
	if err != nil || !plainSchemaObserved(tree) {
		return
	}
	if err := schemas.Validate(schemas.ToolSchemaObservedV1, tree); err != nil {
		t.Fatalf("plainSchemaObserved takes what the schema refuses (%v):\n%s", err, data)
	}
}
