// Package mcptest is an MCP server built with the official MCP Go SDK, for
// tests of the proxy: a real peer that nobody here wrote the protocol code
// of. Test binaries re-execute themselves as the server (see Serve).
//
// Its tools:
//
//	lookup_user     {"user_id": string} (after upgrade_schema: {"userId": string},
//	                and a call with user_id finds no user);
//	                answers "found " and the id it was given
//	always_fails    {"reason": string}; answers with "isError": true
//	upgrade_schema  {}; renames lookup_user's user_id to userId: the SDK then sends
//	                notifications/tools/list_changed
//	big_text        {"size": integer}; answers with a text of size bytes
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Name is the server's serverInfo.name.
const Name = "mcptest-crm"

// Options tune the server.
type Options struct {
	// PageSize is the number of tools per tools/list page (0: the SDK's
	// default, all in one page).
	PageSize int
	// Upgraded starts the server as upgrade_schema leaves it: lookup_user
	// takes userId (a server upgraded silently between two sessions).
	Upgraded bool
}

func schema(props map[string]string, required ...string) json.RawMessage {
	p := map[string]any{}
	for name, typ := range props {
		p[name] = map[string]any{"type": typ}
	}
	s := map[string]any{"type": "object", "properties": p}
	if len(required) > 0 {
		s["required"] = required
	}
	b, _ := json.Marshal(s)
	return b
}

func text(s string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}, IsError: isError}
}

// NewServer returns the server.
func NewServer(opts Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: "1.0.0"}, &mcp.ServerOptions{PageSize: opts.PageSize})
	lookup := func(field string) *mcp.Tool {
		return &mcp.Tool{Name: "lookup_user", Description: "Looks a user up.", InputSchema: schema(map[string]string{field: "string"}, field)}
	}
	// lookup_user reads the id from the field of its current version only,
	// as a real tool would: after upgrade_schema an agent still sending
	// user_id gets "no user id".
	var mu sync.Mutex
	current := "user_id"
	if opts.Upgraded {
		current = "userId"
	}
	found := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		mu.Lock()
		field := current
		mu.Unlock()
		if id, ok := args[field].(string); ok {
			return text("found "+id, false), nil
		}
		return text("no user id", true), nil
	}
	s.AddTool(lookup(current), found)
	s.AddTool(&mcp.Tool{Name: "always_fails", Description: "Fails.", InputSchema: schema(map[string]string{"reason": "string"})},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("it failed", true), nil
		})
	s.AddTool(&mcp.Tool{Name: "upgrade_schema", Description: "Renames lookup_user's user_id to userId.", InputSchema: schema(nil)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			current = "userId"
			mu.Unlock()
			s.AddTool(lookup("userId"), found)
			return text("upgraded", false), nil
		})
	s.AddTool(&mcp.Tool{Name: "big_text", Description: "Answers with a long text.", InputSchema: schema(map[string]string{"size": "integer"}, "size")},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Size int `json:"size"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return text(strings.Repeat("x", args.Size), false), nil
		})
	return s
}

// Serve runs the server on the process's standard input and output until
// the input ends.
func Serve(ctx context.Context, opts Options) error {
	return NewServer(opts).Run(ctx, &mcp.StdioTransport{})
}

// Text returns the one text content of a tool's answer, or an error naming
// what the answer holds instead.
func Text(res *mcp.CallToolResult) (string, error) {
	if len(res.Content) != 1 {
		return "", fmt.Errorf("result has %d contents, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("result content is %T, want text", res.Content[0])
	}
	return tc.Text, nil
}
