package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// mcpTap is what an MCP proxy does around a client session, in a few
// lines: it reports every tools/list result as a schema observation, runs
// the agent's hook on every tools/call, and emits the call's telemetry. The
// server is "crm": its tools are crm/<name> (events.QualifiedToolID).
func mcpTap(t *testing.T, l *loop, ag *agent.Agent, hook agent.CallHook) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/call":
				p := req.GetParams().(*mcp.CallToolParams)
				args, err := json.Marshal(p.Arguments)
				if err != nil {
					return nil, err
				}
				sent, err := hook(ctx, events.QualifiedToolID("crm", p.Name), args)
				if err != nil {
					return nil, err // the MCP error of the call
				}
				p.Arguments = sent
				res, err := next(ctx, method, req)
				_ = ag.Emit(agent.Invocation{Tool: events.QualifiedToolID("crm", p.Name), Arguments: args, Outcome: &events.Outcome{Status: "ok"}})
				return res, err
			case "tools/list":
				res, err := next(ctx, method, req)
				if err != nil {
					return res, err
				}
				var tools []events.MCPTool
				for _, tool := range res.(*mcp.ListToolsResult).Tools {
					schema, err := json.Marshal(tool.InputSchema)
					if err != nil {
						return nil, err
					}
					tools = append(tools, events.MCPTool{Name: tool.Name, Description: tool.Description, InputSchema: schema})
				}
				var names events.Names
				l.publish(names.NewSchemaObserved(meta(), events.SchemaObserved{Server: "crm", Tools: tools}))
				return res, nil
			}
			return next(ctx, method, req)
		}
	}
}

// TestAgentHookInMCPClient: an MCP server built on the official Go SDK
// renames its tool's field between two tools/list calls; the client's call
// with the old field reaches the server with the new one. Then the field
// the client still sends is removed, and the call is refused with an MCP
// error naming the directive.
func TestAgentHookInMCPClient(t *testing.T) {
	l := startLoop(t)
	ag := l.agent("claude-desktop", agent.AgentOptions{})

	var mu sync.Mutex
	var received []string
	handler := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		received = append(received, string(req.Params.Arguments))
		mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1"}, nil)
	setTool := func(schema string) {
		server.AddTool(&mcp.Tool{Name: "lookup", Description: "Find a CRM user.", InputSchema: json.RawMessage(schema)}, handler)
	}
	setTool(`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}}}`)

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	client.AddSendingMiddleware(mcpTap(t, l, ag, ag.Hook(true, true)))
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(l.ctx, 60*time.Second)
	defer cancel()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	call := func() error {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"user_id": "alice@example.com", "limit": 5}})
		return err
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return received[len(received)-1]
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if got := last(); got != `{"limit":5,"user_id":"alice@example.com"}` {
		t.Errorf("first call reached the server as %s", got)
	}
	natstest.Eventually(t, 10*time.Second, "telemetry published", func() bool { return ag.Stats().Published == 1 })

	setTool(`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}}}`)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "the rename's directive", func() bool {
		d, err := ag.Decide(ctx, "crm/lookup", json.RawMessage(`{"user_id":"u"}`))
		return err == nil && d.Migrated
	})
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if got := last(); got != `{"limit":5,"userId":"alice@example.com"}` {
		t.Errorf("call after the rename reached the server as %s, want userId", got)
	}

	setTool(`{"type":"object","properties":{"userId":{"type":"string"}}}`)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The view learns the tool's new version and the new directive from two
	// watches: until the directive arrives, the payload check already
	// halts the call under the rename's MIGRATE. Wait for the removal's own.
	natstest.Eventually(t, 20*time.Second, "the removal's HALT", func() bool {
		_, err := ag.Guard(ctx, "crm/lookup", json.RawMessage(`{"user_id":"u","limit":5}`))
		return errors.Is(err, agent.ErrHalt) && strings.Contains(err.Error(), "['limit', 'user_id']")
	})
	n := len(received)
	err = call()
	if err == nil || !strings.Contains(err.Error(), "HALT: Drift on used fields ['limit', 'user_id']") {
		t.Errorf("call after the removal: %v, want the HALT directive", err)
	}
	if len(received) != n {
		t.Error("a halted call reached the server")
	}
}
