package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// TestServeChainsVerdictsEndToEnd: serve, given --signing-key through the
// environment, signs and chains the verdicts the core produces
// (observations, agents' drift, workflows and contracts), the recorded
// stream verifies clean, and deleting one verdict from the middle of a
// tool's chain is reported as a break at its successor.
func TestServeChainsVerdictsEndToEnd(t *testing.T) {
	seedFile, pubFile, _ := keygenFiles(t)
	t.Setenv(envSigningKey, seedFile)
	s := startServe(t, "")
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, cmdTimeout)
	n := events.Names{}
	meta := func(id string) events.Meta { return events.Meta{ID: id, Source: "test", Time: verdictTime} }
	tool := func(prop string) *events.MCPTool {
		return &events.MCPTool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object","properties":{"` + prop + `":{"type":"string"}},"required":["` + prop + `"]}`)}
	}
	args, err := events.FieldTypesOf([]byte(`{"user_id":"u-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []events.Message
	add := func(m events.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	add(n.NewSchemaObserved(meta("o1"), events.SchemaObserved{ToolID: "crm.lookup", Version: "1", Tool: tool("user_id")}))
	add(n.NewInvocation(meta("i1"), events.Invocation{AgentID: "billing", ToolID: "crm.lookup", ArgumentTypes: args}))
	add(n.NewSchemaObserved(meta("o2"), events.SchemaObserved{ToolID: "crm.lookup", Version: "2", Tool: tool("userId")}))
	add(n.NewSchemaObserved(meta("o3"), events.SchemaObserved{ToolID: "crm.lookup", Version: "2", Tool: tool("userId")}))
	add(n.NewInvocation(meta("i2"), events.Invocation{AgentID: "support", ToolID: "crm.lookup", ArgumentTypes: args}))
	for _, id := range []string{"a", "b"} {
		add(n.NewContract(meta("c-"+id), events.Contract{ToolID: id, Accuracy: 0.95, Determinism: "DETERMINISTIC"}))
	}
	add(n.NewWorkflow(meta("w1"), []byte(`{"composition_id":"etl","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["a","b"]}}`)))
	add(n.NewContract(meta("c-b2"), events.Contract{ToolID: "b", Accuracy: 0.5, Determinism: "DETERMINISTIC"}))
	for _, m := range msgs {
		publishMsg(t, ctx, js, m)
	}

	var r publisher.AuditReport
	code := -1
	for deadline := time.Now().Add(cmdTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r, code = verifyRun(t, s.natsURL, "--pubkey", pubFile); r.Verdicts >= 5 {
			break
		}
	}
	// o1 NO_BASELINE, o2 drift for billing, o3 the same version again (no
	// verdict), i2 drift for support: 3 in schema/crm.lookup; w1 and c-b2:
	// 2 in composition/etl.
	if r.Verdicts != 5 || r.Chains != 2 || r.Signed != 5 || !r.OK() || code != 0 {
		t.Fatalf("exit %d, report %+v\n%s\n%s", code, r, problemList(r), s.logs)
	}
	if !strings.Contains(s.logs.String(), "signing verdicts") {
		t.Errorf("serve did not log its signing key:\n%s", s.logs)
	}

	// Delete the second verdict of the tool's chain.
	stream, err := js.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	var toolSeqs []uint64
	for seq := uint64(1); seq <= 5; seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := n.Decode(raw.Subject, raw.Header, raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ChainKey() == "schema/crm.lookup" {
			toolSeqs = append(toolSeqs, seq)
		}
	}
	if len(toolSeqs) != 3 {
		t.Fatalf("tool chain at %v", toolSeqs)
	}
	if err := stream.DeleteMsg(ctx, toolSeqs[1]); err != nil {
		t.Fatal(err)
	}
	r, code = verifyRun(t, s.natsURL, "--pubkey", pubFile)
	found := false
	for _, p := range r.Problems {
		if p.Seq == toolSeqs[2] && p.Kind == publisher.ProblemMissing {
			found = true
		}
	}
	if code != 1 || !found {
		t.Errorf("after deleting seq %d: exit %d, problems:\n%s", toolSeqs[1], code, problemList(r))
	}
}
