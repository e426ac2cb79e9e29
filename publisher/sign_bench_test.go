package publisher_test

import (
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// BenchmarkSign is the cost the processor adds per verdict with a signing
// key: decode, re-encode, digest, ed25519.
func BenchmarkSign(b *testing.B) {
	s := newSigner(&testing.T{})
	msg := schemaMsg(&testing.T{}, events.Names{}, "e1", "sha256:"+"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
}

// BenchmarkVerdictDigest is the cost of the chain link per verdict (the
// core computes it for each verdict it builds).
func BenchmarkVerdictDigest(b *testing.B) {
	msg := schemaMsg(&testing.T{}, events.Names{}, "e1", "")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.VerdictDigest(msg.Data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
}

// BenchmarkAudit is verify's cost per verdict, without NATS: decode,
// digest, signature check, chain.
func BenchmarkAudit(b *testing.B) {
	t := &testing.T{}
	s := newSigner(t)
	c := newChainBuilder(t, s)
	msgs := make([]events.Message, 1000)
	for i := range msgs {
		msgs[i] = c.next([]string{"a", "b", "c", "d"}[i%4], false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		a := publisher.NewAuditor(publisher.AuditOptions{Trusted: []string{s.PublicKey()}})
		for i, m := range msgs {
			a.Add(uint64(i+1), m.Subject, m.Header, m.Data)
		}
		if r := a.End(0); !r.OK() {
			b.Fatal(r.Problems)
		}
		n += len(msgs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "verdicts/s")
}
