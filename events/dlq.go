package events

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
// the spellings toolsentry writes (the same as package consumer).
const (
	HeaderMsgID       = "Nats-Msg-Id"  // JetStream deduplication id: the CloudEvent id
	HeaderContentType = "Content-Type" // ContentTypeStructured on events toolsentry writes

	HeaderDLQReason        = "Toolsentry-Dlq-Reason"        // a Reason
	HeaderDLQError         = "Toolsentry-Dlq-Error"         // the error text, one line, at most MaxDLQErrorLen bytes
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

// MaxDLQErrorLen caps the HeaderDLQError value.
const MaxDLQErrorLen = 1024

// Original is a message as it was consumed, before it is dead-lettered.
type Original struct {
	Stream    string
	Subject   string
	Sequence  uint64
	Time      time.Time // the stream's timestamp; zero omits the header
	Delivered uint64    // delivery count; 0 omits the header
	Header    map[string][]string
	Data      []byte
}

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

// NewDeadLetter builds the dead letter of orig: the original bytes, the
// original headers (so a binary-mode event keeps its ce- headers) except
// NATS control headers (Nats-*, which would act on the dead-letter stream;
// the original Nats-Msg-Id is kept as HeaderOriginalMsgID) and earlier
// Toolsentry-* headers, and the dead-letter headers. Its id (Message.ID,
// also its Nats-Msg-Id) is "dlq-<stream>-<sequence>", so a dead letter
// published twice for the same message is deduplicated. cause may be nil.
func (n Names) NewDeadLetter(reason Reason, cause error, orig Original) (Message, error) {
	subject, err := n.DeadLetter(reason)
	if err != nil {
		return Message{}, err
	}
	h := make(map[string][]string, len(orig.Header)+9)
	msgID := ""
	for k, v := range orig.Header {
		lower := strings.ToLower(k)
		if lower == strings.ToLower(HeaderMsgID) && len(v) > 0 {
			msgID = v[0]
		}
		if strings.HasPrefix(lower, "nats-") || strings.HasPrefix(lower, "toolsentry-") {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	msg := ""
	if cause != nil {
		msg = headerSafe(cause.Error(), MaxDLQErrorLen)
	}
	id := "dlq-" + orig.Stream + "-" + strconv.FormatUint(orig.Sequence, 10)
	h[HeaderDLQReason] = []string{string(reason)}
	h[HeaderDLQError] = []string{msg}
	h[HeaderOriginalSubject] = []string{headerSafe(orig.Subject, 4096)}
	h[HeaderOriginalSequence] = []string{strconv.FormatUint(orig.Sequence, 10)}
	h[HeaderOriginalStream] = []string{headerSafe(orig.Stream, 256)}
	if !orig.Time.IsZero() {
		h[HeaderOriginalTime] = []string{orig.Time.UTC().Format(time.RFC3339Nano)}
	}
	if msgID != "" {
		h[HeaderOriginalMsgID] = []string{headerSafe(msgID, 1024)}
	}
	if orig.Delivered > 0 {
		h[HeaderNumDelivered] = []string{strconv.FormatUint(orig.Delivered, 10)}
	}
	h[HeaderMsgID] = []string{id}
	return Message{Subject: subject, ID: id, Header: h, Data: orig.Data}, nil
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

// headerSafe makes s a valid one-line header value: control characters
// become spaces, and it is cut to at most max bytes on a rune boundary.
func headerSafe(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
