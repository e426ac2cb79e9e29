package consumer_test

import (
	"testing"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// TestDeadLetterHeadersAreEvents holds the header names the engine writes
// dead letters with (it imports nothing of ours, so it declares them) to
// the events contract that events.ParseDeadLetter reads, byte for byte.
func TestDeadLetterHeadersAreEvents(t *testing.T) {
	for _, h := range []struct{ engine, events string }{
		{engine.HeaderDeadLetterReason, events.HeaderDLQReason},
		{engine.HeaderDeadLetterError, events.HeaderDLQError},
		{engine.HeaderOriginalSubject, events.HeaderOriginalSubject},
		{engine.HeaderOriginalStream, events.HeaderOriginalStream},
		{engine.HeaderOriginalSequence, events.HeaderOriginalSequence},
		{engine.HeaderOriginalTime, events.HeaderOriginalTime},
		{engine.HeaderOriginalMsgID, events.HeaderOriginalMsgID},
		{engine.HeaderNumDelivered, events.HeaderNumDelivered},
	} {
		if h.engine != h.events {
			t.Errorf("the engine writes header %q, events reads %q", h.engine, h.events)
		}
	}
	for _, r := range []struct {
		engine string
		events events.Reason
	}{
		{engine.ReasonPermanent, events.ReasonPermanent},
		{engine.ReasonPanic, events.ReasonHandlerPanic},
		{engine.ReasonMaxAttempts, events.ReasonMaxDeliver},
	} {
		if r.engine != string(r.events) || !r.events.Valid() {
			t.Errorf("the engine's reason %q, events' %q", r.engine, r.events)
		}
	}
}
