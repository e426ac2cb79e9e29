package events

import "testing"

func TestQualifiedToolID(t *testing.T) {
	tests := []struct {
		server, tool, id string
	}{
		{"github", "get_issue", "github/get_issue"},
		{"jira", "get_issue", "jira/get_issue"},
		{"", "get_issue", "get_issue"},
		{"", "github/get_issue", "github/get_issue"}, // given qualified: the same tool
		{"crm-mcp", "user-profile/update", "crm-mcp/user-profile/update"},
		{"io.github.acme/crm", "find", "io.github.acme%2Fcrm/find"},
		{"100%", "x", "100%25/x"},
		{"a%2Fb", "x", "a%252Fb/x"},
		{"café", "lookup", "café/lookup"},
	}
	for _, tc := range tests {
		if got := QualifiedToolID(tc.server, tc.tool); got != tc.id {
			t.Errorf("QualifiedToolID(%q, %q) = %q, want %q", tc.server, tc.tool, got, tc.id)
		}
		server, tool := SplitToolID(tc.id)
		wantServer, wantTool := tc.server, tc.tool
		if tc.server == "" {
			wantServer, wantTool = SplitToolID(tc.tool) // a given qualified id splits as such
		}
		if server != wantServer || tool != wantTool {
			t.Errorf("SplitToolID(%q) = %q, %q; want %q, %q", tc.id, server, tool, wantServer, wantTool)
		}
		if _, err := KeyToken(tc.id); err != nil {
			t.Errorf("KeyToken(%q): %v", tc.id, err)
		}
	}
	if QualifiedToolID("github", "get_issue") == QualifiedToolID("jira", "get_issue") {
		t.Fatal("two servers' get_issue share an id")
	}
	// A server holding '/' does not collide with a tool name holding one.
	if QualifiedToolID("a/b", "c") == QualifiedToolID("a", "b/c") {
		t.Fatal("server a/b's c and server a's b/c share an id")
	}
}

func TestSplitToolIDLeavesStrayPercent(t *testing.T) {
	for id, want := range map[string]string{"50%/x": "50%", "a%zz/x": "a%zz", "a%2f/x": "a/", "%2/x": "%2"} {
		if server, tool := SplitToolID(id); server != want || tool != "x" {
			t.Errorf("SplitToolID(%q) = %q, %q; want %q, x", id, server, tool, want)
		}
	}
}

func FuzzQualifiedToolID(f *testing.F) {
	f.Add("github", "get_issue")
	f.Add("a/b%", "c/d")
	f.Fuzz(func(t *testing.T, server, tool string) {
		if server == "" {
			return
		}
		s, n := SplitToolID(QualifiedToolID(server, tool))
		if s != server || n != tool {
			t.Fatalf("(%q, %q) came back as (%q, %q)", server, tool, s, n)
		}
	})
}
