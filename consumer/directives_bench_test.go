package consumer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// memKV is the part of a KV bucket that a View's writes use, in memory:
// every write succeeds at the next revision.
type memKV struct {
	jetstream.KeyValue // nil: any other method panics
	rev                uint64
}

func (m *memKV) Create(_ context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	m.rev++
	return m.rev, nil
}

func (m *memKV) Update(_ context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	m.rev++
	return m.rev, nil
}

func (m *memKV) Bucket() string { return "toolsentry-directives" }

// BenchmarkDirectivesHandle is the projector's work per verdict without a
// server (the bucket in memory): a tool-wide SCHEMA_MATCH of a tool whose
// agents each have a directive about the version the tool still presents,
// so that their directives stay, and an agent's drift verdict.
func BenchmarkDirectivesHandle(b *testing.B) {
	for _, agents := range []int{0, 50} {
		b.Run(fmt.Sprintf("verdict=tool-wide/agents=%d", agents), func(b *testing.B) {
			benchDirectives(b, agents, "")
		})
	}
	b.Run("verdict=agent-drift", func(b *testing.B) { benchDirectives(b, 0, "agent-7") })
}

func benchDirectives(b *testing.B, agents int, agent string) {
	const tool, fp = "crm.lookup", "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	d := &Directives{byTool: map[string]map[string]struct{}{}, heads: map[string]directiveHead{}}
	d.view = engine.NewFedView(&memKV{rev: 1000}, ViewOptions{MaxAttempts: 1, WriteTimeout: time.Second, OnChange: d.index})
	ctx := context.Background()
	for i := range agents {
		dir := events.Directive{Guard: events.DirectiveSchema, ToolID: tool, AgentID: fmt.Sprintf("agent-%d", i), Action: guards.ActionMigrate,
			Directive: "MIGRATE", Reason: "r", Verdict: events.VerdictRef{Name: "DRIFT_ON_USED_FIELDS", ID: "v", Sequence: 1},
			Migration: toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{{Op: "move", Path: "user_id", To: "userId"}}}, Affected: []string{"user_id"},
			FromFingerprint: "sha256:a", ToFingerprint: fp}
		key, err := dir.Key()
		if err != nil {
			b.Fatal(err)
		}
		if err := d.put(ctx, key, func(*directiveHead) (events.Directive, bool) { return dir, true }); err != nil {
			b.Fatal(err)
		}
	}
	clear(d.heads) // as after a restart: read from the bucket
	sv := events.SchemaVerdict{
		Verdict: guards.SchemaMatch, Directive: "PROCEED: Schema matches baseline.", ManifestDigest: strings.Repeat("ab", 32),
		ToolID: tool, Version: "2.1", BaselineFingerprint: fp, CurrentFingerprint: fp,
		Changes: []byte(`[]`), Affected: []byte(`[]`), Migration: []byte(`{"steps":[]}`),
		GuardVersion: guards.Version, InputEventID: "e-1", InputSubject: "toolsentry.telemetry.schema.crm=2Elookup", InputSequence: 7,
	}
	if agent != "" {
		sv.Verdict, sv.Directive, sv.AgentID, sv.BaselineFingerprint = guards.DriftOnUsedFields, "HALT: Drift on used fields ['user_id']. Apply migration.", agent, "sha256:a"
		sv.Changes = []byte(`[{"kind":"renamed","path":"user_id","to":"userId","breaking":true}]`)
		sv.Affected = []byte(`["user_id"]`)
		sv.Migration = []byte(`{"steps":[{"op":"move","path":"user_id","reason":"field user_id was renamed to userId","to":"userId"}]}`)
	}
	msg, err := events.Names{}.NewSchemaVerdict(sv, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
		events.WithPrevious(events.DigestPrefix+strings.Repeat("0a", 32)))
	if err != nil {
		b.Fatal(err)
	}
	// As the signer leaves it: a signature attribute at the end.
	data := append(msg.Data[:len(msg.Data)-1:len(msg.Data)-1], `,"dssematerial":"`+strings.Repeat("QUJD", 100)+`"}`...)
	m := &Message{Subject: msg.Subject, Header: msg.Header, Data: data, Stream: "TOOLSENTRY_VERDICTS"}
	b.ReportAllocs()
	for b.Loop() {
		m.StreamSeq++
		if err := d.handle(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
}
