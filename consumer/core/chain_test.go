package core

import (
	"testing"

	"github.com/toolsentry/toolsentry/events"
)

// TestVerdictsAreChainedPerKey: each verdict names the digest of the
// previous verdict of its chain (guard and key), whatever input produced
// it: observations and agents' invocations for a tool, declarations,
// contracts and checkpoints for a workflow.
func TestVerdictsAreChainedPerKey(t *testing.T) {
	h := newHarness(t) // QualityEvery: 4
	var msgs []events.Message
	keep := func(eff Effects) { msgs = append(msgs, eff.Verdicts...) }
	h.core = New(Options{QualityEvery: 4})
	run := func(kind, key, typ, data string) {
		t.Helper()
		h.seq++
		tok, _ := events.KeyToken(key)
		subject := "toolsentry.telemetry." + kind + "." + tok
		body := `{"specversion":"1.0","id":"ev-` + string(rune('a'+h.seq%26)) + `-` + key + `","source":"test","type":"` + typ + `","data":` + data + `}`
		queue := []events.Message{{Subject: subject, Data: []byte(body)}}
		for len(queue) > 0 {
			m := queue[0]
			queue = queue[1:]
			ev, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			eff, err := h.core.Apply(h.state, Input{Event: ev, Subject: m.Subject, Seq: h.seq})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.state.Store(eff.Writes); err != nil {
				t.Fatal(err)
			}
			keep(eff)
			queue = append(queue, eff.Telemetry...)
			h.seq++
		}
	}
	run("contract", "x", events.TypeContract, contract("x", 0.99, "DETERMINISTIC", ""))
	run("contract", "y", events.TypeContract, contract("y", 0.9, "DETERMINISTIC", ""))
	run("workflow", "w", events.TypeWorkflow, `{"composition_id":"w","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["x","y"]}}`)
	run("contract", "y", events.TypeContract, contract("y", 0.6, "DETERMINISTIC", ""))
	run("schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"1","tool":`+crmV1+`}`)
	run("invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"a","arguments":{"user_id":"u"}}`)
	run("schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"2","tool":`+crmRenamed+`}`)
	run("schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"2","tool":`+crmRenamed+`}`)
	run("invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"b","arguments":{"user_id":"u"}}`)

	heads := map[string]string{}
	lengths := map[string]int{}
	for _, m := range msgs {
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		link, err := events.ReadChainLink(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		chain := ev.ChainKey()
		if link.Previous != heads[chain] {
			t.Errorf("verdict %d of chain %s names %q as its predecessor, want %q", lengths[chain]+1, chain, link.Previous, heads[chain])
		}
		heads[chain] = link.Digest
		lengths[chain]++
	}
	if lengths["composition/w"] < 2 || lengths["schema/crm.lookup"] < 4 {
		t.Fatalf("chains %v: the scenario does not exercise them", lengths)
	}
	if o, _ := h.state.Outcomes("crm.lookup"); o.Chain != heads["schema/crm.lookup"] {
		t.Errorf("the tool's chain head %q, want the last verdict's %q", o.Chain, heads["schema/crm.lookup"])
	}
	if w, _ := h.state.Workflow("w"); w.Chain != heads["composition/w"] {
		t.Errorf("the workflow's chain head %q, want %q", w.Chain, heads["composition/w"])
	}
}
