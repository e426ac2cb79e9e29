package agent

// This file answers "may I send this payload to this tool?" from a local
// view of the directives in force (bucket toolsentry-directives, written by
// the consumer's projector) and of the tools' current schemas (bucket
// toolsentry-baselines, toolview.go), fed by KV watches: no round trip per
// call.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// ErrHalt is matched (errors.Is) by every *HaltError: a directive in force
// says the call must not be made.
var ErrHalt = errors.New("halted by directive")

// ErrNoDirective is returned by Workflow for a composition that has no
// verdict yet.
var ErrNoDirective = errors.New("no directive in force")

// ErrBadPayload is returned by Guard for a payload that is not JSON: the
// payload is the caller's error, not a HALT.
var ErrBadPayload = errors.New("payload is not JSON")

// ErrDoesNotFit is the Cause of a *HaltError (errors.Is holds) when a
// directive in force says MIGRATE or HALT and the payload, as given or
// migrated, does not fit the tool's current input schema.
var ErrDoesNotFit = errors.New("payload does not fit the tool's current schema")

// ErrNotReady is returned by WatchDirectives and NewAgent when the view
// could not load the bucket's current directives before the context ended.
var ErrNotReady = errors.New("directives not loaded")

// HaltError is the error of a call that a directive forbids: the directive
// says HALT, or it says MIGRATE and this payload hits one of the
// migration's blockers. Match it with errors.As; errors.Is(err, ErrHalt)
// holds, and so does errors.Is(err, toolschema.ErrCannotMigrate) when Cause is
// the payload's *toolschema.MigrationError.
type HaltError struct {
	// Agent and Tool name the call (a tool's directive); Composition names
	// a workflow (Workflow's directive).
	Agent, Tool, Composition string
	// Directive is the directive in force: its text, verdict and digest.
	Directive events.Directive
	// Cause is why this payload is halted: its *toolschema.MigrationError
	// (it sends a field the migration cannot carry over), or an error
	// wrapping ErrDoesNotFit (it does not fit the tool's current schema);
	// nil when the directive's HALT applies as it is (the view does not know
	// the tool's current schema).
	Cause error
}

func (e *HaltError) Error() string {
	what := "tool " + e.Tool
	if e.Composition != "" {
		what = "workflow " + e.Composition
	}
	if e.Agent != "" {
		what += " for agent " + e.Agent
	}
	msg := fmt.Sprintf("HALT %s: %s (verdict %s, manifest digest %s)", what, e.Directive.Directive, e.Directive.Verdict.Name, e.Directive.Verdict.ManifestDigest)
	if e.Cause != nil {
		return msg + ": " + e.Cause.Error()
	}
	return msg + ": " + e.Directive.Reason
}

// Unwrap returns ErrHalt and the cause, if any.
func (e *HaltError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrHalt, e.Cause}
	}
	return []error{ErrHalt}
}

// ManifestDigest is the digest of the verdict behind the HALT.
func (e *HaltError) ManifestDigest() string { return e.Directive.Verdict.ManifestDigest }

// Staleness says how current a view of the directives is.
type Staleness struct {
	// Age is the time since the view was last known to hold everything
	// the bucket held: since its last watch update, or since the last probe
	// that found nothing newer in the bucket.
	Age time.Duration `json:"age"`
	// Live is true while the connection is up and the watch runs.
	Live bool `json:"live"`
}

// Decision is the answer to one call: the arguments to send and the
// directive that decided them.
type Decision struct {
	// Action is what happens to this payload: PROCEED (the arguments as
	// given), MIGRATE (rewritten) or HALT (the error is a *HaltError). It
	// is the payload's, not only the directive's: a payload that fits the
	// tool's current schema proceeds whatever the directive says.
	Action guards.Action
	// Arguments are the arguments to send: the caller's bytes under
	// PROCEED, rewritten by the migration under MIGRATE.
	Arguments json.RawMessage
	// Migrated is true when a migration rewrote the arguments.
	Migrated bool
	// Fits is true when the payload was checked against the tool's
	// current input schema (CurrentFingerprint) and fits it: as given
	// under PROCEED, once migrated under MIGRATE.
	Fits bool
	// CurrentFingerprint is the tool's current version as the view knows
	// it ("" when it knows none); a payload is judged against its input
	// schema.
	CurrentFingerprint string
	// Reason says why, in words.
	Reason string
	// Directive is the directive in force; nil when there is none for the
	// tool (nothing is known against it: proceed).
	Directive *events.Directive
	// Applies is false when the agent integrated against the version the
	// directive migrates to (GuardOptions.Fingerprint): the directive is
	// then not the agent's concern and the call proceeds.
	Applies bool
	// Staleness is the view's, at the time of the decision.
	Staleness Staleness
}

