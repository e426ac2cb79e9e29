package consumer

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// ErrTruncatedHistory is returned by Replay when the telemetry stream no
// longer starts at sequence 1 (its oldest inputs aged out or were purged)
// and ReplayOptions.AllowTruncated is false: state rebuilt from what is
// left would differ from the state the live workers had, so differences
// could stem from the missing history rather than from tampering.
var ErrTruncatedHistory = errors.New("history truncated")

// DefaultReplayMaxDifferences is how many differences a ReplayReport lists
// by default; the counts are always complete.
const DefaultReplayMaxDifferences = 1000

// ReplayOptions configure Replay. Zero fields take defaults.
type ReplayOptions struct {
	// Prefix names the streams (default DefaultPrefix).
	Prefix string
	// Durable is the durable consumer of the workers before lanes (default
	// "<prefix>-workers"), read only when the deployment has no leases.
	// Inputs at or after a telemetry lane's checkpoint have not been
	// handled yet: they are replayed into state but not compared.
	Durable string
	// Core is the decision step's configuration as the live workers ran it
	// (Names is set from Prefix).
	Core core.Options

	// The window compared and reported: inputs with stream sequence at
	// least FromSeq, stored at or after Since and at or before Until (zero
	// values: no bound). State is always rebuilt from the first input of
	// the stream, whatever the window, so that a window's verdicts are
	// those of the full replay on that window.
	FromSeq      uint64
	Since, Until time.Time
	// Tools and Compositions restrict the comparison to the verdicts about
	// these keys: schema verdicts of the tools, composition verdicts of the
	// compositions. Both empty: every verdict.
	Tools, Compositions []string

	// AllowTruncated replays a truncated history instead of refusing with
	// ErrTruncatedHistory; the report says it is truncated.
	AllowTruncated bool

	// WhatIf replays a second time, in the same pass, under a changed
	// guard configuration, and reports where its verdicts differ from the
	// replay under the recorded configuration as policy changes.
	WhatIf WhatIf

	// MaxDifferences bounds the differences listed in the report (default
	// DefaultReplayMaxDifferences; negative lists none). Counts are exact.
	MaxDifferences int
	// IdleTimeout fails the replay when a stream delivers nothing for this
	// long while messages are still expected (default 30s).
	IdleTimeout time.Duration
	// Progress, if set, is called after each input is applied with the
	// input's sequence and the last sequence of the replay.
	Progress func(seq, last uint64)
}

// WhatIf is a changed guard configuration for Replay.
type WhatIf struct {
	// Workflows replace, by composition id, the workflow that the history
	// declares for the composition: every declaration of the composition
	// is applied with this workflow object (JSON, as the data of a
	// workflow.declared event; its composition_id must be the key) instead,
	// so its requirement or policy apply from its first declaration on.
	Workflows map[string][]byte
}

func (w WhatIf) enabled() bool { return len(w.Workflows) > 0 }

// DifferenceKind says how a recorded verdict and the replay disagree.
type DifferenceKind string

// The kinds of differences. Every kind but DiffPolicyChanged and DiffWhatIf
// means the record disagrees with the replay under the recorded
// configuration: tampering, lost verdicts, or a fault of the live path.
const (
	// DiffMismatch: recorded and re-derived verdict of the same input and
	// key (guard, tool or composition, agent) differ, by the same guard
	// version. A second, different record of a verdict that also has a
	// matching record is a mismatch too.
	DiffMismatch DifferenceKind = "mismatch"
	// DiffMissing: the replay derives a verdict the verdict stream does not
	// hold (deleted, or never stored).
	DiffMissing DifferenceKind = "missing"
	// DiffExtra: the verdict stream holds a verdict the replay does not
	// derive (forged, or its input was removed from the telemetry stream).
	DiffExtra DifferenceKind = "extra"
	// DiffPolicyChanged: a mismatch, missing or extra verdict whose record
	// was made by another guard version (guard_version) than this one: the
	// policy changed, which explains the difference without tampering.
	DiffPolicyChanged DifferenceKind = "policy_changed"
	// DiffWhatIf: the replay under WhatIf derives another verdict than the
	// replay under the recorded configuration (Change says how).
	DiffWhatIf DifferenceKind = "what_if"
	// DiffRejectedNotDeadLettered: the input is bad (it does not decode,
	// or the guards refuse it) but the dead-letter stream does not hold it.
	DiffRejectedNotDeadLettered DifferenceKind = "rejected_not_dead_lettered"
	// DiffDeadLetteredButValid: the dead-letter stream holds the input, but
	// it decodes and applies in the replay (a transient failure dead-
	// lettered live after MaxDeliver, say): live state diverged here.
	DiffDeadLetteredButValid DifferenceKind = "dead_lettered_but_valid"
	// DiffInputDeleted: a message was deleted from the telemetry stream
	// inside the compared window: the audit log has a hole.
	DiffInputDeleted DifferenceKind = "input_deleted"
	// DiffUndecodableVerdict: a message on the verdict stream is not a
	// valid verdict. Reported whatever the window.
	DiffUndecodableVerdict DifferenceKind = "undecodable_verdict"
)

// ReplayDifference is one difference found by Replay. Payloads are the
// verdicts' data (paths, types and digests; never an agent's values).
type ReplayDifference struct {
	Kind DifferenceKind `json:"kind"`
	// Change, for DiffWhatIf: "changed", "added" (only under the what-if)
	// or "removed" (only under the recorded configuration).
	Change        string `json:"change,omitempty"`
	InputSequence uint64 `json:"input_sequence,omitempty"`
	InputEventID  string `json:"input_event_id,omitempty"`
	Guard         string `json:"guard,omitempty"` // schema or composition
	Key           string `json:"key,omitempty"`   // tool or composition id
	AgentID       string `json:"agent_id,omitempty"`
	// VerdictSequence is the recorded verdict's sequence in the verdict
	// stream (0 when there is none).
	VerdictSequence uint64 `json:"verdict_sequence,omitempty"`
	Reason          string `json:"reason"`
	// Recorded is the data of the verdict as stored; Rederived as the
	// replay derives it under the recorded configuration; WhatIf under the
	// what-if configuration.
	Recorded  json.RawMessage `json:"recorded,omitempty"`
	Rederived json.RawMessage `json:"rederived,omitempty"`
	WhatIf    json.RawMessage `json:"what_if,omitempty"`
}

