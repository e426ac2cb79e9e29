package consumer

import (
	"strings"
	"time"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// Message is one stored telemetry message as the worker sees it: the
// runtime's (engine.Message).
type Message = engine.Message

// Outcome is what became of an input after its handler call, as the
// metrics count it.
type Outcome string

// Outcomes reported to Observer.OnOutcome.
const (
	// OutcomeAck: applied (the label keeps its name from the ack model).
	OutcomeAck Outcome = "ack"
	// OutcomeRetry: failed transiently; its key retries after a backoff.
	OutcomeRetry Outcome = "retry"
	// OutcomeDeadLetter: bad input, dead-lettered.
	OutcomeDeadLetter Outcome = "dead_letter"
	// OutcomeShutdown: cancelled by the shutdown deadline or a lost lease;
	// read again by the next holder.
	OutcomeShutdown Outcome = "shutdown"
)

// Observer receives the worker's metrics events, so that a Prometheus
// collector can be wired in without this package importing it. Methods are
// called concurrently from worker goroutines and must not block.
type Observer interface {
	// OnOutcome is called once per input handed to the handler, with its
	// kind (ServiceOptions.Kind), what became of it and its share of the
	// handler call's time.
	OnOutcome(kind string, outcome Outcome, handler time.Duration)
	// OnRedelivery is called when an input is handed again after a
	// transient failure (Message.Attempt > 1).
	OnRedelivery(kind string)
	// OnDeadLetter is called after a message was stored in the dead-letter
	// stream, with its reason code.
	OnDeadLetter(kind, reason string)
}

// LastToken returns the last token of the message's subject: the default
// ordering key, since telemetry subjects end with the tool or composition
// id (toolsentry.telemetry.<kind>.<key>).
func LastToken(m *Message) string { return engine.LastToken(m) }

// KindToken returns the <kind> token of the message's subject: the
// next-to-last token of toolsentry.telemetry.<kind>.<key>, the one before
// the partition token of the stored toolsentry.telemetry.<kind>.<p>.<key>
// (a next-to-last token of digits only is a partition, never a kind), or ""
// for a subject with a single token: the default metrics label.
func KindToken(m *Message) string { return kindToken(m.Subject) }

func kindToken(subject string) string {
	last := strings.LastIndexByte(subject, '.')
	if last < 0 {
		return ""
	}
	start := strings.LastIndexByte(subject[:last], '.') + 1
	if start > 0 && allDigits(subject[start:last]) {
		last = start - 1
		start = strings.LastIndexByte(subject[:last], '.') + 1
	}
	return subject[start:last]
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