// DefaultProbeInterval is how often a directive view checks that its watch
// has delivered the bucket's last revision (Staleness.Age).
const DefaultProbeInterval = 5 * time.Second

// ViewOptions tune a DirectiveView.
type ViewOptions struct {
	// Agent restricts the view to one agent's keys (the filters of
	// events.AgentDirectiveFilters); "" follows every key, as `toolsentry
	// serve`'s HTTP endpoint does for all agents.
	Agent string
	// ProbeInterval: see DefaultProbeInterval; negative disables probing.
	ProbeInterval time.Duration
}

// DirectiveView is a local copy of the directives in force and of the
// tools' current schemas, kept current by KV watches; Guard and Workflow
// read memory only. It is safe for concurrent use.
type DirectiveView struct {
	kv    jetstream.KeyValue
	nc    *nats.Conn
	opts  ViewOptions
	tools *toolView
	usage *usageView // the agent's usage records; nil when opts.Agent is ""

	mu       sync.RWMutex
	entries  map[string]viewDirective
	listed   map[string]listedEntry // local verdicts (Listed), by directive key
	watchRev uint64
	fresh    time.Time
	ended    bool

	ready  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

type viewDirective struct {
	d   events.Directive
	rev uint64
}

// WatchDirectives opens a view of the directives and baselines buckets of
// names on js and waits until it holds both buckets' current values (or ctx
// ends: ErrNotReady). The view follows the buckets until Close.
func WatchDirectives(ctx context.Context, js jetstream.JetStream, names events.Names, opts ViewOptions) (*DirectiveView, error) {
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	kv, err := js.KeyValue(ctx, names.DirectivesBucket())
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s (has `toolsentry serve` run with this prefix?): %w", names.DirectivesBucket(), err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var w jetstream.KeyWatcher
	if opts.Agent == "" {
		w, err = kv.WatchAll(wctx)
	} else {
		var filters []string
		if filters, err = events.AgentDirectiveFilters(opts.Agent); err == nil {
			w, err = kv.WatchFiltered(wctx, filters)
		}
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching bucket %s: %w", names.DirectivesBucket(), err)
	}
	tools, err := watchTools(wctx, js, names)
	if err != nil {
		_ = w.Stop()
		cancel()
		return nil, err
	}
	var usage *usageView
	if opts.Agent != "" {
		if usage, err = watchUsage(wctx, js, names, opts.Agent); err != nil {
			_ = w.Stop()
			cancel()
			<-tools.done
			return nil, err
		}
	}
	v := &DirectiveView{
		kv: kv, nc: js.Conn(), opts: opts, tools: tools, usage: usage,
		entries: map[string]viewDirective{}, listed: map[string]listedEntry{},
		ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	go v.follow(wctx, w)
	type watch struct {
		ready, done <-chan struct{}
		bucket      string
	}
	watches := []watch{{v.ready, v.done, names.DirectivesBucket()}, {tools.ready, tools.done, names.BaselinesBucket()}}
	if usage != nil {
		watches = append(watches, watch{usage.ready, usage.done, names.UsageBucket()})
	}
	for _, c := range watches {
		select {
		case <-c.ready:
		case <-c.done:
			v.Close()
			return nil, fmt.Errorf("%w: the watch of %s ended", ErrNotReady, c.bucket)
		case <-ctx.Done():
			v.Close()
			return nil, fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
		}
	}
	return v, nil
}

func (v *DirectiveView) follow(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(v.done)
	defer func() { _ = w.Stop() }()
	var probe <-chan time.Time
	if v.opts.ProbeInterval > 0 {
		t := time.NewTicker(v.opts.ProbeInterval)
		defer t.Stop()
		probe = t.C
	}
	readyOnce := sync.OnceFunc(func() { close(v.ready) })
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				v.mu.Lock()
				v.ended = true
				v.mu.Unlock()
				return
			}
			v.mu.Lock()
			v.fresh = time.Now()
			if e != nil {
				v.apply(e)
			}
			v.mu.Unlock()
			if e == nil {
				readyOnce()
			}
		case <-probe:
			v.probe(ctx)
		}
	}
}

