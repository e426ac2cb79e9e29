package events

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolsentry/toolsentry/guards"
)

// Reason says why a message was dead-lettered. It is the last token of the
// dead letter's subject (toolsentry.dlq.<reason>) and the value of the
// HeaderDLQReason header.
type Reason string

// The dead-letter reasons. The first seven are permanent input errors, found
// by ReasonFor; the last three are written by the consumer engine itself
// (the same codes as package consumer).
const (
	ReasonNotCloudEvent   Reason = "not_cloudevent"   // ErrNotCloudEvent
	ReasonSpecViolation   Reason = "spec_violation"   // ErrSpecViolation
	ReasonUnknownType     Reason = "unknown_type"     // ErrUnknownType
	ReasonSchemaInvalid   Reason = "schema_invalid"   // ErrSchemaInvalid
	ReasonSubjectMismatch Reason = "subject_mismatch" // ErrSubjectMismatch
	ReasonBadSubject      Reason = "bad_subject"      // ErrBadSubject
	ReasonInvalidInput    Reason = "invalid_input"    // guards.ErrInvalid: well-formed, but meaningless to a guard

	ReasonMaxDeliver   Reason = "max_deliver"   // a transient failure persisted through MaxDeliver deliveries
	ReasonHandlerPanic Reason = "handler_panic" // the handler panicked
	ReasonPermanent    Reason = "permanent"     // another permanent failure
)

var reasons = []struct {
	err    error
	reason Reason
}{
	{ErrNotCloudEvent, ReasonNotCloudEvent},
	{ErrSpecViolation, ReasonSpecViolation},
	{ErrUnknownType, ReasonUnknownType},
	{ErrSchemaInvalid, ReasonSchemaInvalid},
	{ErrSubjectMismatch, ReasonSubjectMismatch},
	{ErrBadSubject, ReasonBadSubject},
	{guards.ErrInvalid, ReasonInvalidInput},
}

// Valid reports whether r is one of the reasons above.
func (r Reason) Valid() bool {
	switch r {
	case ReasonMaxDeliver, ReasonHandlerPanic, ReasonPermanent:
		return true
	}
	for _, x := range reasons {
		if x.reason == r {
			return true
		}
	}
	return false
}

// ReasonFor maps an error to the dead-letter reason of the first sentinel it
// wraps (in the order of the constants above) and reports true; an error
// that wraps none of them may be transient, and ReasonFor reports false: the
// caller retries it, and dead-letters it with ReasonMaxDeliver when the
// deliveries run out.
func ReasonFor(err error) (Reason, bool) {
	if err == nil {
		return "", false
	}
	for _, x := range reasons {
		if errors.Is(err, x.err) {
			return x.reason, true
		}
	}
	return "", false
}

// Header names. NATS header names are case-sensitive on the wire; these are
// the spellings toolsentry writes. Dead letters are built in one place, the
// consumer engine (consumer/engine, which imports nothing of ours and so
// declares the same names byte for byte; package consumer's tests hold the
// two sets equal); ParseDeadLetter reads them.
const (
	HeaderMsgID       = "Nats-Msg-Id"  // JetStream deduplication id: the CloudEvent id
	HeaderContentType = "Content-Type" // ContentTypeStructured on events toolsentry writes

	HeaderDLQReason        = "Toolsentry-Dlq-Reason"        // a Reason
	HeaderDLQError         = "Toolsentry-Dlq-Error"         // the error text, one line, at most 1024 bytes
	HeaderOriginalSubject  = "Toolsentry-Original-Subject"  // the subject the message arrived on
	HeaderOriginalSequence = "Toolsentry-Original-Sequence" // its sequence in HeaderOriginalStream, decimal
	HeaderOriginalStream   = "Toolsentry-Original-Stream"   // the stream it was consumed from
	HeaderOriginalTime     = "Toolsentry-Original-Time"     // when the stream stored it, RFC 3339 in UTC
	HeaderOriginalMsgID    = "Toolsentry-Original-Msg-Id"   // its Nats-Msg-Id
	HeaderNumDelivered     = "Toolsentry-Num-Delivered"     // how often it was delivered, decimal
)

// ContentTypeStructured is the Content-Type of a structured-mode CloudEvent
// in the JSON format; per the NATS binding it marks the message as
// structured.
const ContentTypeStructured = "application/cloudevents+json; charset=utf-8"

// DeadLetter is what the dead-letter headers say about a message.
type DeadLetter struct {
	Reason    Reason
	Error     string
	Stream    string
	Subject   string
	Sequence  uint64
	Time      time.Time // zero when absent
	MsgID     string    // the original Nats-Msg-Id; "" when absent
	Delivered uint64    // 0 when absent
}

// ParseDeadLetter reads the dead-letter headers of a message from the
// dead-letter stream.
func ParseDeadLetter(header map[string][]string) (DeadLetter, error) {
	get := func(name string) (string, bool) {
		v, ok := header[name]
		if !ok || len(v) != 1 {
			return "", false
		}
		return v[0], true
	}
	var dl DeadLetter
	r, ok := get(HeaderDLQReason)
	if !ok || !Reason(r).Valid() {
		return DeadLetter{}, fmt.Errorf("%w: header %s %q: not a dead-letter reason", ErrBadEvent, HeaderDLQReason, r)
	}
	dl.Reason = Reason(r)
	dl.Error, _ = get(HeaderDLQError)
	if dl.Subject, ok = get(HeaderOriginalSubject); !ok {
		return DeadLetter{}, fmt.Errorf("%w: header %s missing", ErrBadEvent, HeaderOriginalSubject)
	}
	if dl.Stream, ok = get(HeaderOriginalStream); !ok {
		return DeadLetter{}, fmt.Errorf("%w: header %s missing", ErrBadEvent, HeaderOriginalStream)
	}
	seq, _ := get(HeaderOriginalSequence)
	var err error
	if dl.Sequence, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return DeadLetter{}, fmt.Errorf("%w: header %s %q: not a sequence", ErrBadEvent, HeaderOriginalSequence, seq)
	}
	if t, ok := get(HeaderOriginalTime); ok {
		if dl.Time, err = time.Parse(time.RFC3339Nano, t); err != nil {
			return DeadLetter{}, fmt.Errorf("%w: header %s %q: not an RFC 3339 time", ErrBadEvent, HeaderOriginalTime, t)
		}
	}
	dl.MsgID, _ = get(HeaderOriginalMsgID)
	if d, ok := get(HeaderNumDelivered); ok {
		if dl.Delivered, err = strconv.ParseUint(d, 10, 64); err != nil {
			return DeadLetter{}, fmt.Errorf("%w: header %s %q: not a count", ErrBadEvent, HeaderNumDelivered, d)
		}
	}
	return dl, nil
}
