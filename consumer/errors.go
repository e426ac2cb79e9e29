package consumer

import (
	"errors"
	"fmt"
)

// ErrPermanent marks a handler error as bad input: retrying cannot help, so
// the engine dead-letters the message instead of redelivering it. Wrap it
// (fmt.Errorf("decoding invocation: %w", consumer.ErrPermanent)) or return a
// *PermanentError carrying a reason code.
var ErrPermanent = errors.New("permanent failure")

// ErrMaxDeliver is the cause recorded on a message that arrives after it was
// already delivered MaxDeliver times: the earlier deliveries ended without a
// decision (a crash, or a dead-letter publish that failed), so the engine
// dead-letters it without calling the handler again.
var ErrMaxDeliver = errors.New("delivered more than MaxDeliver times")

// ErrHandlerPanic is the cause recorded on a message whose handler panicked.
// The engine dead-letters such a message and goes on with the next ones.
var ErrHandlerPanic = errors.New("handler panicked")

// ErrClosed is returned by Engine.Run when the engine was closed before it
// started.
var ErrClosed = errors.New("engine closed")

// ErrAlreadyRunning is returned by Engine.Run when Run was called before on
// the same engine; an engine runs once.
var ErrAlreadyRunning = errors.New("engine already running")

// ErrShutdownTimeout is returned by Engine.Run (and Close) when in-flight
// handlers did not finish within Options.ShutdownTimeout and were cancelled;
// their messages were given back to the server for redelivery.
var ErrShutdownTimeout = errors.New("in-flight handlers cancelled at shutdown timeout")

// ErrInvalidConfig is returned (wrapped, with the offending field named) by
// Config.Validate, Options.Validate, Provision, New, NewView and
// StartServer when a setting cannot work.
var ErrInvalidConfig = errors.New("invalid configuration")

// ErrNoAnswer is returned (wrapped, with the request's error) by Provision
// when one of its JetStream API requests got no answer within
// provisionRequestTimeout, as happens to all but one of several workers
// creating the same stream, bucket or consumer on a cluster at the same
// time. Provisioning again succeeds: the resource exists by then.
// StartService tries again by itself until ProvisionTimeout.
var ErrNoAnswer = errors.New("no answer from the JetStream API")

// ErrPartitionsMismatch is returned by Group.Run (and so Service.Run) when
// another live worker announces a different Config.Partitions: the two
// would read different sets of partition consumers and both handle every
// key. Every worker of a deployment must use the same partition count.
var ErrPartitionsMismatch = errors.New("workers disagree on the partition count")

// ErrConflict is returned (wrapped together with the jetstream error, so
// errors.Is also matches jetstream.ErrKeyExists or
// jetstream.ErrKeyRevisionMismatch) by View.CompareAndSet when the key
// changed since the revision the caller read.
var ErrConflict = errors.New("revision conflict")

// ErrTooManyConflicts is returned by View.Update when every one of
// ViewOptions.MaxAttempts compare-and-set attempts lost against a concurrent
// writer.
var ErrTooManyConflicts = errors.New("too many revision conflicts")

// ErrNoChange may be returned by a MergeFunc to say that the current value is
// already right: View.Update then writes nothing and returns the current
// entry without an error.
var ErrNoChange = errors.New("no change")

// ErrViewClosed is returned by View.WaitReady when the view was closed, or its
// watch ended, before the initial values were loaded.
var ErrViewClosed = errors.New("view closed")

// PermanentError is a bad-input failure with a reason code, which the engine
// writes into the dead letter's reason header and the Term advisory. It
// matches ErrPermanent with errors.Is.
type PermanentError struct {
	// Reason is a short machine-readable code (for example
	// "decode_invalid_json"); the events package owns the vocabulary.
	Reason string
	// Err is the underlying cause; may be nil.
	Err error
}

// Permanent wraps err as a permanent failure with a reason code.
func Permanent(reason string, err error) error {
	return &PermanentError{Reason: reason, Err: err}
}

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

// Reason codes the engine itself writes; handlers choose their own codes.
const (
	// ReasonPermanent is used for an error that wraps ErrPermanent without
	// a *PermanentError carrying a reason.
	ReasonPermanent = "permanent"
	// ReasonPanic is used when the handler panicked.
	ReasonPanic = "handler_panic"
	// ReasonMaxDeliver is used when a transient failure persisted through
	// MaxDeliver deliveries.
	ReasonMaxDeliver = "max_deliver"
)

// reasonOf returns the dead-letter reason code of a permanent error.
func reasonOf(err error) string {
	var pe *PermanentError
	if errors.As(err, &pe) && pe.Reason != "" {
		return pe.Reason
	}
	return ReasonPermanent
}