// apply records one watch update; v.mu is held.
func (v *DirectiveView) apply(e jetstream.KeyValueEntry) {
	v.watchRev = max(v.watchRev, e.Revision())
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.entries, e.Key())
		return
	}
	var d events.Directive
	if err := json.Unmarshal(e.Value(), &d); err != nil || !d.Action.Valid() {
		// Not a directive this client understands: fail safe for that key.
		d = events.Directive{Action: guards.ActionHalt, Directive: "HALT: unreadable directive", Reason: fmt.Sprintf("directive %s at revision %d cannot be read by this client", e.Key(), e.Revision())}
	}
	v.entries[e.Key()] = viewDirective{d: d, rev: e.Revision()}
}

func (v *DirectiveView) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, max(v.opts.ProbeInterval, time.Second))
	defer cancel()
	st, err := v.kv.Status(pctx)
	if err != nil {
		return
	}
	si, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok || si.StreamInfo() == nil {
		return
	}
	last := si.StreamInfo().State.LastSeq
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.watchRev >= last {
		v.fresh = time.Now()
	}
}

// Staleness reports how current the view is.
func (v *DirectiveView) Staleness() Staleness {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return Staleness{Age: time.Since(v.fresh), Live: !v.ended && v.nc != nil && v.nc.IsConnected()}
}

// Lookup returns the directive in force for agent's calls to tool: the
// agent's own, else the tool-wide one.
func (v *DirectiveView) Lookup(agent, tool string) (events.Directive, bool) {
	keys := make([]string, 0, 2)
	if agent != "" {
		if k, err := events.SchemaDirectiveKey(tool, agent); err == nil {
			keys = append(keys, k)
		}
	}
	if k, err := events.SchemaDirectiveKey(tool, ""); err == nil {
		keys = append(keys, k)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, k := range keys {
		if e, ok := v.entries[k]; ok {
			return e.d, true
		}
	}
	return events.Directive{}, false
}

// GuardOptions qualify one Guard call.
type GuardOptions struct {
	// Fingerprint is the tool schema fingerprint the agent integrated
	// against (optional). A directive that migrates to exactly that
	// version does not apply: the agent already speaks it.
	Fingerprint string
}

// ToolState returns the tool's schema state as the view holds it.
func (v *DirectiveView) ToolState(tool string) (ToolState, bool) {
	e, ok := v.tools.lookup(tool)
	if !ok {
		return ToolState{}, false
	}
	return e.state, true
}

// Guard decides agent's call of tool with payload (a JSON value, the
// call's arguments). A directive answers a payload, not only an agent:
//
//   - no directive for the tool, or a PROCEED: the payload as given;
//   - a MIGRATE or a HALT: the payload is judged against the tool's current
//     input schema (it fits when it validates and sends no path the schema
//     does not declare with its type). One that the directive's migration
//     rewrites (it uses the old surface) and that then fits goes migrated;
//     else one that fits as given goes as given, whatever the directive
//     says (the agent already speaks the new version); one that fits
//     neither is a *HaltError whose Cause says why (the migration's
//     blocker it hits, or ErrDoesNotFit and the places).
//
// When the view knows no current input schema for the tool (no baseline
// record, or a schema it cannot compile), the directive's action applies
// as it is: MIGRATE rewrites, HALT halts. It reads memory only; ctx is for
// the caller's deadline and is not waited on.
func (v *DirectiveView) Guard(ctx context.Context, agent, tool string, payload json.RawMessage, opts GuardOptions) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	dec := Decision{Action: guards.ActionProceed, Arguments: payload, Staleness: v.Staleness()}
	var current *toolEntry
	if e, ok := v.tools.lookup(tool); ok && e.load() == nil {
		current, dec.CurrentFingerprint = e, e.state.Current.Fingerprint
	}
	d, ok := v.Lookup(agent, tool)
	var inForce *events.Directive
	if ok {
		inForce = &d
	}
	if local, isLocal := v.listedFor(agent, tool, inForce); isLocal {
		// The agent has just been shown a version that serve has not
		// judged yet: the local verdict about it (unless serve's is
		// here), and its input schema.
		current, dec.CurrentFingerprint = nil, ""
		if local.tool.load() == nil {
			current, dec.CurrentFingerprint = local.tool, local.tool.state.Current.Fingerprint
		}
		if inForce == nil || inForce.ToFingerprint != local.d.ToFingerprint {
			d, ok = local.d, true
			// An agent with no recorded surface is judged by its payload:
			// the drift for the paths it sends, unless it fits as given.
			if local.byPayload != nil && current != nil && current.fits(payload) != nil {
				if pd, drifts := local.forPayload(payload); drifts {
					d = pd
				}
			}
		}
	}
	if !ok {
		dec.Reason = "no verdict about this tool yet"
		return dec, nil
	}
	if current != nil && !current.judges(d.ToFingerprint) {
		current, dec.CurrentFingerprint = nil, ""
	}
	dec.Directive = &d
	dec.Reason = d.Reason
	dec.Applies = opts.Fingerprint == "" || d.ToFingerprint == "" || opts.Fingerprint != d.ToFingerprint
	if !dec.Applies {
		dec.Reason = "the agent integrated against " + d.ToFingerprint + ", the version this directive migrates to"
		return dec, nil
	}
	halt := func(cause error) (Decision, error) {
		dec.Action, dec.Arguments, dec.Migrated = guards.ActionHalt, nil, false
		if cause != nil {
			dec.Reason = cause.Error()
		}
		return dec, &HaltError{Agent: agent, Tool: tool, Directive: d, Cause: cause}
	}
	switch {
	case d.Action == guards.ActionProceed:
		return dec, nil
	case d.Action != guards.ActionMigrate && current == nil:
		return halt(nil)
	}
	out, migrated, err := migrate(d.Migration, payload)
	if errors.Is(err, ErrBadPayload) {
		return Decision{}, err
	}
	if current == nil {
		// Nothing to judge the payload by: the directive as it is.
		var merr *toolschema.MigrationError
		switch {
		case d.Action != guards.ActionMigrate:
			return halt(nil)
		case errors.As(err, &merr):
			return halt(merr)
		case err != nil:
			return halt(err) // a plan this client cannot run: fail safe
		}
		if migrated {
			dec.Action = guards.ActionMigrate
		}
		dec.Arguments, dec.Migrated = out, migrated
		return dec, nil
	}
	// The old surface, migrated, first: a pinned old default is added to
	// a payload that would fit without it.
	var outErr error
	if err == nil && migrated {
		if outErr = current.fits(out); outErr == nil {
			dec.Action, dec.Arguments, dec.Migrated, dec.Fits = guards.ActionMigrate, out, true, true
			return dec, nil
		}
	}
	givenErr := current.fits(payload)
	if givenErr == nil {
		dec.Fits = true
		dec.Reason = "the payload fits the tool's current schema (fingerprint " + short(dec.CurrentFingerprint) + "): it goes as given"
		return dec, nil
	}
	var merr *toolschema.MigrationError
	switch {
	case errors.As(err, &merr):
		return halt(merr)
	case err != nil:
		return halt(err) // a plan this client cannot run: fail safe
	case migrated:
		return halt(fmt.Errorf("%w once migrated: %w", ErrDoesNotFit, outErr))
	default:
		return halt(fmt.Errorf("%w: %w", ErrDoesNotFit, givenErr))
	}
}

