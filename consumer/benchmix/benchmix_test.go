package benchmix_test

import (
	"bytes"
	"errors"
	"iter"
	"testing"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

// TestBenchMix checks what the benchmarks rely on: every event is valid
// telemetry that the core applies without error, ids are unique and map
// back to their index, the mix is the same on every read, and it holds
// schema drift that agents' calls touch.
func TestBenchMix(t *testing.T) {
	const n = 3000
	mix, err := benchmix.New(benchmix.Options{Events: n})
	if err != nil {
		t.Fatal(err)
	}
	again, err := benchmix.New(benchmix.Options{Events: n})
	if err != nil {
		t.Fatal(err)
	}
	names, err := events.NewNames(consumer.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	c := core.New(core.Options{Names: names})
	st := core.NewMemState()
	var got benchmix.Counts
	verdicts := map[string]int{}
	seen := map[string]bool{}
	lastNew := -1 // the last event that got a NO_BASELINE verdict
	next, stop := iterPull(again)
	defer stop()
	for i, ev := range mix.All() {
		if j, ok := mix.Index(ev.ID); !ok || j != i {
			t.Fatalf("event %d: Index(%q) = %d, %v", i, ev.ID, j, ok)
		}
		if seen[ev.ID] {
			t.Fatalf("event %d: id %s repeated", i, ev.ID)
		}
		seen[ev.ID] = true
		if ev.Header.Get(events.HeaderMsgID) != ev.ID {
			t.Fatalf("event %d: Nats-Msg-Id %q, id %q", i, ev.Header.Get(events.HeaderMsgID), ev.ID)
		}
		if other, ok := next(); !ok || other.Subject != ev.Subject || !bytes.Equal(other.Data, ev.Data) {
			t.Fatalf("event %d differs between two mixes of the same options", i)
		}
		e, err := names.Decode(ev.Subject, ev.Header, ev.Data)
		if err != nil {
			t.Fatalf("event %d does not decode: %v", i, err)
		}
		if e.ID != ev.ID {
			t.Fatalf("event %d: decoded id %q, want %q", i, e.ID, ev.ID)
		}
		switch ev.Kind {
		case benchmix.KindSchema:
			got.Schema++
		case benchmix.KindInvocation:
			got.Invocation++
		case benchmix.KindContract:
			got.Contract++
		case benchmix.KindWorkflow:
			got.Workflow++
		}
		eff, err := c.Apply(st, core.Input{Event: e, Subject: ev.Subject, Seq: uint64(i + 1)})
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, ev.Subject, err)
		}
		if err := st.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
		for _, v := range eff.Verdicts {
			d, err := names.Decode(v.Subject, v.Header, v.Data)
			if err != nil {
				t.Fatal(err)
			}
			if d.SchemaVerdict != nil {
				verdicts[string(d.SchemaVerdict.Verdict)]++
				if d.SchemaVerdict.Verdict == "NO_BASELINE" {
					lastNew = i
				}
			} else {
				verdicts[string(d.CompositionVerdict.Verdict)]++
			}
		}
	}
	if end := mix.FirstPassEnd(); end != lastNew+1 || end >= n {
		t.Errorf("FirstPassEnd = %d, want %d: the event after the last NO_BASELINE, within the mix", end, lastNew+1)
	}
	if want := mix.Counts(); got != want {
		t.Errorf("counted %+v, Counts says %+v", got, want)
	}
	if got.Schema+got.Invocation+got.Contract+got.Workflow != n || got.Invocation < n*85/100 || got.Schema == 0 || got.Contract == 0 || got.Workflow == 0 {
		t.Errorf("mix %+v: want %d events, mostly invocations, some of every kind", got, n)
	}
	// (The second observation of a tool repeats its version: it is
	// counted, with no SCHEMA_MATCH.)
	for _, v := range []string{"NO_BASELINE", "DRIFT_ON_USED_FIELDS"} {
		if verdicts[v] == 0 {
			t.Errorf("no %s verdict in %v", v, verdicts)
		}
	}
	if verdicts["COMPOSITION_MEETS_QUALITY"]+verdicts["COMPOSITION_DEGRADED"] == 0 {
		t.Errorf("no composition verdict in %v", verdicts)
	}
}

func iterPull(mix *benchmix.Mix) (func() (benchmix.Event, bool), func()) {
	next, stop := iter.Pull2(mix.All())
	return func() (benchmix.Event, bool) {
		_, ev, ok := next()
		return ev, ok
	}, stop
}

func TestBenchMixOptions(t *testing.T) {
	for _, o := range []benchmix.Options{
		{Events: 0},
		{Events: 10, Tools: -1},
		{Events: 10, IDPrefix: "no spaces"},
		{Events: 10, Prefix: "Upper"},
	} {
		if _, err := benchmix.New(o); !errors.Is(err, benchmix.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	mix, err := benchmix.New(benchmix.Options{Events: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if o := mix.Options(); o.Tools != 1000 || o.Agents != 50 || mix.Len() != 1_000_000 {
		t.Errorf("defaults at a million events: %+v", o)
	}
	if _, ok := mix.Index("bench-000001000000"); ok {
		t.Error("an id past the end has an index")
	}
	if _, ok := mix.Index("other-000000000001"); ok {
		t.Error("an id of another prefix has an index")
	}
}
