package consumer

import (
	"errors"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// The runtime's errors, under the names the worker's callers use.
var (
	// ErrPermanent marks a handler error as bad input: the message is
	// dead-lettered instead of retried (engine.ErrPermanent).
	ErrPermanent = engine.ErrPermanent
	// ErrClosed is returned by Run when the service (or a lane) was closed
	// before it started.
	ErrClosed = engine.ErrClosed
	// ErrAlreadyRunning is returned by a second Run.
	ErrAlreadyRunning = engine.ErrAlreadyRunning
)

// PermanentError is a bad-input failure with a reason code, which the
// engine writes into the dead letter's reason header.
type PermanentError = engine.PermanentError

// Permanent wraps err as a permanent failure with a reason code.
func Permanent(reason string, err error) error { return engine.Permanent(reason, err) }

// ReasonPermanent is the reason of an error that wraps ErrPermanent
// without a *PermanentError carrying one.
const ReasonPermanent = engine.ReasonPermanent

func isPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// ErrInvalidConfig is returned (wrapped, with the offending field named) by
// Config.Validate, Options.Validate, Provision, New and
// StartServer when a setting cannot work.
var ErrInvalidConfig = errors.New("invalid configuration")

// ErrNoAnswer is returned (wrapped) by Provision when one of its JetStream
// API requests got no answer in time (engine.ErrNoAnswer); StartService
// tries again by itself until ProvisionTimeout.
var ErrNoAnswer = engine.ErrNoAnswer

// ErrPartitionsMismatch is returned by Lanes.Run (and so Service.Run) when
// another live worker announces a different Config.Partitions: the two
// would read different lanes and both handle some keys. Every worker of a
// deployment must use the same partition count (engine.ErrMembersDisagree).
var ErrPartitionsMismatch = engine.ErrMembersDisagree

// ErrConnectionClosed is returned by Lanes.Run (and so Service.Run) when
// the service's NATS connection was closed for good
// (engine.ErrConnectionClosed).
var ErrConnectionClosed = engine.ErrConnectionClosed

// The state views' errors (engine.View).
var (
	// ErrConflict: a compare-and-set lost to another writer.
	ErrConflict = engine.ErrConflict
	// ErrTooManyConflicts: every attempt of an Update lost.
	ErrTooManyConflicts = engine.ErrTooManyConflicts
	// ErrNoChange: a MergeFunc's "the current value is right".
	ErrNoChange = engine.ErrNoChange
	// ErrViewClosed: the view no longer follows its bucket.
	ErrViewClosed = engine.ErrViewClosed
)