// migrate applies plan to payload. A plan without steps or blockers leaves
// the bytes as they are.
func migrate(plan toolschema.MigrationPlan, payload json.RawMessage) (json.RawMessage, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	if dec.More() {
		return nil, false, fmt.Errorf("%w: more than one JSON value", ErrBadPayload)
	}
	if len(plan.Steps) == 0 && len(plan.Blocked) == 0 {
		return payload, false, nil
	}
	out, err := plan.Apply(v)
	if err != nil {
		return nil, false, err
	}
	data, err := marshalNoEscape(out)
	if err != nil {
		return nil, false, err
	}
	before, err := marshalNoEscape(v)
	if err != nil {
		return nil, false, err
	}
	if bytes.Equal(data, before) {
		return payload, false, nil // nothing to migrate in this payload
	}
	return data, true, nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Workflow returns the directive in force for a composition: its verdict
// and directive text. A HALT comes as the directive and a *HaltError; a
// composition without a verdict yet is ErrNoDirective.
func (v *DirectiveView) Workflow(ctx context.Context, agent, composition string) (events.Directive, error) {
	if err := ctx.Err(); err != nil {
		return events.Directive{}, err
	}
	key, err := events.CompositionDirectiveKey(composition)
	if err != nil {
		return events.Directive{}, err
	}
	v.mu.RLock()
	e, ok := v.entries[key]
	v.mu.RUnlock()
	if !ok {
		return events.Directive{}, fmt.Errorf("composition %s: %w", composition, ErrNoDirective)
	}
	if e.d.Action != guards.ActionProceed {
		return e.d, &HaltError{Agent: agent, Composition: composition, Directive: e.d}
	}
	return e.d, nil
}

// Close stops following the buckets. It is idempotent.
func (v *DirectiveView) Close() {
	v.cancel()
	<-v.done
	<-v.tools.doneCh()
	<-v.usage.doneCh()
}
