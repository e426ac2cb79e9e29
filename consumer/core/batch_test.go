package core

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
)

// batchInput is one input of a batch test: kind token, type and data.
type batchInput struct{ kind, typ, data string }

func (in batchInput) decode(t *testing.T, seq uint64, tool string) Input {
	t.Helper()
	tok, _ := events.KeyToken(tool)
	subject := "toolsentry.telemetry." + in.kind + "." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"ev-%d","source":"test","type":%q,"time":"2026-10-03T10:00:00Z","datacontenttype":"application/json","data":%s}`, seq, in.typ, in.data)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return Input{Event: ev, Subject: subject, Seq: seq}
}

// memSnapshot is a MemState's records, for comparison.
func memSnapshot(m *MemState) map[string]any {
	out := map[string]any{}
	for k, r := range m.baselines {
		out["baseline/"+k] = r
	}
	for tool, byAgent := range m.usage {
		for agent, r := range byAgent {
			out["usage/"+tool+"/"+agent] = r
		}
	}
	for k, r := range m.quality {
		out["quality/"+k] = r
	}
	for k, r := range m.outcomes {
		out["outcomes/"+k] = r
	}
	for k, r := range m.workflows {
		out["workflows/"+k] = r
	}
	return out
}

// TestBatchIsTheInputsOneByOne: a tool's inputs applied in one Batch, its
// commits stored in order, give the verdicts and state of the inputs
// applied and stored one by one, through a baseline, calls that grow two
// agents' usage, an operator forgetting one agent (a deletion the later
// inputs must not see through) and that agent calling again. The commits
// are: the first observation alone (a verdict), the calls merged (each
// record once, where its last write was), the operator's action alone,
// the last calls merged; with a limit of the wrong type, the calls that
// send it are told of the drift, and each of those is a commit of its own.
func TestBatchIsTheInputsOneByOne(t *testing.T) {
	t.Run("limit=string", func(t *testing.T) {
		testBatchIsTheInputsOneByOne(t, `"3"`, [][]string{
			{"outcomes:[crm.lookup]", "baselines:[crm.lookup]"},
			{"usage:[crm.lookup b]", "usage:[crm.lookup a]", "outcomes:[crm.lookup] deferred"},
			{"outcomes:[crm.lookup]", "usage:[crm.lookup a] delete", "outcomes:[crm.lookup]"},
			{"usage:[crm.lookup a]", "usage:[crm.lookup b]", "outcomes:[crm.lookup] deferred"},
		})
	})
	t.Run("limit=integer", func(t *testing.T) {
		testBatchIsTheInputsOneByOne(t, `3`, [][]string{
			{"outcomes:[crm.lookup]", "baselines:[crm.lookup]"},
			{"usage:[crm.lookup a]", "usage:[crm.lookup b]", "outcomes:[crm.lookup] deferred"},
			{"outcomes:[crm.lookup]", "usage:[crm.lookup a]"},
			{"outcomes:[crm.lookup]", "usage:[crm.lookup a] delete", "outcomes:[crm.lookup]"},
			{"usage:[crm.lookup a]", "outcomes:[crm.lookup] deferred"},
			{"outcomes:[crm.lookup]", "usage:[crm.lookup b]"},
		})
	})
}

func testBatchIsTheInputsOneByOne(t *testing.T, limit string, wantShape [][]string) {
	const tool = "crm.lookup"
	obs := batchInput{"schema", events.TypeSchemaObserved, fmt.Sprintf(`{"tool_id":%q,"version":"1","tool":%s}`, tool, crmV1)}
	call := func(agent, args string) batchInput {
		return batchInput{"invocation", events.TypeInvocation,
			fmt.Sprintf(`{"tool_id":%q,"agent_id":%q,"arguments":%s,"outcome":{"status":"ok"}}`, tool, agent, args)}
	}
	forget := batchInput{events.KindAgentForgotten.Token(), events.KindAgentForgotten.Type(),
		fmt.Sprintf(`{"tool_id":%q,"agent_id":"a","operator":"ana@ops","reason":"test"}`, tool)}
	inputs := []batchInput{
		obs,
		call("a", `{"user_id":"u"}`), call("b", `{"user_id":"u"}`), call("a", `{"user_id":"u","limit":`+limit+`}`),
		forget,
		call("a", `{"user_id":"u"}`), call("b", `{"user_id":"u","limit":`+limit+`}`),
	}

	one, oneState := New(Options{QualityEvery: 1 << 40}), NewMemState()
	var want []events.Message
	for i, in := range inputs {
		eff, err := one.Apply(oneState, in.decode(t, uint64(i+1), tool))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, eff.Verdicts...)
		if err := oneState.Store(eff.Writes); err != nil {
			t.Fatal(err)
		}
	}

	c, st := New(Options{QualityEvery: 1 << 40}), NewMemState()
	b := c.NewBatch(st)
	var got []events.Message
	for i, in := range inputs {
		eff, err := b.Apply(in.decode(t, uint64(i+1), tool))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, eff.Verdicts...)
	}
	if _, ok := st.Usage(tool, "a"); ok {
		t.Fatal("the batch wrote to its state before its commits")
	}
	commits := b.Commits()
	var shape [][]string
	for _, writes := range commits {
		var names []string
		for _, w := range writes {
			n := string(w.Bucket) + ":" + fmt.Sprint(w.IDs)
			if w.Delete {
				n += " delete"
			}
			if w.Deferred {
				n += " deferred"
			}
			names = append(names, n)
		}
		shape = append(shape, names)
		if err := st.Store(writes); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff(wantShape, shape); d != "" {
		t.Errorf("commits (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("verdicts (-one by one +batch):\n%s", d)
	}
	if d := cmp.Diff(memSnapshot(oneState), memSnapshot(st)); d != "" {
		t.Errorf("state (-one by one +batch):\n%s", d)
	}
	if len(want) == 0 {
		t.Error("no verdicts")
	}
	if u, _ := st.Usage(tool, "a"); u == nil || len(u.Input) != 1 {
		t.Errorf("agent a after it was forgotten: %+v, want its last call's field only", u)
	}
}

// TestBatchSplitsAreAllTheSame: random inputs of one tool (three versions
// observed, three agents calling with or without the optional field and
// with a type the renamed version refuses, outcomes, and every operator
// action), applied one by one and in batches split at random, give the
// same verdicts, checkpoints and state, whatever the split.
func TestBatchSplitsAreAllTheSame(t *testing.T) {
	const tool = "crm.lookup"
	crmV3 := `{"name":"lookup","description":"Find a CRM user.","inputSchema":{"type":"object","properties":{"user_id":{"type":"string","description":"The user's id."},"limit":{"type":"string"},"include_deleted":{"type":"boolean","default":false},"page":{"type":"integer"}},"required":["user_id"]}}`
	versions := []string{crmV1, crmRenamed, crmV3}
	args := []string{`{"user_id":"u"}`, `{"user_id":"u","limit":"3"}`, `{"userId":"u"}`, `{"user_id":"u","limit":3}`}
	agents := []string{"a", "b", "c"}
	for seed := range uint64(25) {
		rng := rand.New(rand.NewPCG(seed, 7))
		one, oneState := New(Options{QualityEvery: 3}), NewMemState()
		var inputs []Input
		var want []events.Message
		for i := range 40 {
			seq := uint64(i + 1)
			var in batchInput
			agent := agents[rng.IntN(len(agents))]
			op := func(k events.Kind, rest string) batchInput {
				return batchInput{k.Token(), k.Type(), fmt.Sprintf(`{"tool_id":%q,"operator":"ana@ops","reason":"test"%s}`, tool, rest)}
			}
			switch r := rng.IntN(20); {
			case r < 3:
				v := rng.IntN(len(versions))
				in = batchInput{"schema", events.TypeSchemaObserved, fmt.Sprintf(`{"tool_id":%q,"version":"%d","tool":%s}`, tool, v+1, versions[v])}
			case r < 16:
				in = batchInput{"invocation", events.TypeInvocation, fmt.Sprintf(`{"tool_id":%q,"agent_id":%q,"arguments":%s,"outcome":{"status":%q}}`,
					tool, agent, args[rng.IntN(len(args))], []string{"ok", "error"}[rng.IntN(2)])}
			case r == 16:
				fp := "sha256:none"
				if b, ok := oneState.Baseline(tool); ok {
					fp = b.Current.Fingerprint
				}
				in = op(events.KindBaselineAccepted, fmt.Sprintf(`,"fingerprint":%q`, fp))
			case r == 17:
				in = op(events.KindBaselineReset, "")
			case r == 18:
				in = op(events.KindAgentForgotten, fmt.Sprintf(`,"agent_id":%q`, agent))
			default:
				in = op(events.KindAgentMigrated, fmt.Sprintf(`,"agent_id":%q`, agent))
			}
			input := in.decode(t, seq, tool)
			inputs = append(inputs, input)
			eff, err := one.Apply(oneState, input)
			if err != nil {
				t.Fatalf("seed %d input %d: %v", seed, i, err)
			}
			want = append(want, eff.Verdicts...)
			want = append(want, eff.Telemetry...)
			if err := oneState.Store(eff.Writes); err != nil {
				t.Fatal(err)
			}
		}
		c, st := New(Options{QualityEvery: 3}), NewMemState()
		var got []events.Message
		for rest := inputs; len(rest) > 0; {
			n := 1 + rng.IntN(len(rest))
			b := c.NewBatch(st)
			for _, in := range rest[:n] {
				eff, err := b.Apply(in)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, eff.Verdicts...)
				got = append(got, eff.Telemetry...)
			}
			for _, writes := range b.Commits() {
				if err := st.Store(writes); err != nil {
					t.Fatal(err)
				}
			}
			rest = rest[n:]
		}
		if len(want) == 0 {
			t.Fatalf("seed %d: no verdicts", seed)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("seed %d: verdicts and checkpoints (-one by one +batches):\n%s", seed, d)
		}
		if d := cmp.Diff(memSnapshot(oneState), memSnapshot(st)); d != "" {
			t.Fatalf("seed %d: state (-one by one +batches):\n%s", seed, d)
		}
	}
}
