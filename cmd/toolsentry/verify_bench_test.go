package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// BenchmarkVerifyStream is `toolsentry verify` over a stream of signed,
// chained verdicts on a real server: read with an ordered consumer,
// decode, digest, check signature and chain.
func BenchmarkVerifyStream(b *testing.B) {
	for _, n := range []int{5000} {
		b.Run(fmt.Sprintf("verdicts=%d/chains=50", n), func(b *testing.B) {
			_, url := natstest.RunServer(b)
			js := natstest.JetStream(b, url)
			ctx := b.Context()
			if _, err := consumer.Provision(ctx, js, consumer.Config{}); err != nil {
				b.Fatal(err)
			}
			seed, public, err := publisher.GenerateSigningKey()
			if err != nil {
				b.Fatal(err)
			}
			signer, err := publisher.NewSigner(seed)
			if err != nil {
				b.Fatal(err)
			}
			c := &verdictChains{t: &testing.T{}, signer: signer, heads: map[string]string{}}
			for i := range n {
				m := c.schema(fmt.Sprintf("tool-%d", i%50))
				if _, err := js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}, jetstream.WithMsgID(m.ID)); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			opts := verifyOptions{trusted: []string{public}}
			b.ResetTimer()
			total := 0
			for b.Loop() {
				r, err := verifyStream(ctx, js, events.Names{}, opts, nil)
				if err != nil || !r.OK() || r.Verdicts != n {
					b.Fatalf("report %d verdicts, %v, %v", r.Verdicts, r.Problems, err)
				}
				total += r.Verdicts
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "verdicts/s")
		})
	}
}
