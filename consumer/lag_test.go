package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
)

// ReadStatus reads every lane from its lease and counts the messages at or
// after its checkpoint; ReadLag takes a holder's own measure instead. Both
// name the durable consumers of the per-message-ack workers as stale and
// change nothing.
func TestReadStatus(t *testing.T) {
	f := newFixture(t, testConfig())
	f.publish("a", "1", "2", "3")
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	read := func() *consumer.Status {
		t.Helper()
		st, err := consumer.ReadStatus(ctx, f.js, consumer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ignoreAt := cmpopts.IgnoreFields(consumer.LaneLag{}, "At")

	st := read()
	want := &consumer.Status{Stream: "TOOLSENTRY_TELEMETRY", Messages: 3, LastSeq: 3, Partitions: 1,
		Lanes: []consumer.LaneLag{{Lane: "tools.0", Lag: 3}, {Lane: "composition"}, {Lane: "directives"}}}
	if diff := cmp.Diff(want, st, ignoreAt); diff != "" || st.TotalLag() != 3 {
		t.Errorf("no worker yet (-want +got):\n%s", diff)
	}

	// A holder that applied the first message and measured its lag.
	lease, err := engine.AcquireLease(ctx, f.res.Leases, "tools.0", "w1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Commit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.res.Members.PutString(ctx, "w1", "partitions=1"); err != nil {
		t.Fatal(err)
	}
	st = read()
	want.Members = []string{"w1"}
	want.Lanes[0] = consumer.LaneLag{Lane: "tools.0", Owner: "w1", Epoch: 1, Checkpoint: 2, Lag: 2}
	if diff := cmp.Diff(want, st, ignoreAt); diff != "" || st.Lanes[0].At.IsZero() {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	lease.RecordLag(7) // what the holder counts (it read two, holds them)
	if err := lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	lags, err := consumer.ReadLag(ctx, f.res)
	if err != nil {
		t.Fatal(err)
	}
	if l := lags[0]; l.Lag != 7 || !l.Measured || l.Owner != "w1" {
		t.Errorf("ReadLag of the held lane: %+v, want the holder's 7", l)
	}

	// Released at checkpoint 3: the reader counts the one message left.
	if err := lease.Release(ctx, 3); err != nil {
		t.Fatal(err)
	}
	st = read()
	want.Lanes[0] = consumer.LaneLag{Lane: "tools.0", Epoch: 1, Checkpoint: 3, Lag: 1}
	if diff := cmp.Diff(want, st, ignoreAt); diff != "" {
		t.Errorf("released (-want +got):\n%s", diff)
	}

	// The durable consumer a worker before lanes left behind is stale.
	if _, err := f.res.Telemetry.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "toolsentry-workers",
		AckPolicy: jetstream.AckExplicitPolicy, Metadata: map[string]string{"toolsentry.max_deliver": "5"}}); err != nil {
		t.Fatal(err)
	}
	if st = read(); !cmp.Equal(st.Stale, []string{"toolsentry-workers"}) {
		t.Errorf("stale %v, want the old durable consumer", st.Stale)
	}

	if _, err := consumer.ReadStatus(ctx, f.js, consumer.Config{Prefix: "other"}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("another prefix: %v, want ErrStreamNotFound", err)
	}
}
