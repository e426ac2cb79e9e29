package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Message is one stream message as a BatchHandler sees it. Handlers must
// treat Header and Data as read-only: the engine dead-letters the very same
// bytes if the handler fails permanently.
type Message struct {
	// Subject is the subject the message is stored under.
	Subject string
	// Header holds the message headers as published (nil if none).
	Header nats.Header
	// Data is the message body.
	Data []byte
	// Stream is the name of the stream that stored the message.
	Stream string
	// StreamSeq is the message's sequence in Stream. Per key, handlers see
	// strictly increasing StreamSeq, except that a restarted engine (or a
	// new lease holder) reads again what was not committed: a handler that
	// stores the last StreamSeq it applied per key skips those.
	StreamSeq uint64
	// Timestamp is when the stream stored the message.
	Timestamp time.Time
	// Key is the ordering key the engine computed with Options.Key.
	Key string
	// Attempt is 1 the first time the message is handed to the handler and
	// n after n-1 transient failures of this message. There are no
	// server redeliveries: the engine retries by itself.
	Attempt int

	applied bool   // set by the dispatcher once the message is applied or dead-lettered
	consSeq uint64 // its sequence in the ordered consumer that delivered it
}

// BatchHandler applies messages for an Engine.
//
// HandleBatch receives consecutive messages of one ordering key, in stream
// order, and returns one result per message (results[i] for msgs[i]), or nil
// when every message was applied:
//   - nil: applied (its outputs are durably stored);
//   - an error matching ErrPermanent (a *PermanentError carries a reason
//     code): bad input, the message is dead-lettered and counts as applied;
//   - any other error: transient; that message and every later one of the
//     call are handed again after a backoff (their results are ignored).
//
// A handler that stops at the first transient error returns that error for
// it and anything (for example the same error) for the rest.
//
// HandleBatch is called concurrently for different keys and never
// concurrently for one key. It must honour ctx, cancelled at
// Options.HandlerTimeout, at the shutdown deadline and when the lane's
// lease is lost. A panic is contained: the call's messages are handed again
// one at a time, and the one that panics alone is dead-lettered
// (ReasonPanic).
//
// Handlers must be idempotent per key: after a restart the messages after
// the last committed checkpoint are read and handed again, so the domain
// remembers the last applied StreamSeq per key and skips what it has seen.
type BatchHandler interface {
	HandleBatch(ctx context.Context, key string, msgs []*Message) []error
}

// BatchFunc adapts a function to the BatchHandler interface.
type BatchFunc func(ctx context.Context, key string, msgs []*Message) []error

// HandleBatch calls f(ctx, key, msgs).
func (f BatchFunc) HandleBatch(ctx context.Context, key string, msgs []*Message) []error {
	return f(ctx, key, msgs)
}

// Checkpointer stores a lane's progress: the lowest stream sequence not yet
// fully applied. The lane's Lease satisfies it.
type Checkpointer interface {
	// Checkpoint is the sequence to start reading at (0 or 1: the start
	// of the stream).
	Checkpoint() uint64
	// Commit stores checkpoint; committing the same value again renews
	// the ownership behind it.
	Commit(ctx context.Context, checkpoint uint64) error
	// Lost is closed when the lane's ownership was lost: the engine stops
	// at once, with no more handler calls and no commit.
	Lost() <-chan struct{}
}

// LagRecorder is a Checkpointer that also stores the lane's lag with its
// commits (the Lease does): the engine measures it about once per
// CommitInterval, Pending plus held.
type LagRecorder interface {
	RecordLag(lag uint64)
}

// LastToken returns the last token of the message's subject: the default
// ordering key (telemetry subjects end with the tool or composition id).
func LastToken(m *Message) string {
	return m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
}

// ErrPermanent marks a handler result as bad input: retrying cannot help,
// so the message is dead-lettered. Wrap it or return a *PermanentError.
var ErrPermanent = errors.New("permanent failure")

// ErrHandlerPanic is the cause recorded on a message whose handler panicked
// when handed that message alone.
var ErrHandlerPanic = errors.New("handler panicked")

// ErrResultCount is the cause recorded when a handler returned a number of
// results other than zero or one per message; it is treated as a panic.
var ErrResultCount = errors.New("handler returned the wrong number of results")

// ErrLost is returned by Engine.Run when the lane's Checkpointer reported
// the ownership lost.
var ErrLost = errors.New("lane ownership lost")

// ErrClosed is returned by Engine.Run when the engine was closed before it
// started.
var ErrClosed = errors.New("engine closed")

// ErrNotRunning is returned by Pending before Run created the consumer.
var ErrNotRunning = errors.New("engine not running")

// ErrAlreadyRunning is returned by Engine.Run when it was called before.
var ErrAlreadyRunning = errors.New("engine already running")

// ErrShutdownTimeout is returned by Engine.Run (and Close) when in-flight
// handlers did not finish within Options.ShutdownTimeout and were
// cancelled; their messages were not committed and will be read again.
var ErrShutdownTimeout = errors.New("in-flight handlers cancelled at shutdown timeout")

// ErrInvalidOptions is returned (wrapped, naming the field) by New and
// Options.Validate for a setting that cannot work.
var ErrInvalidOptions = errors.New("invalid engine options")

// PermanentError is a bad-input failure with a reason code, written into
// the dead letter's reason header. It matches ErrPermanent with errors.Is.
type PermanentError struct {
	// Reason is a short code of [a-z0-9_] (the events package owns the
	// vocabulary).
	Reason string
	// Err is the underlying cause; may be nil.
	Err error
}

// Permanent wraps err as a permanent failure with a reason code.
func Permanent(reason string, err error) error { return &PermanentError{Reason: reason, Err: err} }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s: %s", ErrPermanent, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", ErrPermanent, e.Reason, e.Err)
}

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Reason codes the engine writes itself (the same strings as the events
// package's vocabulary).
const (
	ReasonPermanent   = "permanent"     // an error wrapping ErrPermanent without a reason
	ReasonPanic       = "handler_panic" // the handler panicked on the message alone
	ReasonMaxAttempts = "max_deliver"   // a transient failure persisted through MaxAttempts attempts
)

// reasonOf returns the dead-letter reason code of a permanent error.
func reasonOf(err error) string {
	var pe *PermanentError
	if errors.As(err, &pe) && pe.Reason != "" {
		return pe.Reason
	}
	return ReasonPermanent
}
