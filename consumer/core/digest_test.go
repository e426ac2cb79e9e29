package core

import (
	"testing"

	"github.com/toolsentry/toolsentry/events"
)

// TestVerdictsCarryTheirDigest: every verdict the core builds, schema and
// composition, carries the digest it computed for the chain
// (Message.Digest), which is its body's VerdictDigest: the signer takes it
// instead of computing it again.
func TestVerdictsCarryTheirDigest(t *testing.T) {
	h := newHarness(t)
	kinds := map[events.Kind]int{}
	h.onVerdict = func(m events.Message) {
		want, err := events.VerdictDigest(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if m.Digest != want {
			t.Errorf("verdict %s: Digest %q, want its VerdictDigest %q", m.Subject, m.Digest, want)
		}
		addr, err := events.ParseSubject(m.Subject)
		if err != nil {
			t.Fatal(err)
		}
		kinds[addr.Kind]++
	}
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u"}`)
	h.observe("crm.lookup", "2", crmRenamed)
	h.send("contract", "solo", events.TypeContract, contract("solo", 0.9, "DETERMINISTIC", ""))
	h.send("workflow", "one", events.TypeWorkflow, `{"composition_id":"one","workflow_quality_requirement":0.5,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["solo"]}}`)
	if kinds[events.KindSchemaVerdict] < 2 || kinds[events.KindCompositionVerdict] < 1 {
		t.Errorf("verdicts seen %v: want schema and composition verdicts", kinds)
	}
}
