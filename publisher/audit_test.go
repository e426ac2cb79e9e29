package publisher_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

// chainBuilder builds verdicts as the core does: per chain, each verdict
// links to the digest of the previous one, and is then signed.
type chainBuilder struct {
	t      *testing.T
	names  events.Names
	signer *publisher.Signer
	heads  map[string]string
	n      int
}

func newChainBuilder(t *testing.T, s *publisher.Signer) *chainBuilder {
	return &chainBuilder{t: t, signer: s, heads: map[string]string{}}
}

// next builds the next verdict about key, of the schema guard or, with
// composition, of the composition guard.
func (b *chainBuilder) next(key string, composition bool) events.Message {
	b.t.Helper()
	b.n++
	input := fmt.Sprintf("e%d", b.n)
	kind := events.KindSchemaVerdict
	var m events.Message
	var err error
	chain := events.ChainKey(kind, key)
	if composition {
		kind = events.KindCompositionVerdict
		chain = events.ChainKey(kind, key)
		m, err = b.names.NewCompositionVerdict(events.CompositionVerdict{
			Verdict: guards.CompositionMeetsQuality, Directive: "PROCEED: Composed quality meets the requirement.",
			ManifestDigest: strings.Repeat("cd", 32), CompositionID: key, ComposedQuality: 0.9 + float64(b.n)/1000,
			GuardVersion: "test", InputEventID: input, InputSubject: "toolsentry.telemetry.workflow.x", InputSequence: uint64(b.n),
		}, signTime, events.WithPrevious(b.heads[chain]))
	} else {
		m, err = b.names.NewSchemaVerdict(testSchemaVerdict(key, input), signTime, events.WithPrevious(b.heads[chain]))
	}
	if err != nil {
		b.t.Fatal(err)
	}
	if b.heads[chain], err = events.VerdictDigest(m.Data); err != nil {
		b.t.Fatal(err)
	}
	if b.signer == nil {
		return m
	}
	if m, err = b.signer.Sign(m); err != nil {
		b.t.Fatal(err)
	}
	return m
}

type seqMsg struct {
	seq uint64
	msg events.Message
}

func audit(opts publisher.AuditOptions, msgs []seqMsg, lastSeq uint64) publisher.AuditReport {
	a := publisher.NewAuditor(opts)
	for _, m := range msgs {
		a.Add(m.seq, m.msg.Subject, m.msg.Header, m.msg.Data)
	}
	return a.End(lastSeq)
}

// stream numbers msgs from 1.
func stream(msgs ...events.Message) []seqMsg {
	out := make([]seqMsg, len(msgs))
	for i, m := range msgs {
		out[i] = seqMsg{uint64(i + 1), m}
	}
	return out
}

type finding struct {
	Seq  uint64
	Kind publisher.ProblemKind
}

func findings(r publisher.AuditReport) []finding {
	var out []finding
	for _, p := range r.Problems {
		out = append(out, finding{p.Seq, p.Kind})
	}
	return out
}

