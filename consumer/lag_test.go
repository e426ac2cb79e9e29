package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
)

// ReadLag counts, per partition, the stored messages its consumer has not
// finished: not delivered, and delivered but not acknowledged.
func TestReadLag(t *testing.T) {
	f := newFixture(t, testConfig())
	f.publish("a", "1", "2", "3", "4", "5")
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	lag := func() consumer.PartitionLag {
		t.Helper()
		lags, err := consumer.ReadLag(ctx, f.res)
		if err != nil || len(lags) != 1 {
			t.Fatalf("ReadLag: %v, %v: want one partition", lags, err)
		}
		return lags[0]
	}
	// The consumer's counts follow the stream a moment later on a loaded
	// machine: poll until they match, then report what was read last.
	expect := func(what string, want consumer.PartitionLag, wantLag uint64) {
		t.Helper()
		var got consumer.PartitionLag
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got = lag(); cmp.Equal(want, got) && got.Lag() == wantLag {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s (-want +got):\n%s", what, cmp.Diff(want, got))
				return
			}
		}
	}
	expect("nothing delivered", consumer.PartitionLag{Partition: 0, Consumer: "toolsentry-workers", Pending: 5}, 5)

	batch, err := f.res.Consumer.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 2 {
		t.Fatalf("fetched %d, want 2", len(msgs))
	}
	expect("two delivered, none finished", consumer.PartitionLag{Partition: 0, Consumer: "toolsentry-workers", Pending: 3, AckPending: 2, Delivered: 2}, 5)

	for _, m := range msgs {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expect("two finished", consumer.PartitionLag{Partition: 0, Consumer: "toolsentry-workers", Pending: 3, AckFloor: 2, Delivered: 2}, 3)
}

// ReadStatus finds the deployment's partition count from the live members,
// who owns each partition, each one's lag, and the consumers of an earlier
// layout; it changes nothing.
func TestReadStatus(t *testing.T) {
	f := newFixture(t, testConfig()) // a single worker's durable consumer first
	f.publish("a", "1", "2", "3")
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()

	st, err := consumer.ReadStatus(ctx, f.js, consumer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := &consumer.Status{Stream: "TOOLSENTRY_TELEMETRY", Messages: 3, LastSeq: 3, Partitions: 1,
		Lag: []consumer.PartitionLag{{Partition: 0, Consumer: "toolsentry-workers", Pending: 3}}}
	if diff := cmp.Diff(want, st); diff != "" || st.TotalLag() != 3 {
		t.Errorf("single worker (-want +got):\n%s", diff)
	}

	// Two workers on two partitions: the new consumers resume after the
	// single worker's ack floor (none yet: from the start).
	cfg := testConfig()
	cfg.Partitions = 2
	f.provision(cfg)
	for _, m := range []string{"w2", "w1"} {
		if _, err := f.res.Members.PutString(ctx, m, "partitions=2"); err != nil {
			t.Fatal(err)
		}
	}
	st, err = consumer.ReadStatus(ctx, f.js, consumer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want = &consumer.Status{Stream: "TOOLSENTRY_TELEMETRY", Messages: 3, LastSeq: 3, Partitions: 2,
		Members: []string{"w1", "w2"},
		Lag: []consumer.PartitionLag{
			{Partition: 0, Consumer: "toolsentry-workers-0of2", Pending: 3, Owner: "w1"},
			{Partition: 1, Consumer: "toolsentry-workers-1of2", Pending: 3, Owner: "w2"},
		},
		Stale: []string{"toolsentry-workers"}}
	if diff := cmp.Diff(want, st); diff != "" || st.TotalLag() != 6 {
		t.Errorf("two partitions (-want +got):\n%s", diff)
	}

	// With no live member, the layout that progressed furthest.
	for _, m := range []string{"w1", "w2"} {
		if err := f.res.Members.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if st, err = consumer.ReadStatus(ctx, f.js, consumer.Config{}); err != nil || st.Partitions != 1 || len(st.Members) != 0 {
		t.Errorf("no live member, no progress anywhere: %+v, %v: want the smaller layout", st, err)
	}

	if _, err := consumer.ReadStatus(ctx, f.js, consumer.Config{Prefix: "other"}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("another prefix: %v, want ErrStreamNotFound", err)
	}
}
