package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// ExampleAgent closes the loop on an embedded server: the agent emits its
// call with user_id; the tool renames the field to userId; toolsentry's
// verdict becomes the agent's directive, and the agent's next Guard sends
// userId, with no restart. When the tool then drops a field the agent
// sends, Guard refuses the call with the HALT.
func ExampleAgent() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "toolsentry-agent-example")
	defer os.RemoveAll(dir)
	srv, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: dir, Port: -1})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}

	// toolsentry itself (what `toolsentry serve` runs).
	svc, err := consumer.StartService(ctx, nc, consumer.ServiceOptions{})
	if err != nil {
		panic(err)
	}
	go func() { _ = svc.Run(ctx) }()
	defer svc.Close()

	// The agent's client.
	client, err := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "billing-7"})
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)

	observe := func(inputSchema string) { // the tool's tools/list, as an MCP proxy reports it
		var names events.Names
		m, err := names.NewSchemaObserved(events.Meta{ID: events.NewID(), Source: "example"}, events.SchemaObserved{
			ToolID: "crm.lookup", Version: "1", Tool: &events.MCPTool{Name: "crm.lookup", InputSchema: json.RawMessage(inputSchema)}})
		if err != nil {
			panic(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
			panic(err)
		}
	}
	args := json.RawMessage(`{"user_id":"alice@example.com","limit":5}`)
	until := func(ok func(json.RawMessage, error) bool) (json.RawMessage, error) {
		for {
			out, err := client.Guard(ctx, "crm.lookup", args)
			if ok(out, err) {
				return out, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	observe(`{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"integer"}},"required":["user_id"]}`)
	out, _ := client.Guard(ctx, "crm.lookup", args)
	fmt.Println("send:", string(out))
	_ = client.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: out, Outcome: &events.Outcome{Status: "ok"}})
	for client.Stats().Published < 1 {
		time.Sleep(10 * time.Millisecond)
	}

	observe(`{"type":"object","properties":{"userId":{"type":"string"},"limit":{"type":"integer"}},"required":["userId"]}`)
	out, _ = until(func(out json.RawMessage, err error) bool { return err == nil && string(out) != string(args) })
	fmt.Println("send:", string(out))
	dec, _ := client.Decide(ctx, "crm.lookup", args)
	fmt.Println(dec.Directive.Action, dec.Directive.Verdict.Name)

	observe(`{"type":"object","properties":{"userId":{"type":"string"}},"required":["userId"]}`)
	// The tool's schema and its directive reach the client by two watches,
	// in either order: until the HALT is here, the MIGRATE of the last
	// drift may already refuse a payload that fits neither version.
	var halt *agent.HaltError
	_, err = until(func(_ json.RawMessage, err error) bool {
		return errors.As(err, &halt) && halt.Directive.Action == guards.ActionHalt
	})
	if err != nil {
		fmt.Println(halt.Directive.Action, halt.Directive.Directive)
		fmt.Println(halt.Directive.Reason)
	}
	// Output:
	// send: {"user_id":"alice@example.com","limit":5}
	// send: {"limit":5,"userId":"alice@example.com"}
	// MIGRATE DRIFT_ON_USED_FIELDS
	// HALT HALT: Drift on used fields ['limit', 'user_id']. Apply migration.
	// cannot migrate limit: field limit was removed without a counterpart: its value would be lost
}
