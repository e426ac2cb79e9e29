package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// laneLog records which member handled which message of which key, in
// handling order.
type laneLog struct {
	mu     sync.Mutex
	byKey  map[string][]uint64 // subject (lane and key) → stream sequences in handling order
	member map[uint64]string   // sequence → member that handled it last
}

func (g *laneLog) handler(member string) BatchHandler {
	return BatchFunc(func(_ context.Context, _ string, msgs []*Message) []error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, m := range msgs {
			g.byKey[m.Subject] = append(g.byKey[m.Subject], m.StreamSeq)
			g.member[m.StreamSeq] = member
		}
		return nil
	})
}

func (g *laneLog) handled() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.member)
}

// TestLanesShareAndHandOver runs the runtime's Lanes alone: two members
// share two lanes, one each; when one closes, the other takes its lane over
// from the committed checkpoint; every message is handled, in order per
// key; a member that announces another layout is refused.
func TestLanesShareAndHandOver(t *testing.T) {
	_, js := engineServer(t)
	engineStreams(t, js)
	ctx := context.Background()
	members, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "members", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases"})
	if err != nil {
		t.Fatal(err)
	}
	keys := keyNames(10)
	publishKeys(t, js, "a", keys, 5)
	publishKeys(t, js, "b", keys, 5)

	log := &laneLog{byKey: map[string][]uint64{}, member: map[uint64]string{}}
	worker := func(name, announced string) (*Lanes, func() error) {
		var specs []LaneSpec
		for _, lane := range []string{"a", "b"} {
			specs = append(specs, LaneSpec{
				Key: lane, Source: Source{Stream: "T", FilterSubjects: []string{"t." + lane + ".*"}},
				Handler: log.handler(name), Options: Options{Key: LastToken, DeadLetterSubject: "toolsentry.dlq.x"}, Layout: "test",
			})
		}
		l := NewLanes(js, LanesConfig{Members: members, Leases: leases, Member: name, LeaseTTL: 3 * time.Second,
			Period: 100 * time.Millisecond, Announced: announced}, specs)
		errc := make(chan error, 1)
		go func() { errc <- l.Run(ctx) }()
		t.Cleanup(func() { _ = l.Close() })
		return l, func() error {
			select {
			case err := <-errc:
				return err
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: Run did not return", name)
				return nil
			}
		}
	}
	w1, _ := worker("w1", "v1")
	w2, w2done := worker("w2", "v1")
	waitFor(t, "each member owning one lane", func() bool {
		o1, o2 := w1.Owned(), w2.Owned()
		return len(o1) == 1 && len(o2) == 1 && o1[0] != o2[0]
	})
	waitFor(t, "every message handled", func() bool { return log.handled() == 100 })

	// w2 leaves: w1 takes its lane over and handles what comes next.
	lane2 := w2.Owned()[0]
	if err := w2.Close(); err != nil {
		t.Fatalf("closing w2: %v", err)
	}
	if err := w2done(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("w2's Run: %v", err)
	}
	waitFor(t, "w1 owning both lanes", func() bool { return slices.Equal(w1.Owned(), []string{"a", "b"}) })
	publishKeys(t, js, lane2, keys, 2)
	waitFor(t, "the new messages handled", func() bool { return log.handled() == 120 })
	waitFor(t, "w1 holding the lease of "+lane2, func() bool {
		st, ok, err := ReadLease(ctx, leases, lane2)
		return err == nil && ok && st.Owner == "w1"
	})
	log.mu.Lock()
	for seq, m := range log.member {
		if seq > 100 && m != "w1" {
			t.Errorf("message %d after the handover handled by %s", seq, m)
		}
	}
	for key, seqs := range log.byKey {
		if !slices.IsSorted(seqs) {
			t.Errorf("%s handled out of order: %v", key, seqs)
		}
	}
	log.mu.Unlock()

	// A member of another layout is refused.
	_, w3done := worker("w3", "v2")
	if err := w3done(); !errors.Is(err, ErrMembersDisagree) {
		t.Errorf("a member announcing another layout: Run = %v, want ErrMembersDisagree", err)
	}
}
