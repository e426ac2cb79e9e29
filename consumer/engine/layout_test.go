package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

var testLayout = engine.Layout{
	Prefix:           "ts",
	Partitions:       4,
	ToolKinds:        []string{"schema", "invocation"},
	CompositionKinds: []string{"contract", "workflow"},
}

func TestLayoutSubjects(t *testing.T) {
	if err := testLayout.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := testLayout.Filters(engine.ToolLane(2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ts.telemetry.schema.2.*", "ts.telemetry.invocation.2.*"}, got); diff != "" {
		t.Errorf("tool lane filters (-want +got):\n%s", diff)
	}
	got, _ = testLayout.Filters(engine.CompositionLane())
	if diff := cmp.Diff([]string{"ts.telemetry.contract.*.*", "ts.telemetry.workflow.*.*"}, got); diff != "" {
		t.Errorf("composition filters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ts.telemetry.schema.*", "ts.telemetry.invocation.*", "ts.telemetry.contract.*", "ts.telemetry.workflow.*"}, testLayout.StreamSubjects()); diff != "" {
		t.Errorf("stream subjects (-want +got):\n%s", diff)
	}
	tr := testLayout.Transform()
	if tr.Source != "ts.telemetry.*.*" || tr.Destination != "ts.telemetry.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}" {
		t.Errorf("transform %+v", tr)
	}
	if testLayout.Name() != "partition(4)" {
		t.Errorf("name %q", testLayout.Name())
	}
	var keys []string
	for _, l := range testLayout.Lanes() {
		keys = append(keys, l.Key())
	}
	if diff := cmp.Diff([]string{"tools.0", "tools.1", "tools.2", "tools.3", "composition"}, keys); diff != "" {
		t.Errorf("lanes (-want +got):\n%s", diff)
	}
	if _, err := testLayout.Filters(engine.ToolLane(4)); !errors.Is(err, engine.ErrBadLayout) {
		t.Errorf("partition 4 of 4: %v", err)
	}
}

func TestLayoutValidate(t *testing.T) {
	for name, l := range map[string]engine.Layout{
		"no prefix":     {Partitions: 1, ToolKinds: []string{"a"}},
		"wild prefix":   {Prefix: "ts.*", Partitions: 1, ToolKinds: []string{"a"}},
		"zero N":        {Prefix: "ts", ToolKinds: []string{"a"}},
		"no tool kinds": {Prefix: "ts", Partitions: 1, CompositionKinds: []string{"a"}},
		"dotted kind":   {Prefix: "ts", Partitions: 1, ToolKinds: []string{"a.b"}},
		"twice":         {Prefix: "ts", Partitions: 1, ToolKinds: []string{"a"}, CompositionKinds: []string{"a"}},
	} {
		if err := l.Validate(); !errors.Is(err, engine.ErrBadLayout) {
			t.Errorf("%s: %v, want ErrBadLayout", name, err)
		}
	}
}

// drainSeqs reads every message that filters select, in order, and returns
// their stream sequences and stored subjects.
func drainSeqs(t *testing.T, js jetstream.JetStream, stream string, filters []string) map[uint64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	oc, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		t.Fatalf("ordered consumer %v: %v", filters, err)
	}
	info, err := oc.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]string{}
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading %v: %v", filters, err)
		}
		md, _ := m.Metadata()
		out[md.Sequence.Stream] = m.Subject()
	}
	return out
}

