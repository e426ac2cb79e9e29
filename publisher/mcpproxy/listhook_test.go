package mcpproxy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy/mcptest"
)

// TestListHookSeesEachListBeforeTheClient: the hook sees every tools/list
// result page, of the server named by its serverInfo, before the client
// has the list (so before the agent's next call), and the proxy's own
// list after list_changed too.
func TestListHookSeesEachListBeforeTheClient(t *testing.T) {
	ctx := testContext(t)
	var (
		mu    sync.Mutex
		pages [][]string
	)
	hook := func(_ context.Context, server string, tools []events.MCPTool) {
		if server != mcptest.Name {
			t.Errorf("hook called for server %q, want %q", server, mcptest.Name)
		}
		var names []string
		for _, tl := range tools {
			names = append(names, tl.Name)
		}
		mu.Lock()
		pages = append(pages, names)
		mu.Unlock()
	}
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(pages)
	}
	s := startSession(t, ctx, mcpproxy.Config{RelistAfter: 20 * time.Millisecond, ListHook: hook}, "sdk-server", 1)
	cs := s.connect(t, ctx, nil, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		// The page is in the client's hands: the hook has seen it.
		if got := seen(); got < n {
			t.Fatalf("the client has %d tools, the hook has seen %d pages", n, got)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upgrade_schema", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hook sees the proxy's own pages", func() bool { return seen() == 2*n })
}
