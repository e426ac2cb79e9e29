package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers the engine adds to a dead letter, next to the original headers.
// They are the names of the events package's dead-letter contract, byte for
// byte, so that a dead letter reads the same whichever runtime wrote it.
const (
	HeaderDeadLetterReason = "Toolsentry-Dlq-Reason"
	HeaderDeadLetterError  = "Toolsentry-Dlq-Error"
	HeaderOriginalSubject  = "Toolsentry-Original-Subject"
	HeaderOriginalStream   = "Toolsentry-Original-Stream"
	HeaderOriginalSequence = "Toolsentry-Original-Sequence"
	HeaderOriginalTime     = "Toolsentry-Original-Time"
	HeaderOriginalMsgID    = "Toolsentry-Original-Msg-Id"
	// HeaderNumDelivered carries Message.Attempt: how often the message
	// was handed to the handler.
	HeaderNumDelivered = "Toolsentry-Num-Delivered"
)

// maxErrorHeader bounds the error text copied into a dead letter.
const maxErrorHeader = 1024

// DefaultDeadLetterPrefix is the subject prefix of dead letters when
// neither Options.DeadLetter nor Options.DeadLetterSubject is set:
// <prefix>.<reason>, as the default deployment's TOOLSENTRY_DLQ stream reads.
const DefaultDeadLetterPrefix = "toolsentry.dlq"

// DeadLetterMsgID is the Nats-Msg-Id of the dead letter of the message at
// seq in stream: writing it twice (after a restart) stores it once.
func DeadLetterMsgID(stream string, seq uint64) string {
	return "dlq-" + stream + "-" + strconv.FormatUint(seq, 10)
}

// safeReason returns reason if it is a valid subject token of [a-z0-9_],
// else ReasonPermanent.
func safeReason(reason string) string {
	if reason == "" || strings.IndexFunc(reason, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_'
	}) >= 0 {
		return ReasonPermanent
	}
	return reason
}

// deadLetterMsg builds the dead letter of m.
func (e *Engine) deadLetterMsg(m *Message, reason string, cause error) *nats.Msg {
	dm := &nats.Msg{Subject: e.dlqSubject(m, reason), Data: m.Data, Header: make(nats.Header, len(m.Header)+8)}
	for k, v := range m.Header {
		if strings.HasPrefix(k, "Nats-") {
			continue // control headers (msg id, expectations, TTL) would act on the DLQ stream
		}
		dm.Header[k] = slices.Clone(v)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		dm.Header.Set(HeaderOriginalMsgID, id)
	}
	dm.Header.Set(HeaderDeadLetterReason, headerSafe(reason))
	dm.Header.Set(HeaderDeadLetterError, headerSafe(cause.Error()))
	dm.Header.Set(HeaderOriginalSubject, m.Subject)
	dm.Header.Set(HeaderOriginalStream, m.Stream)
	dm.Header.Set(HeaderOriginalSequence, strconv.FormatUint(m.StreamSeq, 10))
	dm.Header.Set(HeaderOriginalTime, m.Timestamp.UTC().Format(time.RFC3339Nano))
	dm.Header.Set(HeaderNumDelivered, strconv.Itoa(m.Attempt))
	return dm
}

func (e *Engine) dlqSubject(m *Message, reason string) string {
	switch {
	case e.opts.DeadLetter != nil:
		return e.opts.DeadLetter(m, reason)
	case e.opts.DeadLetterSubject != "":
		return e.opts.DeadLetterSubject
	}
	return DefaultDeadLetterPrefix + "." + safeReason(reason)
}

// deadLetter publishes m's dead letter and waits for the PubAck. A failed
// publish is retried with backoff (only m's key waits) until it succeeds or
// ctx ends: a dead letter is never dropped. It reports whether it was stored.
func (e *Engine) deadLetter(ctx context.Context, m *Message, reason string, cause error) bool {
	dm := e.deadLetterMsg(m, reason, cause)
	id := DeadLetterMsgID(m.Stream, m.StreamSeq)
	delay := e.opts.BackoffInitial
	for {
		pctx, cancel := context.WithTimeout(ctx, e.opts.DeadLetterTimeout)
		_, err := e.js.PublishMsg(pctx, dm, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			e.log.Warn().Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Str("reason", reason).
				Int("attempt", m.Attempt).Err(cause).Msg("dead-lettered")
			e.deadLetters.Add(1)
			if e.opts.OnDeadLetter != nil {
				e.opts.OnDeadLetter(m, reason)
			}
			return true
		}
		e.log.Error().Err(err).Str("subject", m.Subject).Uint64("seq", m.StreamSeq).Str("reason", reason).
			Dur("retry_in", delay).Msg("dead-letter publish failed; retrying")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		delay = min(2*delay, e.opts.BackoffMax)
	}
}

// headerSafe makes s a single-line header value of at most maxErrorHeader
// bytes, cut between characters, with control characters and invalid
// UTF-8 as spaces.
func headerSafe(s string) string {
	if len(s) > maxErrorHeader {
		cut := maxErrorHeader
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // not inside a character
		}
		s = s[:cut]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' ' // CR and LF would end the header; the rest is unreadable
		}
		return r
	}, s)
}