func TestAuditCleanChains(t *testing.T) {
	s := newSigner(t)
	b := newChainBuilder(t, s)
	// A tool and a composition with the same id: two chains.
	msgs := stream(b.next("crm.lookup", false), b.next("crm.lookup", true), b.next("crm.lookup", false),
		b.next("billing", false), b.next("crm.lookup", true), b.next("crm.lookup", false))
	r := audit(publisher.AuditOptions{Trusted: []string{s.PublicKey()}}, msgs, 6)
	if !r.OK() {
		t.Fatalf("problems in a clean stream: %+v", r.Problems)
	}
	head := func(i int) publisher.ChainHead {
		d, err := events.VerdictDigest(msgs[i-1].msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		return publisher.ChainHead{Seq: uint64(i), Digest: d}
	}
	want := publisher.AuditReport{Verdicts: 6, Chains: 3, Signed: 6, Keys: map[string]int{s.PublicKey(): 6},
		FirstSeq: 1, LastSeq: 6, Counts: map[publisher.ProblemKind]int{},
		Heads: map[string]publisher.ChainHead{"schema/crm.lookup": head(6), "composition/crm.lookup": head(5), "schema/billing": head(4)}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

func TestAuditFindings(t *testing.T) {
	s := newSigner(t)
	other := newSigner(t)
	b := newChainBuilder(t, s)
	v := make([]events.Message, 6)
	for i := range v {
		v[i] = b.next("crm.lookup", false)
	}
	w := b.next("billing", false)
	trusted := []string{s.PublicKey()}
	unsigned := newChainBuilder(t, nil)
	u1, u2 := unsigned.next("billing", false), unsigned.next("billing", false)
	edited := v[2]
	edited.Data = bytes.Replace(edited.Data, []byte(`"HALT: Drift`), []byte(`"PROCEED: Drift`), 1)
	fresh := newChainBuilder(t, s)
	fresh.n = 100 // other inputs than b's
	restart := fresh.next("crm.lookup", false)
	resigned, err := other.Sign(v[1])
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		opts    publisher.AuditOptions
		msgs    []seqMsg
		lastSeq uint64
		want    []finding
	}{
		{"deleted verdict: chain break and gap",
			publisher.AuditOptions{Trusted: trusted},
			[]seqMsg{{1, v[0]}, {2, v[1]}, {4, v[3]}, {5, v[4]}}, 5,
			[]finding{{3, publisher.ProblemDeleted}, {4, publisher.ProblemMissing}}},
		{"edited copy re-published: the original chain stays intact",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], v[1], v[2], v[3], edited, v[4]), 6,
			[]finding{{5, publisher.ProblemTampered}}},
		{"edited, and the original purged",
			publisher.AuditOptions{Trusted: trusted},
			[]seqMsg{{1, v[0]}, {2, v[1]}, {4, v[3]}, {5, edited}, {6, v[4]}}, 6,
			[]finding{{3, publisher.ProblemDeleted}, {4, publisher.ProblemMissing}, {5, publisher.ProblemTampered}}},
		{"exact copy re-published",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], v[1], v[2], v[1], v[3]), 5,
			[]finding{{4, publisher.ProblemOutOfOrder}}},
		{"re-ordered: deleted and re-published later",
			publisher.AuditOptions{Trusted: trusted},
			[]seqMsg{{1, v[0]}, {2, v[1]}, {4, v[3]}, {5, v[2]}, {6, v[4]}}, 6,
			[]finding{{3, publisher.ProblemDeleted}, {4, publisher.ProblemMissing}, {5, publisher.ProblemOutOfOrder}, {6, publisher.ProblemOutOfOrder}}},
		{"unsigned verdicts: named, their chain checked",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], u1, v[1], u2), 4,
			[]finding{{2, publisher.ProblemUnsigned}, {4, publisher.ProblemUnsigned}}},
		{"wrong key",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], resigned, v[2]), 3,
			[]finding{{2, publisher.ProblemUntrusted}}},
		{"any key without trusted keys",
			publisher.AuditOptions{},
			stream(v[0], resigned, v[2]), 3,
			nil},
		{"window: the first verdict of each chain is its anchor",
			publisher.AuditOptions{Trusted: trusted, Anchored: true, StartSeq: 3},
			[]seqMsg{{3, v[2]}, {4, v[3]}, {5, w}}, 5,
			nil},
		{"whole stream: a first verdict with a predecessor is a break",
			publisher.AuditOptions{Trusted: trusted, StreamFirstSeq: 3, StartSeq: 3},
			[]seqMsg{{3, v[2]}, {4, v[3]}, {5, w}}, 5,
			[]finding{{3, publisher.ProblemMissing}}},
		{"chain restarts without a link",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], v[1], restart), 3,
			[]finding{{3, publisher.ProblemMissing}}},
		{"newest messages deleted: a gap up to the stream's last sequence",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], v[1], v[2]), 5,
			[]finding{{4, publisher.ProblemDeleted}}},
		{"window start deleted",
			publisher.AuditOptions{Trusted: trusted, Anchored: true, StartSeq: 2},
			[]seqMsg{{4, v[3]}, {5, v[4]}}, 5,
			[]finding{{2, publisher.ProblemDeleted}}},
		{"not a verdict",
			publisher.AuditOptions{Trusted: trusted},
			stream(v[0], events.Message{Subject: v[1].Subject, Data: []byte(`{"specversion":"1.0"}`)}, v[1]), 3,
			[]finding{{2, publisher.ProblemTampered}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := audit(tc.opts, tc.msgs, tc.lastSeq)
			if diff := cmp.Diff(tc.want, findings(r)); diff != "" {
				for _, p := range r.Problems {
					t.Log(p.Describe())
				}
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			n := 0
			for _, c := range r.Counts {
				n += c
			}
			if n != len(r.Problems) || r.OK() != (len(tc.want) == 0) {
				t.Errorf("counts %v for %d problems, OK %v", r.Counts, len(r.Problems), r.OK())
			}
		})
	}
}

func TestAuditProblemNamesTheVerdict(t *testing.T) {
	s := newSigner(t)
	b := newChainBuilder(t, s)
	v0, v1, v2 := b.next("crm.lookup", false), b.next("crm.lookup", false), b.next("crm.lookup", false)
	r := audit(publisher.AuditOptions{Trusted: []string{s.PublicKey()}}, []seqMsg{{1, v0}, {3, v2}}, 3)
	if len(r.Problems) != 2 {
		t.Fatalf("problems %+v", r.Problems)
	}
	p := r.Problems[1]
	d1, _ := events.VerdictDigest(v1.Data)
	if p.Chain != "schema/crm.lookup" || p.ID != v2.ID || p.Subject != v2.Subject || !strings.Contains(p.Reason, d1) || !strings.Contains(p.Reason, "seq 1") {
		t.Errorf("problem %+v: want the chain, the verdict's id and subject, and the missing digest after seq 1", p)
	}
	if got := r.Problems[0].Describe(); got != "seq 2  deleted: seq 2 holds no message: deleted or purged" {
		t.Errorf("Describe() = %q", got)
	}
}