// ReplayWindow is the range of inputs compared.
type ReplayWindow struct {
	FromSeq uint64     `json:"from_seq"` // first input sequence compared
	ToSeq   uint64     `json:"to_seq"`   // last input sequence compared
	Since   *time.Time `json:"since,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
}

// ReplayReport is what Replay found.
type ReplayReport struct {
	Stream       string `json:"stream"`
	GuardVersion string `json:"guard_version"`
	// FirstSeq and LastSeq are the telemetry stream's sequences when the
	// replay started; the replay applies every input between them.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Truncated: the telemetry stream starts after sequence 1; state was
	// rebuilt from what is left and differences may stem from the missing
	// history.
	Truncated bool `json:"truncated"`
	// VerdictsTruncated: the verdict stream lost its oldest verdicts (they
	// aged out, or were removed). Only inputs stored after its first
	// verdict (VerdictsFirstTime; when none is left, the time of its last
	// one) are compared, since only their verdicts are all still there:
	// the window starts there at the earliest.
	VerdictsTruncated bool       `json:"verdicts_truncated"`
	VerdictsFirstTime *time.Time `json:"verdicts_first_time,omitempty"`
	// HandledThrough is where the live workers stand: every input up to it
	// has been applied (below every busy lane's checkpoint). Inputs above
	// it are not compared.
	HandledThrough uint64       `json:"handled_through"`
	Window         ReplayWindow `json:"window"`

	InputsReplayed  int `json:"inputs_replayed"`  // applied to rebuild state, from the first
	InputsCompared  int `json:"inputs_compared"`  // in the window and handled live
	InputsUnhandled int `json:"inputs_unhandled"` // in the window, not yet handled live
	InputsRejected  int `json:"inputs_rejected"`  // compared inputs that are bad input
	// DeadLettersConfirmed counts rejected inputs found in the dead-letter
	// stream; DeadLettersChecked is false when the dead-letter stream does
	// not exist or lost its oldest messages.
	DeadLettersConfirmed int  `json:"dead_letters_confirmed"`
	DeadLettersChecked   bool `json:"dead_letters_checked"`

	VerdictsRecorded  int `json:"verdicts_recorded"`  // in the window and the filter
	VerdictsRederived int `json:"verdicts_rederived"` // in the window and the filter
	Matched           int `json:"matched"`
	Mismatched        int `json:"mismatched"`
	Missing           int `json:"missing"`
	Extra             int `json:"extra"`
	PolicyChanged     int `json:"policy_changed"`
	// Duplicates counts verdicts stored twice, identically (a redelivery
	// after the duplicate window): not a difference.
	Duplicates int `json:"duplicates"`
	// Other counts the differences of the other kinds (dead letters,
	// deleted inputs, undecodable verdicts).
	Other int `json:"other_differences"`

	// WhatIf summarises the replay under ReplayOptions.WhatIf (nil
	// without one).
	WhatIf *WhatIfReport `json:"what_if,omitempty"`

	Differences        []ReplayDifference `json:"differences"`
	DifferencesOmitted int                `json:"differences_omitted"`
}

// WhatIfReport counts the verdicts the what-if configuration changes.
type WhatIfReport struct {
	Workflows []string `json:"workflows"`
	// Undeclared lists the replaced compositions the history never
	// declares: their replacement changed nothing.
	Undeclared []string `json:"undeclared,omitempty"`
	Changed    int      `json:"changed"`
	Added      int      `json:"added"`
	Removed    int      `json:"removed"`
}

// Tampered is the number of differences that the recorded configuration
// does not explain: mismatched, missing and extra verdicts, and the other
// kinds.
func (r *ReplayReport) Tampered() int { return r.Mismatched + r.Missing + r.Extra + r.Other }

// PolicyChanges is the number of differences explained by a change of
// policy: another guard version, or the what-if configuration.
func (r *ReplayReport) PolicyChanges() int {
	n := r.PolicyChanged
	if r.WhatIf != nil {
		n += r.WhatIf.Changed + r.WhatIf.Added + r.WhatIf.Removed
	}
	return n
}

// Replay re-derives every verdict from the telemetry stream and compares it
// with the verdict stream: the audit of the live path.
//
// It reads the telemetry stream with an ordered consumer from its first
// sequence (state is always rebuilt from the beginning, in a core.MemState:
// no snapshot is trusted), applies each input with the same core as the
// live workers, in stream order, and compares the verdicts of the inputs in
// the window with the recorded ones, matched by input (event id and stream
// sequence) and key (guard, tool or composition, agent), as canonical
// CloudEvents (extension attributes, such as signatures, set aside). It
// publishes nothing and writes no state: it only reads streams and the
// workers' consumer info.
//
// The recorded verdicts are loaded first (an index of their digests, not
// their bodies), then the telemetry is applied; a recorded verdict is read
// again only to show a difference.
func Replay(ctx context.Context, js jetstream.JetStream, opts ReplayOptions) (*ReplayReport, error) {
	r, err := newReplayer(js, opts)
	if err != nil {
		return nil, err
	}
	return r.run(ctx)
}

// verdictKey identifies a verdict: its input and what it is about.
type verdictKey struct {
	inputSeq uint64
	eventID  string
	kind     events.Kind
	key      string
	agent    string
}

// recordedRef is what the index keeps of a recorded verdict.
type recordedRef struct {
	seq          uint64 // in the verdict stream
	sum          [32]byte
	guardVersion string
}

type replayer struct {
	js    jetstream.JetStream
	opts  ReplayOptions
	names events.Names
	tools map[string]bool
	comps map[string]bool
	// whatIf workflow events by composition (canonical raw)
	whatIf   map[string]json.RawMessage
	declared map[string]bool

	rep      *ReplayReport
	verdicts jetstream.Stream
	lo, hi   uint64 // compared input sequences
	hiWindow uint64 // last input sequence of the window, handled or not
	index    map[verdictKey][]recordedRef
	oldGuard map[uint64]bool     // inputs with a recorded verdict of another guard version
	lanes    laneVersions        // per guard and key, the inputs with recorded verdicts and their guard versions
	dlq      map[uint64]string   // telemetry sequence → dead-letter reason
	deleted  map[uint64]bool     // deleted telemetry sequences
	versions map[string]string   // interned guard versions
	pending  []pendingDifference // listed differences whose payloads are read at the end
}

// pendingDifference is a listed difference whose recorded payload is read
// from the verdict stream when the report is finished.
type pendingDifference struct {
	i   int // in rep.Differences
	seq uint64
}

func newReplayer(js jetstream.JetStream, opts ReplayOptions) (*replayer, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	names, err := events.NewNames(opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if opts.Durable == "" {
		opts.Durable = opts.Prefix + "-workers"
	}
	if opts.MaxDifferences == 0 {
		opts.MaxDifferences = DefaultReplayMaxDifferences
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 30 * time.Second
	}
	if !opts.Since.IsZero() && !opts.Until.IsZero() && opts.Until.Before(opts.Since) {
		return nil, fmt.Errorf("%w: replay window ends (%s) before it starts (%s)", ErrInvalidConfig, opts.Until.Format(time.RFC3339), opts.Since.Format(time.RFC3339))
	}
	opts.Core.Names = names
	r := &replayer{
		js: js, opts: opts, names: names,
		tools: setOf(opts.Tools), comps: setOf(opts.Compositions),
		whatIf: map[string]json.RawMessage{}, declared: map[string]bool{},
		index: map[verdictKey][]recordedRef{}, oldGuard: map[uint64]bool{}, lanes: laneVersions{byKey: map[laneKey][]laneRef{}},
		dlq: map[uint64]string{}, deleted: map[uint64]bool{}, versions: map[string]string{},
	}
	for id, raw := range opts.WhatIf.Workflows {
		canonical, err := whatIfWorkflow(names, id, raw)
		if err != nil {
			return nil, err
		}
		r.whatIf[id] = canonical
	}
	return r, nil
}

// whatIfWorkflow checks a replacement workflow and returns it as the
// decoder would hand it to the core.
func whatIfWorkflow(names events.Names, id string, raw []byte) (json.RawMessage, error) {
	msg, err := names.NewWorkflow(events.Meta{ID: "what-if", Source: "toolsentry/replay"}, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: what-if workflow %q: %w", ErrInvalidConfig, id, err)
	}
	ev, err := names.Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: what-if workflow %q: %w", ErrInvalidConfig, id, err)
	}
	if ev.Workflow.CompositionID != id {
		return nil, fmt.Errorf("%w: what-if workflow for %q declares composition_id %q", ErrInvalidConfig, id, ev.Workflow.CompositionID)
	}
	w, err := workflow.DecodeWorkflow(ev.Workflow.Raw)
	if err == nil {
		err = w.ValidateShape()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: what-if workflow %q: %w", ErrInvalidConfig, id, err)
	}
	return ev.Workflow.Raw, nil
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// selected reports whether verdicts about key of kind are compared.
func (r *replayer) selected(kind events.Kind, key string) bool {
	if len(r.tools) == 0 && len(r.comps) == 0 {
		return true
	}
	if kind == events.KindSchemaVerdict {
		return r.tools[key]
	}
	return r.comps[key]
}

func (r *replayer) run(ctx context.Context) (*ReplayReport, error) {
	rep := &ReplayReport{Stream: r.names.TelemetryStream(), GuardVersion: guards.Version, Differences: []ReplayDifference{}}
	r.rep = rep
	tele, err := r.js.Stream(ctx, r.names.TelemetryStream())
	if err != nil {
		return nil, fmt.Errorf("telemetry stream %s: %w", r.names.TelemetryStream(), err)
	}
	info, err := tele.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return nil, fmt.Errorf("telemetry stream %s: %w", r.names.TelemetryStream(), err)
	}
	st := info.State
	rep.FirstSeq, rep.LastSeq = st.FirstSeq, st.LastSeq
	rep.Truncated = st.FirstSeq > 1
	for _, s := range st.Deleted {
		r.deleted[s] = true
	}
	if r.verdicts, err = r.js.Stream(ctx, r.names.VerdictsStream()); err != nil {
		return nil, fmt.Errorf("verdict stream %s: %w", r.names.VerdictsStream(), err)
	}
	vinfo, err := r.verdicts.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("verdict stream %s: %w", r.names.VerdictsStream(), err)
	}
	if vs := vinfo.State; vs.FirstSeq > 1 {
		rep.VerdictsTruncated = true
		kept := vs.FirstTime.UTC()
		if vs.Msgs == 0 {
			kept = vs.LastTime.UTC() // every verdict is gone, the last one at LastTime
		}
		rep.VerdictsFirstTime = &kept
	}
	if rep.Truncated && !r.opts.AllowTruncated {
		return rep, fmt.Errorf("%w: %s starts at sequence %d: state rebuilt from what is left may differ from the live state", ErrTruncatedHistory,
			r.names.TelemetryStream(), st.FirstSeq)
	}

	// Handled inputs first: their verdicts are in the verdict stream
	// before they are acknowledged, so the verdicts read next cover them.
	rep.HandledThrough, err = r.handledThrough(ctx, st.LastSeq)
	if err != nil {
		return nil, err
	}
	if err := r.resolveWindow(ctx, info); err != nil {
		return nil, err
	}
	log := zerolog.Ctx(ctx)
	start := time.Now()
	if err := r.loadRecorded(ctx, vinfo.State); err != nil {
		return nil, err
	}
	log.Debug().Int("verdicts", rep.VerdictsRecorded).Dur("took", time.Since(start)).Msg("replay: recorded verdicts indexed")
	start = time.Now()
	if err := r.loadDeadLetters(ctx); err != nil {
		return nil, err
	}
	log.Debug().Int("dead_letters", len(r.dlq)).Dur("took", time.Since(start)).Msg("replay: dead letters read")
	start = time.Now()
	if err := r.apply(ctx, st); err != nil {
		return nil, err
	}
	log.Debug().Int("inputs", rep.InputsReplayed).Dur("took", time.Since(start)).Msg("replay: telemetry applied")
	r.finish(ctx)
	return rep, nil
}

// handledThrough is the sequence up to which the live workers handled
// every input: below the checkpoint of every telemetry lane that still has
// inputs to apply (a dead-lettered input counts as applied), the stream's
// last sequence when none has. A deployment from before lanes (no leases
// bucket) answers with its durable consumer's acknowledgement floor, or
// the last sequence when there is none.
func (r *replayer) handledThrough(ctx context.Context, last uint64) (uint64, error) {
	cfg := Config{Prefix: r.opts.Prefix, Durable: r.opts.Durable}
	if _, err := r.js.KeyValue(ctx, cfg.LeasesBucket()); errors.Is(err, jetstream.ErrBucketNotFound) {
		return r.ackFloor(ctx, last)
	}
	st, err := ReadStatus(ctx, r.js, cfg)
	if err != nil {
		return 0, fmt.Errorf("reading the lanes: %w", err)
	}
	through := last
	for _, l := range st.Lanes {
		if l.Lane == DirectivesLane || l.Lag == 0 {
			continue
		}
		through = min(through, max(l.Checkpoint, 1)-1)
	}
	return through, nil
}

// ackFloor is the acknowledgement floor of the durable consumer of the
// workers before lanes, or last when there is none.
func (r *replayer) ackFloor(ctx context.Context, last uint64) (uint64, error) {
	c, err := r.js.Consumer(ctx, r.names.TelemetryStream(), r.opts.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return last, nil
	}
	if err != nil {
		return 0, fmt.Errorf("consumer %s: %w", r.opts.Durable, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer %s: %w", r.opts.Durable, err)
	}
	return min(last, ci.AckFloor.Stream), nil
}

// resolveWindow turns the window's bounds into input sequences.
func (r *replayer) resolveWindow(ctx context.Context, info *jetstream.StreamInfo) error {
	st := info.State
	lo, hi := max(st.FirstSeq, r.opts.FromSeq, 1), st.LastSeq
	from := func(t time.Time) error {
		if st.Msgs == 0 || t.After(st.LastTime) {
			lo = st.LastSeq + 1
			return nil
		}
		seq, err := r.firstStoredAt(ctx, t)
		lo = max(lo, seq)
		return err
	}
	if !r.opts.Since.IsZero() {
		since := r.opts.Since.UTC()
		r.rep.Window.Since = &since
		if err := from(since); err != nil {
			return err
		}
	}
	if t := r.rep.VerdictsFirstTime; t != nil {
		// An input stored after the first remaining verdict had its
		// verdicts stored after it too: none of them aged out.
		if err := from(t.Add(time.Nanosecond)); err != nil {
			return err
		}
	}
	if !r.opts.Until.IsZero() {
		until := r.opts.Until.UTC()
		r.rep.Window.Until = &until
		if st.Msgs > 0 && until.Before(st.LastTime) {
			seq, err := r.firstStoredAt(ctx, until.Add(time.Nanosecond))
			if err != nil {
				return err
			}
			hi = min(hi, seq-1)
		}
	}
	r.lo, r.hiWindow = lo, hi
	r.hi = min(hi, r.rep.HandledThrough)
	r.rep.Window.FromSeq, r.rep.Window.ToSeq = lo, r.hi
	if r.hi < lo {
		r.rep.Window.ToSeq = 0
	}
	return nil
}

// firstStoredAt is the sequence of the first input stored at or after t
// (one that exists: the caller checked the stream's last time).
func (r *replayer) firstStoredAt(ctx context.Context, t time.Time) (uint64, error) {
	c, err := r.js.OrderedConsumer(ctx, r.names.TelemetryStream(), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t, HeadersOnly: true,
	})
	if err != nil {
		return 0, fmt.Errorf("finding the input stored at %s: %w", t.Format(time.RFC3339Nano), err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(r.opts.IdleTimeout))
	if err != nil {
		return 0, fmt.Errorf("finding the input stored at %s: %w", t.Format(time.RFC3339Nano), err)
	}
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return 0, err
		}
		return md.Sequence.Stream, nil
	}
	if err := batch.Error(); err != nil {
		return 0, fmt.Errorf("finding the input stored at %s: %w", t.Format(time.RFC3339Nano), err)
	}
	return 0, fmt.Errorf("finding the input stored at %s: none delivered within %s", t.Format(time.RFC3339Nano), r.opts.IdleTimeout)
}

func (r *replayer) compared(seq uint64) bool { return seq >= r.lo && seq <= r.hi }

// streamItem is one message read by readStream, decoded when asked.
type streamItem struct {
	msg jetstream.Msg
	md  *jetstream.MsgMetadata
	ev  events.Event
	err error // the decoding error
}

// readStream calls fn for every message of stream from its first sequence
// through last, in order, with an ordered consumer; st is the stream's
// state when the replay began. A reader goroutine fetches (and, with
// decode, decodes) ahead of fn, so that the network and decoding overlap
// with fn's work.
func (r *replayer) readStream(ctx context.Context, stream string, st jetstream.StreamState, decode bool, fn func(streamItem) error) error {
	if st.Msgs == 0 {
		return nil
	}
	last := st.LastSeq
	c, err := r.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("reading %s: %w", stream, err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("reading %s: %w", stream, err)
	}
	defer it.Stop()
	stopOnCancel := context.AfterFunc(ctx, it.Stop)
	defer stopOnCancel()

	items := make(chan streamItem, 256)
	done := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(items)
		readErr <- func() error {
			for {
				m, err := it.Next(jetstream.NextMaxWait(r.opts.IdleTimeout))
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return fmt.Errorf("reading %s: nothing delivered for %s before sequence %d: %w", stream, r.opts.IdleTimeout, last, err)
				}
				md, err := m.Metadata()
				if err != nil {
					return fmt.Errorf("reading %s: %w", stream, err)
				}
				if md.Sequence.Stream > last {
					return nil
				}
				item := streamItem{msg: m, md: md}
				if decode {
					item.ev, item.err = r.names.Decode(m.Subject(), m.Headers(), m.Data())
				}
				select {
				case items <- item:
				case <-done:
					return nil
				}
				if md.Sequence.Stream >= last || md.NumPending == 0 {
					return nil
				}
			}
		}()
	}()
	var fnErr error
	for item := range items {
		if fnErr = fn(item); fnErr != nil {
			break
		}
	}
	close(done)
	for range items { // let the reader finish
	}
	if err := <-readErr; fnErr == nil {
		return err
	}
	return fnErr
}

// loadRecorded indexes the recorded verdicts of the compared inputs.
func (r *replayer) loadRecorded(ctx context.Context, st jetstream.StreamState) error {
	return r.readStream(ctx, r.names.VerdictsStream(), st, true, func(item streamItem) error {
		m, md, ev, err := item.msg, item.md, item.ev, item.err
		if err == nil && ev.SchemaVerdict == nil && ev.CompositionVerdict == nil {
			err = fmt.Errorf("a %s event, not a verdict", ev.Kind)
		}
		if err != nil {
			r.difference(ReplayDifference{Kind: DiffUndecodableVerdict, VerdictSequence: md.Sequence.Stream,
				Reason: fmt.Sprintf("message on %s is not a valid verdict: %v", m.Subject(), err)})
			r.rep.Other++
			return nil
		}
		k, gv := keyOf(ev)
		if !r.compared(k.inputSeq) || !r.selected(k.kind, k.key) {
			return nil
		}
		sum, err := r.canonicalSum(ev)
		if err != nil {
			return err
		}
		if gv != guards.Version {
			r.oldGuard[k.inputSeq] = true
		}
		r.lanes.add(k, gv != guards.Version)
		if v, ok := r.versions[gv]; ok {
			gv = v
		} else {
			r.versions[gv] = gv
		}
		r.index[k] = append(r.index[k], recordedRef{seq: md.Sequence.Stream, sum: sum, guardVersion: gv})
		r.rep.VerdictsRecorded++
		return nil
	})
}

// keyOf returns a decoded verdict's key and guard version.
func keyOf(ev events.Event) (verdictKey, string) {
	if v := ev.SchemaVerdict; v != nil {
		return verdictKey{inputSeq: v.InputSequence, eventID: v.InputEventID, kind: events.KindSchemaVerdict, key: v.ToolID, agent: v.AgentID}, v.GuardVersion
	}
	v := ev.CompositionVerdict
	return verdictKey{inputSeq: v.InputSequence, eventID: v.InputEventID, kind: events.KindCompositionVerdict, key: v.CompositionID}, v.GuardVersion
}

// canonicalSum is the digest of a verdict as its subject and canonical
// CloudEvent (Decode sorts the keys of the JSON it keeps raw, so both sides
// are decoded and encoded again), without extension attributes (which carry
// signatures and chains, not the verdict).
func (r *replayer) canonicalSum(ev events.Event) ([32]byte, error) {
	ev.Extensions = nil
	msg, err := r.names.Encode(ev)
	if err != nil {
		return [32]byte{}, fmt.Errorf("re-encoding verdict %s: %w", ev.ID, err)
	}
	return messageSum(msg), nil
}

func messageSum(m events.Message) [32]byte {
	h := sha256.New()
	h.Write([]byte(m.Subject))
	h.Write([]byte{0})
	h.Write(m.Data)
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// loadDeadLetters reads which telemetry sequences were dead-lettered live.
func (r *replayer) loadDeadLetters(ctx context.Context) error {
	s, err := r.js.Stream(ctx, r.names.DeadLetterStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dead-letter stream %s: %w", r.names.DeadLetterStream(), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("dead-letter stream %s: %w", r.names.DeadLetterStream(), err)
	}
	r.rep.DeadLettersChecked = info.State.FirstSeq <= 1
	return r.readStream(ctx, r.names.DeadLetterStream(), info.State, false, func(item streamItem) error {
		dl, err := events.ParseDeadLetter(item.msg.Headers())
		if err != nil || dl.Stream != r.names.TelemetryStream() {
			return nil // not one of ours: nothing to check it against
		}
		r.dlq[dl.Sequence] = string(dl.Reason)
		return nil
	})
}

// lane is one configuration the telemetry is applied under.
type lane struct {
	core  *core.Core
	state *core.MemState
}

func newLane(opts core.Options) *lane {
	return &lane{core: core.New(opts), state: core.NewMemState()}
}

// apply applies in together with its state writes; only the verdicts are
// returned (any other effect, such as telemetry the live worker would
// publish, is the record's and is ignored).
func (l *lane) apply(in core.Input) ([]events.Message, error) {
	eff, err := l.core.Apply(l.state, in)
	if err != nil {
		return nil, err
	}
	if err := l.state.Store(eff.Writes); err != nil {
		return nil, &replayStateError{fmt.Errorf("replay state: %w", err)}
	}
	return eff.Verdicts, nil
}

// apply replays the telemetry stream and compares as it goes.
func (r *replayer) apply(ctx context.Context, st jetstream.StreamState) error {
	base := newLane(r.opts.Core)
	var what *lane
	if r.opts.WhatIf.enabled() {
		what = newLane(r.opts.Core)
		r.rep.WhatIf = &WhatIfReport{Workflows: sortedKeys(r.whatIf)}
	}
	for s := range r.deleted {
		if s >= r.lo && s <= r.hi {
			r.difference(ReplayDifference{Kind: DiffInputDeleted, InputSequence: s,
				Reason: "the input was deleted from the telemetry stream: the audit log has a hole here"})
			r.rep.Other++
		}
	}
	err := r.readStream(ctx, r.names.TelemetryStream(), st, true, func(item streamItem) error {
		m, seq := item.msg, item.md.Sequence.Stream
		r.rep.InputsReplayed++
		compared := r.compared(seq)
		if seq >= r.lo && seq <= r.hiWindow && !compared {
			r.rep.InputsUnhandled++
		}
		if compared {
			r.rep.InputsCompared++
		}
		ev, derr := item.ev, item.err
		in := core.Input{Event: ev, Subject: m.Subject(), Seq: seq}
		var verdicts, whatVerdicts []events.Message
		var aerr, werr error
		if derr == nil {
			verdicts, aerr = base.apply(in)
			if what != nil {
				whatVerdicts, werr = what.apply(r.whatIfInput(in))
			}
		}
		if err := replayInternal(aerr, werr); err != nil {
			return err
		}
		if compared {
			r.checkDeadLetter(seq, ev.ID, m.Subject(), errors.Join(derr, aerr))
			if derr == nil && aerr == nil {
				r.compare(seq, ev.ID, verdicts)
			}
			if what != nil {
				r.compareWhatIf(seq, ev.ID, verdicts, whatVerdicts)
			}
		}
		if r.opts.Progress != nil {
			r.opts.Progress(seq, st.LastSeq)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if what != nil {
		for _, id := range r.rep.WhatIf.Workflows {
			if !r.declared[id] {
				r.rep.WhatIf.Undeclared = append(r.rep.WhatIf.Undeclared, id)
			}
		}
	}
	return nil
}

// replayInternal returns the first error that is the replay's own (its
// memory state refusing a write) rather than bad input.
func replayInternal(errs ...error) error {
	for _, err := range errs {
		if err != nil && !isBadInput(err) {
			return err
		}
	}
	return nil
}

// isBadInput reports whether err is what the live processor dead-letters:
// every core error is, except the replay's own state errors.
func isBadInput(err error) bool {
	var se *replayStateError
	return !errors.As(err, &se)
}

type replayStateError struct{ err error }

func (e *replayStateError) Error() string { return e.err.Error() }

// whatIfInput substitutes a replaced workflow's declaration.
func (r *replayer) whatIfInput(in core.Input) core.Input {
	wf := in.Event.Workflow
	if wf == nil {
		return in
	}
	raw, ok := r.whatIf[wf.CompositionID]
	if !ok {
		return in
	}
	r.declared[wf.CompositionID] = true
	ev := in.Event
	ev.Workflow = &events.Workflow{CompositionID: wf.CompositionID, Raw: raw}
	in.Event = ev
	return in
}

// checkDeadLetter compares the replay's judgement of an input (err: bad
// input) with the dead-letter stream.
func (r *replayer) checkDeadLetter(seq uint64, eventID, subject string, err error) {
	reason, dead := r.dlq[seq]
	switch {
	case err != nil:
		r.rep.InputsRejected++
		if dead {
			r.rep.DeadLettersConfirmed++
		} else if r.rep.DeadLettersChecked {
			// The reason code, not the error's text: a decoding error may
			// quote the input, and an input may hold an agent's values.
			r.difference(ReplayDifference{Kind: DiffRejectedNotDeadLettered, InputSequence: seq, InputEventID: eventID,
				Reason: fmt.Sprintf("input on %s is bad input (%s) but is not in the dead-letter stream", subject, badInputReason(err))})
			r.rep.Other++
		}
	case dead:
		r.difference(ReplayDifference{Kind: DiffDeadLetteredButValid, InputSequence: seq, InputEventID: eventID,
			Reason: fmt.Sprintf("input on %s was dead-lettered live (%s) but applies in the replay: live state diverged from here", subject, reason)})
		r.rep.Other++
	}
}

// badInputReason is the dead-letter reason the live processor gives err.
func badInputReason(err error) string {
	if r, ok := events.ReasonFor(err); ok {
		return string(r)
	}
	if errors.Is(err, core.ErrUnsupported) {
		return string(events.ReasonUnknownType)
	}
	return ReasonPermanent
}

// derivedVerdict is a re-derived verdict with its key.
type derivedVerdict struct {
	key verdictKey
	msg events.Message
	sum [32]byte
}

// group keys an input's selected verdicts.
func (r *replayer) group(seq uint64, msgs []events.Message) (map[verdictKey][]derivedVerdict, []verdictKey) {
	out := map[verdictKey][]derivedVerdict{}
	var order []verdictKey
	for _, m := range msgs {
		// The core's own output always decodes and encodes (Encode
		// checks it); it is summed in the same canonical form as the
		// recorded verdicts.
		ev, err := r.names.Decode(m.Subject, m.Header, m.Data)
		if err != nil || (ev.SchemaVerdict == nil && ev.CompositionVerdict == nil) {
			continue
		}
		k, _ := keyOf(ev)
		k.inputSeq = seq
		if !r.selected(k.kind, k.key) {
			continue
		}
		sum, err := r.canonicalSum(ev)
		if err != nil {
			continue
		}
		if _, seen := out[k]; !seen {
			order = append(order, k)
		}
		out[k] = append(out[k], derivedVerdict{key: k, msg: m, sum: sum})
	}
	return out, order
}

// compare pairs an input's re-derived verdicts with the recorded ones.
func (r *replayer) compare(seq uint64, eventID string, msgs []events.Message) {
	derived, order := r.group(seq, msgs)
	for _, k := range order {
		ds := derived[k]
		r.rep.VerdictsRederived += len(ds)
		recs := r.index[k]
		delete(r.index, k)
		var unmatchedD []derivedVerdict
		for _, d := range ds {
			i := slices.IndexFunc(recs, func(x recordedRef) bool { return x.sum == d.sum })
			if i < 0 {
				unmatchedD = append(unmatchedD, d)
				continue
			}
			recs = slices.Delete(recs, i, i+1)
			r.rep.Matched++
		}
		for i, d := range unmatchedD {
			if i < len(recs) {
				r.recordedDiffers(k, recs[i], d, "")
				continue
			}
			kind := DiffMissing
			reason := "re-derived, but the verdict stream does not hold it (deleted, or never stored)"
			switch {
			case r.oldGuard[seq]:
				kind, reason = DiffPolicyChanged, "re-derived by guard "+guards.Version+" but not recorded: the input's verdicts were recorded by another guard version"
			case r.lanes.oldBefore(k, seq):
				kind, reason = DiffPolicyChanged, "re-derived by guard "+guards.Version+" but not recorded: the verdict of "+k.key+" recorded before it was written by another guard version, which derived none here"
			}
			r.count(kind)
			r.difference(ReplayDifference{Kind: kind, InputSequence: seq, InputEventID: eventID, Guard: k.kind.Token(), Key: k.key, AgentID: k.agent,
				Reason: reason, Rederived: payloadOf(r.names, d.msg)})
		}
		if len(unmatchedD) < len(recs) {
			// More records than re-derived verdicts: each extra one
			// contradicts a re-derived verdict that was also recorded.
			for _, rec := range recs[len(unmatchedD):] {
				if slices.ContainsFunc(ds, func(d derivedVerdict) bool { return d.sum == rec.sum }) {
					r.rep.Duplicates++ // the same verdict stored twice: harmless
					continue
				}
				r.recordedDiffers(k, rec, ds[0], "recorded again, differently: ")
			}
		}
	}
}

// recordedDiffers reports a recorded verdict that disagrees with d.
func (r *replayer) recordedDiffers(k verdictKey, rec recordedRef, d derivedVerdict, prefix string) {
	kind := DiffMismatch
	reason := prefix + "recorded and re-derived verdicts differ"
	if rec.guardVersion != guards.Version {
		kind = DiffPolicyChanged
		reason = prefix + "recorded by guard " + rec.guardVersion + ", re-derived by guard " + guards.Version
	}
	r.count(kind)
	r.differenceWithRecord(ReplayDifference{Kind: kind, InputSequence: k.inputSeq, InputEventID: k.eventID, Guard: k.kind.Token(), Key: k.key, AgentID: k.agent,
		VerdictSequence: rec.seq, Reason: reason, Rederived: payloadOf(r.names, d.msg)})
}

func (r *replayer) count(kind DifferenceKind) {
	switch kind {
	case DiffMismatch:
		r.rep.Mismatched++
	case DiffMissing:
		r.rep.Missing++
	case DiffExtra:
		r.rep.Extra++
	case DiffPolicyChanged:
		r.rep.PolicyChanged++
	}
}

// compareWhatIf pairs an input's verdicts under the two configurations.
func (r *replayer) compareWhatIf(seq uint64, eventID string, base, what []events.Message) {
	b, order := r.group(seq, base)
	w, worder := r.group(seq, what)
	for _, k := range worder {
		if _, ok := b[k]; !ok {
			order = append(order, k)
		}
	}
	wi := r.rep.WhatIf
	for _, k := range order {
		bs, ws := b[k], w[k]
		var rb []derivedVerdict
		for _, x := range bs {
			i := slices.IndexFunc(ws, func(y derivedVerdict) bool { return y.sum == x.sum })
			if i < 0 {
				rb = append(rb, x)
				continue
			}
			ws = slices.Delete(ws, i, i+1)
		}
		diff := ReplayDifference{Kind: DiffWhatIf, InputSequence: seq, InputEventID: eventID, Guard: k.kind.Token(), Key: k.key, AgentID: k.agent}
		for i := 0; i < max(len(rb), len(ws)); i++ {
			d := diff
			switch {
			case i < len(rb) && i < len(ws):
				d.Change = "changed"
				d.Rederived, d.WhatIf = payloadOf(r.names, rb[i].msg), payloadOf(r.names, ws[i].msg)
				d.Reason = describeChange(d.Rederived, d.WhatIf, "recorded configuration", "what-if")
				wi.Changed++
			case i < len(rb):
				d.Change, d.Reason = "removed", "the what-if configuration derives no such verdict"
				d.Rederived = payloadOf(r.names, rb[i].msg)
				wi.Removed++
			default:
				d.Change, d.Reason = "added", "only the what-if configuration derives this verdict"
				d.WhatIf = payloadOf(r.names, ws[i].msg)
				wi.Added++
			}
			r.difference(d)
		}
	}
}

// difference lists d, within MaxDifferences.
func (r *replayer) difference(d ReplayDifference) bool {
	if r.opts.MaxDifferences < 0 || len(r.rep.Differences) >= r.opts.MaxDifferences {
		r.rep.DifferencesOmitted++
		return false
	}
	r.rep.Differences = append(r.rep.Differences, d)
	return true
}

// differenceWithRecord lists d and reads its recorded verdict at the end.
func (r *replayer) differenceWithRecord(d ReplayDifference) {
	if r.difference(d) {
		r.pending = append(r.pending, pendingDifference{i: len(r.rep.Differences) - 1, seq: d.VerdictSequence})
	}
}

// finish reports the recorded verdicts that nothing re-derived and reads
// the recorded payloads of the listed differences.
func (r *replayer) finish(ctx context.Context) {
	keys := make([]verdictKey, 0, len(r.index))
	for k := range r.index {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.inputSeq != b.inputSeq {
			return a.inputSeq < b.inputSeq
		}
		return r.index[a][0].seq < r.index[b][0].seq
	})
	for _, k := range keys {
		for _, rec := range r.index[k] {
			kind := DiffExtra
			reason := "recorded, but the replay derives no such verdict"
			if r.deleted[k.inputSeq] || k.inputSeq < r.rep.FirstSeq || k.inputSeq > r.rep.LastSeq {
				reason = "recorded for input sequence " + strconv.FormatUint(k.inputSeq, 10) + ", which the telemetry stream does not hold"
			}
			if rec.guardVersion != guards.Version {
				kind, reason = DiffPolicyChanged, "recorded by guard "+rec.guardVersion+"; guard "+guards.Version+" derives no such verdict"
			}
			r.count(kind)
			if r.difference(ReplayDifference{Kind: kind, InputSequence: k.inputSeq, InputEventID: k.eventID, Guard: k.kind.Token(), Key: k.key, AgentID: k.agent,
				VerdictSequence: rec.seq, Reason: reason}) {
				r.pending = append(r.pending, pendingDifference{i: len(r.rep.Differences) - 1, seq: rec.seq})
			}
		}
	}
	for _, p := range r.pending {
		d := &r.rep.Differences[p.i]
		m, err := r.verdicts.GetMsg(ctx, p.seq)
		if err != nil {
			d.Reason += fmt.Sprintf(" (the recorded verdict can no longer be read: %v)", err)
			continue
		}
		ev, err := r.names.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		d.Recorded = eventPayload(ev)
		if d.Rederived != nil {
			d.Reason += ": " + describeChange(d.Recorded, d.Rederived, "recorded", "re-derived")
		}
	}
	sort.SliceStable(r.rep.Differences, func(i, j int) bool {
		return r.rep.Differences[i].InputSequence < r.rep.Differences[j].InputSequence
	})
}

// payloadOf is a verdict message's data as JSON.
func payloadOf(names events.Names, m events.Message) json.RawMessage {
	ev, err := names.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return nil
	}
	return eventPayload(ev)
}

func eventPayload(ev events.Event) json.RawMessage {
	var v any
	switch {
	case ev.SchemaVerdict != nil:
		v = ev.SchemaVerdict
	case ev.CompositionVerdict != nil:
		v = ev.CompositionVerdict
	default:
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // directives hold "<"; shown to people
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// describeChange names the members in which two verdict payloads differ,
// the manifest digest first.
func describeChange(a, b json.RawMessage, aName, bName string) string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return "the verdicts differ"
	}
	var fields []string
	seen := map[string]bool{}
	for k, v := range ma {
		seen[k] = true
		if string(v) != string(mb[k]) {
			fields = append(fields, k)
		}
	}
	for k := range mb {
		if !seen[k] {
			fields = append(fields, k)
		}
	}
	sort.Strings(fields)
	if len(fields) == 0 {
		return "the verdicts' CloudEvent attributes differ (id, time, source or subject); their data is equal"
	}
	if i := slices.Index(fields, "manifest_digest"); i >= 0 {
		return fmt.Sprintf("manifest digest %s %s, %s %s; members differing: %v", aName, string(ma["manifest_digest"]), bName, string(mb["manifest_digest"]), fields)
	}
	return fmt.Sprintf("same manifest digest, members differing: %v", fields)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// laneKey is a guard and a key (a tool or composition id): the verdicts of
// one ordering lane.
type laneKey struct {
	kind events.Kind
	key  string
}

// laneRef is an input with a recorded verdict in a lane, and whether that
// verdict was written by another guard version.
type laneRef struct {
	seq uint64
	old bool
}

// laneVersions tells which guard version judged a lane at a point of the
// stream. An input that a newer guard judges and an older one passed over
// in silence (a repeat it did not report) has no recorded verdict of its
// own: the lane's last recorded verdict before it says which guard ran.
type laneVersions struct {
	byKey  map[laneKey][]laneRef
	sorted bool
}

func (l *laneVersions) add(k verdictKey, old bool) {
	lk := laneKey{k.kind, k.key}
	l.byKey[lk] = append(l.byKey[lk], laneRef{seq: k.inputSeq, old: old})
	l.sorted = false
}

// oldBefore reports whether the last recorded verdict of k's lane for an
// input before seq was written by another guard version.
func (l *laneVersions) oldBefore(k verdictKey, seq uint64) bool {
	if !l.sorted {
		for _, refs := range l.byKey {
			slices.SortFunc(refs, func(a, b laneRef) int { return cmp.Compare(a.seq, b.seq) })
		}
		l.sorted = true
	}
	refs := l.byKey[laneKey{k.kind, k.key}]
	i, _ := slices.BinarySearchFunc(refs, seq, func(r laneRef, s uint64) int { return cmp.Compare(r.seq, s) })
	return i > 0 && refs[i-1].old
}
