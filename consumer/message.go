package consumer

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Message is one delivery of a stream message, as a handler sees it. The
// engine owns the acknowledgement; a handler only returns an error.
//
// Handlers must treat Header and Data as read-only: the engine dead-letters
// the very same bytes if the handler fails permanently.
type Message struct {
	// Subject is the subject the message was published on.
	Subject string
	// Header holds the message headers as published (nil if none).
	Header nats.Header
	// Data is the message body, the original bytes.
	Data []byte
	// Stream is the name of the stream that stored the message.
	Stream string
	// StreamSeq is the message's sequence in Stream. Per key, handlers see
	// strictly increasing StreamSeq except after an Engine has been
	// restarted mid-key or a redelivery was lost (see package doc), so a
	// handler that stores the last StreamSeq it applied per key can skip
	// what it has already applied.
	StreamSeq uint64
	// NumDelivered is how many times the server has delivered this message,
	// 1 on the first delivery.
	NumDelivered uint64
	// Timestamp is when the stream stored the message.
	Timestamp time.Time
	// Key is the ordering key the engine computed with Options.Key.
	Key string
}

// Handler processes messages for an Engine.
//
// Handle is called concurrently for messages of different keys and never
// concurrently for two messages of one key; it must honour ctx, which is
// cancelled at Options.HandlerTimeout and at the shutdown deadline.
//
// Handle returns when every output of the message is durably stored: a
// handler that publishes asynchronously (publisher.Batch) waits for the
// PubAcks before returning, and a handler that writes state waits for the
// write. The engine acknowledges the input only after Handle returned nil.
//
// An error that matches ErrPermanent (for example a *PermanentError) means
// bad input: the message is dead-lettered and terminated. Any other error is
// transient: the message is redelivered later, in order, until MaxDeliver.
// A panic is contained and treated as a permanent error (ReasonPanic).
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Outcome is what the engine did with a message after its handler returned.
type Outcome string

// Outcomes reported to Observer.OnOutcome.
const (
	// OutcomeAck: the handler succeeded and the message was acknowledged.
	OutcomeAck Outcome = "ack"
	// OutcomeRetry: the handler failed transiently; the message was
	// nak'd with a delay and its key waits for the redelivery.
	OutcomeRetry Outcome = "retry"
	// OutcomeDeadLetter: the message was written to the dead-letter stream
	// and terminated.
	OutcomeDeadLetter Outcome = "dead_letter"
	// OutcomeDeadLetterFailed: the message should have been dead-lettered
	// but the dead-letter publish failed; it was nak'd with a delay so that
	// it is not lost.
	OutcomeDeadLetterFailed Outcome = "dead_letter_failed"
	// OutcomeShutdown: the handler was cancelled by the shutdown deadline;
	// the message was nak'd for immediate redelivery.
	OutcomeShutdown Outcome = "shutdown"
)

// Observer receives the engine's metrics events, so that a Prometheus
// collector can be wired in without this package importing it. Methods are
// called concurrently from worker goroutines and must not block.
type Observer interface {
	// OnOutcome is called once per handled delivery with the message kind
	// (Options.Kind), what the engine did and how long the handler took.
	OnOutcome(kind string, outcome Outcome, handler time.Duration)
	// OnRedelivery is called when a delivery arrives with NumDelivered > 1.
	OnRedelivery(kind string)
	// OnDeadLetter is called after a message was stored in the dead-letter
	// stream, with its reason code.
	OnDeadLetter(kind, reason string)
}

type nopObserver struct{}

func (nopObserver) OnOutcome(string, Outcome, time.Duration) {}
func (nopObserver) OnRedelivery(string)                      {}
func (nopObserver) OnDeadLetter(string, string)              {}

// LastToken returns the last token of the message's subject: the default
// ordering key, since telemetry subjects end with the tool or composition
// id (toolsentry.telemetry.<kind>.<key>).
func LastToken(m *Message) string {
	return m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
}

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
