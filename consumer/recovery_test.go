package consumer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// A recovery that cannot account for every message delivered before it
// (one still held by a slow earlier worker, others acknowledged by it above
// the ack floor) does not let every key go on blind when its wait ends:
// the keys of those messages wait for them, the others run again.
func TestRecoveryNarrowsToTheKeysItWaitsFor(t *testing.T) {
	cfg := testConfig()
	cfg.AckWait = time.Second
	f := newFixture(t, cfg)
	slow := f.publish("k1", "a")[0] // held by the earlier worker, kept alive
	f.publish("k2", "b")            // acknowledged by it, above the floor
	f.publish("k3", "c")

	// The earlier worker: takes the three, acknowledges the last two and
	// keeps the first alive with progress acks.
	batch, err := f.res.Consumer.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	for m := range batch.Messages() {
		md, _ := m.Metadata()
		if md.Sequence.Stream == slow {
			held = m
			continue
		}
		if err := m.DoubleAck(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if held == nil {
		t.Fatal("the earlier worker did not receive the first message")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = held.InProgress()
			}
		}
	}()

	rec := &recorder{}
	f.run(rec, testOptions())
	later := f.publish("k1", "d")[0] // must wait for "a"
	other := f.publish("k4", "e")[0] // may run once the recovery narrowed
	// k4 runs after the recovery's 2 × AckWait, while "a" is still held
	// elsewhere; k1's newer message does not.
	natstest.Eventually(t, 10*time.Second, "k4 handled while k1 waits", func() bool {
		return rec.count(func(c call) bool { return c.Seq == other }) == 1
	})
	if n := rec.count(func(c call) bool { return c.Key == "k1" }); n != 0 {
		t.Fatalf("k1 ran while its earlier message was held elsewhere: %+v", rec.snapshot())
	}
	close(stop) // the earlier worker dies: "a" is redelivered after AckWait
	<-done
	natstest.Eventually(t, 10*time.Second, "k1's messages handled", func() bool {
		return rec.count(func(c call) bool { return c.Key == "k1" }) == 2
	})
	var k1 []uint64
	for _, c := range rec.snapshot() {
		if c.Key == "k1" {
			k1 = append(k1, c.Seq)
		}
	}
	if !slices.Equal(k1, []uint64{slow, later}) {
		t.Errorf("k1 handled %v, want %v", k1, []uint64{slow, later})
	}
	if n := rec.count(func(c call) bool { return c.Key == "k2" || c.Key == "k3" }); n != 0 {
		t.Errorf("messages acknowledged by the earlier worker were handled again: %+v", rec.snapshot())
	}
	f.waitSettled()
}
