package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// memStore is a Store whose buckets are in memory (memKV): what the
// processor does per input, without a server.
func memStore() *Store {
	s := &Store{
		views:        map[core.Bucket]*View{},
		decoded:      map[core.Bucket]map[string]decodedRecord{},
		usageKeys:    map[string]map[string]struct{}{},
		workflowKeys: map[string]struct{}{},
	}
	for _, b := range []core.Bucket{core.Baselines, core.Usage, core.Quality, core.Outcomes, core.Workflows} {
		s.decoded[b] = map[string]decodedRecord{}
		o := ViewOptions{MaxAttempts: 1, WriteTimeout: time.Second}
		switch b {
		case core.Usage:
			o.OnChange = s.indexUsage
		case core.Workflows:
			o.OnChange = s.indexWorkflow
		}
		s.views[b] = engine.NewFedView(&memKV{}, o)
	}
	return s
}

// BenchmarkTxnInvocation is the processor's state work per invocation of a
// known tool by a known agent (the live counterpart of core's
// BenchmarkApplyInvocation): a transaction over the store, the core, and
// the commit of the outcome record, with the buckets in memory.
func BenchmarkTxnInvocation(b *testing.B) {
	ctx := context.Background()
	s := memStore()
	c := core.New(core.Options{QualityEvery: 1 << 40})
	apply := func(subject string, body string, seq uint64) core.Effects {
		ev, err := events.Decode(subject, nil, []byte(body))
		if err != nil {
			b.Fatal(err)
		}
		tx := s.Begin()
		eff, err := c.Apply(tx, core.Input{Event: ev, Subject: subject, Seq: seq})
		if err == nil {
			err = tx.Err()
		}
		if err == nil {
			err = tx.Commit(ctx, eff.Writes)
		}
		if err != nil {
			b.Fatal(err)
		}
		return eff
	}
	const tool = `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"},"limit":{"type":"string"}},"required":["user_id"]}}`
	apply("toolsentry.telemetry.schema.crm=2Elookup", `{"specversion":"1.0","id":"o","source":"bench","type":"io.toolsentry.tool.schema.observed.v1","data":{"tool_id":"crm.lookup","version":"1","tool":`+tool+`}}`, 1)
	const subject = "toolsentry.telemetry.invocation.crm=2Elookup"
	body := `{"specversion":"1.0","id":"x","source":"bench","type":"io.toolsentry.tool.invocation.v1","data":{"tool_id":"crm.lookup","agent_id":"agent-a","arguments":{"user_id":"u","limit":"5"},"outcome":{"status":"ok"}}}`
	apply(subject, body, 2)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	seq := uint64(100)
	for b.Loop() {
		seq++
		tx := s.Begin()
		eff, err := c.Apply(tx, core.Input{Event: ev, Subject: subject, Seq: seq})
		if err != nil || tx.Err() != nil {
			b.Fatal(err, tx.Err())
		}
		if len(eff.Verdicts) != 0 || len(eff.Writes) != 1 {
			b.Fatalf("effects %+v", eff)
		}
		if err := tx.Commit(ctx, eff.Writes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
