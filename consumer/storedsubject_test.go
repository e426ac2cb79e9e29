package consumer_test

import (
	"context"
	"testing"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// TestStoredPartitionSubjectsEndToEnd runs the worker and the replay on
// telemetry stored in the partitioned form <prefix>.telemetry.<kind>.<p>.<key>
// by 4 partitions: decoding, the
// ordering key and metrics kind, verdicts, the dead letters' original
// subject and the replay all handle the partition token.
func TestStoredPartitionSubjectsEndToEnd(t *testing.T) {
	_, url := natstest.RunServer(t)
	cfg := testConfig()
	cfg.Partitions = 4
	w := startReplayWorkerWith(t, url, cfg)
	js := w.js
	ctx := context.Background()
	info, err := streamOf(t, js, "TOOLSENTRY_TELEMETRY").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tr := info.Config.SubjectTransform; tr == nil || tr.Destination != "toolsentry.telemetry.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}" {
		t.Fatalf("telemetry transform %+v: want 4 partitions", tr)
	}

	publishHandled(t, js, observation(t, "crm.lookup", crmV1))
	publishHandled(t, js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u","limit":5}`))
	if _, err := js.Publish(ctx, "toolsentry.telemetry.invocation.crm=2Elookup", []byte(`{"specversion":"1.0","id":"broken"`)); err != nil {
		t.Fatal(err)
	}
	waitHandled(t, js)
	publishHandled(t, js, observation(t, "crm.lookup", crmRenamed))

	stored := streamMessages(t, js, "TOOLSENTRY_TELEMETRY")
	for _, m := range stored {
		a, err := names.ParseSubject(m.Subject())
		if err != nil || !a.Stored || a.Key != "crm.lookup" {
			t.Fatalf("stored subject %q: %+v, %v; want the partitioned form", m.Subject(), a, err)
		}
	}
	verdicts := waitVerdicts(t, js, 2)
	if verdicts[0].SchemaVerdict.Verdict != guards.NoBaseline || verdicts[1].SchemaVerdict.Verdict != guards.DriftOnUsedFields {
		t.Fatalf("verdicts %s, %s; want NO_BASELINE then DRIFT_ON_USED_FIELDS",
			verdicts[0].SchemaVerdict.Verdict, verdicts[1].SchemaVerdict.Verdict)
	}
	dead := streamMessages(t, js, "TOOLSENTRY_DLQ")
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	dl, err := events.ParseDeadLetter(dead[0].Headers())
	if err != nil {
		t.Fatal(err)
	}
	a, err := names.ParseSubject(dl.Subject)
	if err != nil || !a.Stored || a.Kind != events.KindInvocation {
		t.Fatalf("dead letter's original subject %q: %+v, %v", dl.Subject, a, err)
	}
	if pub, err := names.Published(dl.Subject); err != nil || pub != "toolsentry.telemetry.invocation.crm=2Elookup" {
		t.Fatalf("its published subject %q, %v", pub, err)
	}

	rep := replay(t, js, consumer.ReplayOptions{})
	if rep.Tampered() != 0 || rep.InputsReplayed != len(stored) || rep.InputsRejected != 1 {
		t.Fatalf("replay of the stored form: replayed %d, tampered %d: %+v", rep.InputsReplayed, rep.Tampered(), rep)
	}
}
