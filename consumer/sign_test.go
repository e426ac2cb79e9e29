package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// TestProcessorSignsVerdicts: with a Signer, every verdict the processor
// stores carries a signature that verifies under the signer's key, and
// still decodes.
func TestProcessorSignsVerdicts(t *testing.T) {
	_, url := natstest.RunServer(t)
	seed, public, err := publisher.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := publisher.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testContext(t), 20*time.Second)
	defer cancel()
	svc, err := consumer.StartService(ctx, natstest.Connect(t, url), consumer.ServiceOptions{
		Config:    testConfig(),
		Engine:    testOptions(),
		Processor: consumer.ProcessorOptions{Signer: signer},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("closing service: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})

	js := natstest.JetStream(t, url)
	publish(t, js, observation(t, "crm.lookup", crmV1))
	publish(t, js, invocation(t, "crm.lookup", "agent-a", `{"user_id":"u"}`))
	publish(t, js, observation(t, "crm.lookup", crmRenamed))
	waitVerdicts(t, js, 2)
	waitSettled(t, js)

	msgs := streamMessages(t, js, "TOOLSENTRY_VERDICTS")
	if len(msgs) != 2 {
		t.Fatalf("%d verdicts, want 2", len(msgs))
	}
	for _, m := range msgs {
		v, err := publisher.VerifyVerdict(m.Data(), []string{public})
		if err != nil {
			t.Errorf("stored verdict %s: %v", m.Subject(), err)
			continue
		}
		if v.KeyID != public {
			t.Errorf("signed by %s, want %s", v.KeyID, public)
		}
		if _, err := events.Decode(m.Subject(), m.Headers(), m.Data()); err != nil {
			t.Errorf("a signed verdict does not decode: %v", err)
		}
	}
}

type failingSigner struct{}

var errSignerBroken = errors.New("signer broken")

func (failingSigner) Sign(events.Message) (events.Message, error) {
	return events.Message{}, errSignerBroken
}

// TestProcessorNeverPublishesUnsigned: when the signer fails, the verdict
// is not published unsigned and the input is not acknowledged.
func TestProcessorNeverPublishesUnsigned(t *testing.T) {
	_, url := natstest.RunServer(t)
	nc := natstest.Connect(t, url)
	js := natstest.JetStream(t, url)
	ctx := testContext(t)
	res, err := consumer.Provision(ctx, js, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	store, err := consumer.OpenStore(ctx, res, consumer.ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	pub, err := publisher.New(nc, publisher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	proc := consumer.NewProcessor(store, pub, consumer.ProcessorOptions{Signer: failingSigner{}})
	obs := observation(t, "crm.lookup", crmV1)
	err = proc.Handle(ctx, &consumer.Message{Subject: obs.Subject, Header: obs.Header, Data: obs.Data, StreamSeq: 1})
	if !errors.Is(err, errSignerBroken) {
		t.Fatalf("Handle: %v, want the signer's error", err)
	}
	var perm *consumer.PermanentError
	if errors.As(err, &perm) {
		t.Errorf("a signing failure is permanent: %v; it should be retried", err)
	}
	if n := streamCount(t, js, "TOOLSENTRY_VERDICTS"); n != 0 {
		t.Errorf("%d verdicts published without a signature", n)
	}
}
