package core

import (
	"fmt"
	"testing"

	"github.com/toolsentry/toolsentry/events"
)

// direct applies inputs to a core and a MemState, returning each input's
// effects.
type direct struct {
	t  *testing.T
	c  *Core
	st *MemState
}

func (d direct) apply(seq uint64, kind, key, typ, data string) Effects {
	d.t.Helper()
	tok, _ := events.KeyToken(key)
	subject := "toolsentry.telemetry." + kind + "." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"ev-%d","source":"test","type":%q,"time":"2026-10-03T10:00:00Z","datacontenttype":"application/json","data":%s}`, seq, typ, data)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		d.t.Fatal(err)
	}
	eff, err := d.c.Apply(d.st, Input{Event: ev, Subject: subject, Seq: seq})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.st.Store(eff.Writes); err != nil {
		d.t.Fatal(err)
	}
	return eff
}

// A drift verdict told on an invocation that also has an outcome moves the
// tool's chain head to that verdict: the outcome count written after it
// must not put the old head back.
func TestInvocationWithOutcomeKeepsTheVerdictChainHead(t *testing.T) {
	d := direct{t, New(Options{}), NewMemState()}
	d.apply(1, "schema", "crm.lookup", events.TypeSchemaObserved, `{"tool_id":"crm.lookup","version":"3","tool":`+crmRenamed+`}`)
	eff := d.apply(2, "invocation", "crm.lookup", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"agent-b","arguments":{"user_id":"u-1"},"outcome":{"status":"ok"}}`)
	if len(eff.Verdicts) != 1 {
		t.Fatalf("want one drift verdict, got %d", len(eff.Verdicts))
	}
	want, err := events.VerdictDigest(eff.Verdicts[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := d.st.Outcomes("crm.lookup")
	if !ok || o.Calls != 1 {
		t.Fatalf("outcomes %+v", o)
	}
	if o.Chain != want {
		t.Errorf("chain head %q, want the drift verdict's digest %q", o.Chain, want)
	}
}
