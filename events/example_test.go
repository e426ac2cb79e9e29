package events_test

import (
	"fmt"
	"time"

	"github.com/toolsentry/toolsentry/events"
)

func ExampleKeyToken() {
	for _, key := range []string{"lookup", "crm.lookup", "my tool", "café"} {
		tok, _ := events.KeyToken(key)
		back, _ := events.KeyFromToken(tok)
		fmt.Println(tok, back == key)
	}
	// Output:
	// lookup true
	// crm=2Elookup true
	// my=20tool true
	// caf=C3=A9 true
}

func ExampleDecode() {
	body := []byte(`{"specversion": "1.0", "id": "e-1", "source": "agents/billing",
		"type": "io.toolsentry.tool.invocation.v1", "time": "2026-11-29T10:00:00Z",
		"data": {"agent_id": "agent-7", "tool_id": "crm.lookup",
			"arguments": {"user_id": "u-123", "options": {"limit": 10}}}}`)
	ev, err := events.Decode("toolsentry.telemetry.invocation.crm=2Elookup", nil, body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ev.Kind, ev.Key, ev.Invocation.AgentID)
	for _, path := range ev.Invocation.ArgumentTypes.Paths() {
		fmt.Println(path, ev.Invocation.ArgumentTypes[path])
	}
	// Output:
	// invocation crm.lookup agent-7
	// options object
	// options.limit integer
	// user_id string
}

func ExampleReasonFor() {
	_, err := events.Decode("toolsentry.telemetry.invocation.crm=2Elookup", nil,
		[]byte(`{"specversion": "1.0", "id": "e-1", "source": "s", "type": "io.toolsentry.tool.invocation.v1", "data": {"tool_id": "crm.lookup"}}`))
	reason, permanent := events.ReasonFor(err)
	fmt.Println(reason, permanent)
	fmt.Println(err)
	// Output:
	// schema_invalid true
	// data does not match its schema: tool.invocation.v1: at /: missing property 'agent_id'
}

func ExampleNames_NewInvocation() {
	args, _ := events.FieldTypesOf([]byte(`{"user_id": "u-123", "options": {"limit": 10}}`))
	msg, err := events.Names{}.NewInvocation(
		events.Meta{ID: "e-1", Source: "agents/billing", Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)},
		events.Invocation{AgentID: "agent-7", ToolID: "crm.lookup", ArgumentTypes: args},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Subject)
	fmt.Println(msg.Header["Nats-Msg-Id"])
	fmt.Println(string(msg.Data))
	// Output:
	// toolsentry.telemetry.invocation.crm=2Elookup
	// [e-1]
	// {"specversion":"1.0","id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.invocation.v1","subject":"crm.lookup","time":"2026-11-29T10:00:00Z","datacontenttype":"application/json","data":{"agent_id":"agent-7","tool_id":"crm.lookup","argument_types":{"options":"object","options.limit":"integer","user_id":"string"}}}
}

func ExampleNames_NewSchemaVerdict() {
	v := events.SchemaVerdict{
		Verdict: "NO_BASELINE", Directive: "HALT: No baseline schema. Capture current fingerprint as baseline.",
		ManifestDigest: "6ddca7a2c0a7e1f5b4d6a1e8c2f3b4a5d6e7f8091a2b3c4d5e6f708192a3b4c5",
		ToolID:         "crm.lookup", Version: "2", CurrentFingerprint: "sha256:b",
		GuardVersion: "0.1.0", InputEventID: "e-1", InputSubject: "toolsentry.telemetry.schema.crm=2Elookup", InputSequence: 1,
	}
	msg, _ := events.Names{}.NewSchemaVerdict(v, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	again, _ := events.Names{}.NewSchemaVerdict(v, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	fmt.Println(msg.Subject)
	fmt.Println(msg.ID == again.ID, len(msg.ID))
	// Output:
	// toolsentry.verdicts.schema.no_baseline.crm=2Elookup
	// true 32
}