// TestLayoutEveryStoredMessageReadByOneLane checks the layout against a
// real server: the transform stores the partition token, every stored
// message is selected by exactly one lane's filters (read amplification
// 1.0), legacy 4-token messages stored before the transform are selected by
// LegacyFilters and by no lane, KeyPartition is the server's partition
// function, and subjects of an unknown kind or shape
// are refused at publish.
func TestLayoutEveryStoredMessageReadByOneLane(t *testing.T) {
	js := leaseServer(t)
	ctx := context.Background()
	const stream = "TELEMETRY"

	// Before the upgrade: the whole prefix, no transform.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"ts.telemetry.>"}}); err != nil {
		t.Fatal(err)
	}
	pub := func(subj string) (uint64, error) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ack, err := js.Publish(c, subj, []byte("{}"))
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	legacy := map[uint64]bool{}
	for i := range 5 {
		seq, err := pub(fmt.Sprintf("ts.telemetry.schema.old%d", i))
		if err != nil {
			t.Fatal(err)
		}
		legacy[seq] = true
	}

	// The upgrade: the layout's subjects and transform.
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: testLayout.StreamSubjects(), SubjectTransform: testLayout.Transform(),
	}); err != nil {
		t.Fatalf("updating to the layout: %v", err)
	}
	stored := 0
	wantStored := map[uint64]string{} // by sequence: StoredSubject of the published subject
	kinds := append(append([]string(nil), testLayout.ToolKinds...), testLayout.CompositionKinds...)
	for i := range 200 {
		for _, k := range kinds {
			subj := fmt.Sprintf("ts.telemetry.%s.key=2D%d", k, i)
			seq, err := pub(subj)
			if err != nil {
				t.Fatal(err)
			}
			if wantStored[seq], _ = testLayout.StoredSubject(subj); wantStored[seq] == "" {
				t.Fatalf("StoredSubject(%q) is false", subj)
			}
			stored++
		}
	}
	for _, bad := range []string{"ts.telemetry.schema", "ts.telemetry.schema.a.b", "other.telemetry.schema.k", "ts.telemetry..k"} {
		if s, ok := testLayout.StoredSubject(bad); ok {
			t.Errorf("StoredSubject(%q) = %q, want false", bad, s)
		}
	}
	for _, bad := range []string{"ts.telemetry.bogus.k", "ts.telemetry.schema.0.k", "ts.telemetry.schema", "ts.telemetry.schema.a.b.c"} {
		if _, err := pub(bad); err == nil {
			t.Errorf("publish on %q was stored", bad)
		}
	}

	seen := map[uint64]string{}
	perPartition := map[string]int{}
	for _, lane := range testLayout.Lanes() {
		f, err := testLayout.Filters(lane)
		if err != nil {
			t.Fatal(err)
		}
		for seq, subj := range drainSeqs(t, js, stream, f) {
			if prev, dup := seen[seq]; dup {
				t.Fatalf("sequence %d (%s) read by lane %s and by %s", seq, subj, lane, prev)
			}
			if legacy[seq] {
				t.Fatalf("legacy sequence %d read by lane %s", seq, lane)
			}
			tok := strings.Split(subj, ".")
			if len(tok) != 5 {
				t.Fatalf("stored subject %q: want 5 tokens", subj)
			}
			if !lane.Composition && tok[3] != fmt.Sprint(lane.Partition) {
				t.Fatalf("lane %s read %q", lane, subj)
			}
			if p := engine.KeyPartition(tok[4], testLayout.Partitions); tok[3] != fmt.Sprint(p) {
				t.Fatalf("stored %q: KeyPartition says partition %d, the server stored %s", subj, p, tok[3])
			}
			if subj != wantStored[seq] {
				t.Fatalf("sequence %d stored as %q, StoredSubject said %q", seq, subj, wantStored[seq])
			}
			seen[seq] = lane.Key()
			perPartition[tok[3]]++
		}
	}
	if len(seen) != stored {
		t.Fatalf("lanes read %d messages, %d stored after the upgrade", len(seen), stored)
	}
	if len(perPartition) != testLayout.Partitions {
		t.Errorf("partition tokens used: %v, want all %d", perPartition, testLayout.Partitions)
	}
	old := drainSeqs(t, js, stream, testLayout.LegacyFilters())
	if len(old) != len(legacy) {
		t.Fatalf("legacy filters read %d messages, want the %d stored before the upgrade", len(old), len(legacy))
	}
	for seq := range old {
		if !legacy[seq] {
			t.Fatalf("legacy filters read sequence %d stored after the upgrade", seq)
		}
	}
}

func TestStreamLayoutRecord(t *testing.T) {
	cfg := jetstream.StreamConfig{Name: "T", Subjects: testLayout.StreamSubjects(), SubjectTransform: testLayout.Transform(), Metadata: testLayout.Metadata(42)}
	if got := engine.ReadStreamLayout(cfg); got != (engine.StreamLayout{Name: "partition(4)", Since: 42}) {
		t.Errorf("read %+v", got)
	}
	if !testLayout.Stores(cfg) {
		t.Error("Stores = false for the stream of its own layout")
	}
	other := testLayout
	other.Partitions = 2
	if other.Stores(cfg) {
		t.Error("a layout of 2 partitions stores under partition(4)")
	}
	noRecord := cfg
	noRecord.Metadata = map[string]string{"_nats.level": "1"}
	if testLayout.Stores(noRecord) || engine.ReadStreamLayout(noRecord) != (engine.StreamLayout{}) {
		t.Error("a stream without a record counts as recorded")
	}
	noTransform := cfg
	noTransform.SubjectTransform = nil
	if testLayout.Stores(noTransform) {
		t.Error("a stream without the transform stores under the layout")
	}
	for _, since := range []string{"", "0", "x", "-1"} {
		bad := cfg
		bad.Metadata = map[string]string{engine.LayoutMetadata: "partition(4)", engine.LayoutSinceMetadata: since}
		if got := engine.ReadStreamLayout(bad); got != (engine.StreamLayout{}) {
			t.Errorf("since %q read as %+v, want no record", since, got)
		}
	}
}
