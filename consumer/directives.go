package consumer

// This file keeps the directives in force (bucket toolsentry-directives):
// a projector follows the verdict stream with its own durable consumer and
// writes, per (tool, agent), per tool and per composition, what the latest
// verdict tells agents to do (events.Directive). Agents watch their own keys
// (agent.Agent). An operator's accept reaches them as the SCHEMA_MATCH
// verdict that the tool's lane publishes for it, which marks the agents'
// directives about the accepted version accepted.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// DirectivesDurable is the name of the per-message-ack projector's durable
// consumer on the verdict stream before lanes, after the prefix
// ("<prefix>-directives"): the directives lane starts after its ack floor.
const DirectivesDurable = "directives"

// DirectivesLane is the lease key of the directives projector's lane.
const DirectivesLane = "directives"

// DirectivesOptions configure the directives projector of a Service.
type DirectivesOptions struct {
	// Disable leaves the directives bucket alone: no projector runs.
	Disable bool
	// Workers bounds the tools (and compositions) whose verdicts are
	// projected at once, each tool's in order (default 16).
	Workers int
}

// Directives is the projector from verdicts to directives in force. It
// consumes the verdict stream in order per tool or composition (a verdict
// subject's last token), DirectivesOptions.Workers tools at a time. What a verdict
// replaces:
//
//   - a verdict about a tool for an agent replaces that agent's directive
//     for the tool (key schema.<tool>.<agent>);
//   - a verdict about a tool for no agent (NO_BASELINE, SCHEMA_MATCH, drift
//     with no usage known) replaces the tool-wide directive (schema.<tool>),
//     and supersedes every agent's directive for the tool that was about
//     another current version (its ToFingerprint differs): the tool no
//     longer presents the schema that directive migrates to, so a reverted
//     tool releases the agents' migrations and HALTs. An agent's directive
//     about the version the tool still presents stays: the agent still
//     sends what it sent, and the core does not report the same drift twice;
//   - a composition verdict replaces the composition's directive.
//
// Writes are compare-and-set, and a directive remembers the verdict stream
// sequence it follows: a redelivered or older verdict changes nothing.
type Directives struct {
	names events.Names
	view  *View

	mu     sync.Mutex
	byTool map[string]map[string]struct{} // "schema.<tool>" → agent keys
	// heads holds what put compares of each key's directive in force, for
	// the revision it was read or written at: a directive is decoded once
	// per revision, not once per verdict that might replace it (a tool-wide
	// verdict looks at every agent's directive of the tool).
	heads map[string]directiveHead
}

// directiveHead is what the projector compares of a directive in force.
type directiveHead struct {
	rev      uint64 // the revision of the key it was read from
	readable bool   // false: the value did not decode as a directive
	// sequence is the directive's Verdict.Sequence; agentID and
	// toFingerprint are its AgentID and ToFingerprint.
	sequence      uint64
	agentID       string
	toFingerprint string
	// instruction is the directive without its verdict's id, sequence and
	// time (instructionOf): equal for a verdict that repeats it.
	instruction string
}

// headOf returns the head of a directive written at rev.
func headOf(dir *events.Directive, rev uint64) directiveHead {
	return directiveHead{rev: rev, readable: true, sequence: dir.Verdict.Sequence, agentID: dir.AgentID, toFingerprint: dir.ToFingerprint,
		instruction: instructionOf(dir)}
}

// instructionOf is what a directive tells, whichever verdict told it: the
// directive encoded without the verdict's id, sequence and time. A verdict
// that repeats the directive in force exactly (the same verdict name and
// manifest digest, action, fingerprints and migration: a SCHEMA_MATCH
// after a SCHEMA_MATCH) leaves the directive in force as it is, so that
// the agents that watch it are woken only when what they must do changes.
func instructionOf(dir *events.Directive) string {
	c := *dir
	c.Verdict.ID, c.Verdict.Sequence, c.Verdict.Time = "", 0, time.Time{}
	b, err := json.Marshal(c)
	if err != nil {
		return "" // never equal to a marshalled one
	}
	return string(b)
}

// StartDirectives loads the view of the directives bucket (ctx bounds the
// loading; the view follows the bucket until Close). The projector runs as
// a lane of the service (lane): one worker at a time holds it.
func StartDirectives(ctx context.Context, res *Resources) (*Directives, error) {
	names, err := events.NewNames(res.Config.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	d := &Directives{names: names, byTool: map[string]map[string]struct{}{}, heads: map[string]directiveHead{}}
	d.view, err = NewView(context.WithoutCancel(ctx), res.Directives, ViewOptions{OnChange: d.index})
	if err != nil {
		return nil, err
	}
	if err := d.view.WaitReady(ctx); err != nil {
		d.view.Close()
		return nil, err
	}
	return d, nil
}

// directivesWorkers is the default of DirectivesOptions.Workers: the tools
// (and compositions) whose verdicts the projector applies at once. A tool's verdicts are applied in order, one
// call at a time; different tools write different keys. One at a time in
// all, the projector trailed a busy fleet by thousands of verdicts (the
// 1M-event bench), and an agent learnt of its drift that much later.
const directivesWorkers = 16

// lane is the projector's lane on the verdict stream: in order per tool or
// composition, workers of them at a time, caught up with the
// directives bucket when taken, starting after the old durable consumer's
// ack floor on an upgrade.
func (d *Directives) lane(res *Resources, eo engine.Options, workers int) engine.LaneSpec {
	cfg := res.Config
	if workers <= 0 {
		workers = directivesWorkers
	}
	eo.Workers, eo.Key = workers, engine.LastToken
	if eo.MaxAttempts == 0 {
		eo.MaxAttempts = cfg.MaxDeliver
	}
	eo.OnDeadLetter = nil // metrics count telemetry only
	eo.DeadLetter = func(_ *engine.Message, reason string) string { return cfg.DeadLetterSubject(reason) }
	return engine.LaneSpec{
		Key:       DirectivesLane,
		Source:    engine.Source{Stream: cfg.VerdictsStream(), FilterSubjects: []string{d.names.VerdictsSubjects()}},
		Handler:   engine.BatchFunc(d.handleBatch),
		Options:   eo,
		OnAcquire: d.view.CatchUp,
		Initial: func(ctx context.Context) (uint64, error) {
			return ackFloorAfter(ctx, res.Verdicts, cfg.Prefix+"-"+DirectivesDurable)
		},
		Layout: "verdicts",
	}
}

// handleBatch applies a tool's verdicts in order; the first transient
// failure stops the call (the engine hands that verdict and the rest again).
func (d *Directives) handleBatch(ctx context.Context, _ string, msgs []*engine.Message) []error {
	var res []error
	for i, m := range msgs {
		err := d.handle(ctx, m)
		if err == nil {
			continue
		}
		if res == nil {
			res = make([]error, len(msgs))
		}
		res[i] = err
		if !isPermanent(err) {
			for j := i + 1; j < len(msgs); j++ {
				res[j] = err
			}
			return res
		}
	}
	return res
}

// Close stops the view. It is idempotent.
func (d *Directives) Close() { d.view.Close() }

// index keeps, per tool, the keys of its agents' directives, and forgets
// the head of a deleted key.
func (d *Directives) index(key string, present bool) {
	if !present {
		d.mu.Lock()
		delete(d.heads, key)
		d.mu.Unlock()
	}
	if !strings.HasPrefix(key, events.DirectiveSchema+".") || strings.Count(key, ".") != 2 {
		return
	}
	tool := key[:strings.LastIndexByte(key, '.')]
	d.mu.Lock()
	defer d.mu.Unlock()
	if present {
		if d.byTool[tool] == nil {
			d.byTool[tool] = map[string]struct{}{}
		}
		d.byTool[tool][key] = struct{}{}
		return
	}
	delete(d.byTool[tool], key)
}

func (d *Directives) agentKeys(toolKey string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := make([]string, 0, len(d.byTool[toolKey]))
	for k := range d.byTool[toolKey] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (d *Directives) handle(ctx context.Context, m *Message) error {
	dir, key, accepted, err := d.directiveOf(m)
	if err != nil {
		return permanent(err)
	}
	instruction := instructionOf(&dir)
	if err := d.put(ctx, key, func(cur *directiveHead) (events.Directive, bool) {
		if cur != nil && cur.sequence >= dir.Verdict.Sequence {
			return events.Directive{}, false // applied before, or older
		}
		if cur != nil && cur.instruction == instruction {
			return events.Directive{}, false // repeats the directive in force
		}
		return dir, true
	}); err != nil {
		return err
	}
	zerolog.Ctx(ctx).Debug().Str("key", key).Str("action", string(dir.Action)).Uint64("verdict_seq", m.StreamSeq).Msg("directive in force")
	if dir.Guard != events.DirectiveSchema || dir.AgentID != "" {
		return nil
	}
	for _, k := range d.agentKeys(key) {
		if accepted {
			if err := d.accept(ctx, k, dir); err != nil {
				return err
			}
		}
		err := d.put(ctx, k, func(cur *directiveHead) (events.Directive, bool) {
			if cur == nil || cur.sequence >= dir.Verdict.Sequence || cur.toFingerprint == dir.ToFingerprint {
				return events.Directive{}, false
			}
			next := dir
			next.AgentID = cur.agentID
			next.SupersededBy = dir.Verdict.ID
			next.Reason = fmt.Sprintf("the tool now presents %s, not %s that the agent's last verdict was about: %s", short(dir.ToFingerprint), short(cur.toFingerprint), dir.Reason)
			return next, true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// directiveOf decodes a verdict message and returns the directive it sets,
// the directive's key, and whether the verdict follows an operator's
// accept of the tool's baseline (events.KindBaselineAccepted).
func (d *Directives) directiveOf(m *Message) (events.Directive, string, bool, error) {
	ev, err := d.names.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return events.Directive{}, "", false, err
	}
	dir, err := events.DirectiveOf(ev, m.StreamSeq)
	if err != nil {
		return events.Directive{}, "", false, err
	}
	key, err := dir.Key()
	if err != nil {
		return events.Directive{}, "", false, err
	}
	accepted := false
	if sv := ev.SchemaVerdict; sv != nil && sv.AgentID == "" {
		a, err := events.ParseSubjectAnyPrefix(sv.InputSubject)
		accepted = err == nil && a.Kind == events.KindBaselineAccepted
	}
	return dir, key, accepted, nil
}

// accept marks the agent's directive at key accepted when it is about the
// version an operator accepted (the tool-wide verdict acc follows the
// accept): no longer held. Its action and migration stay, because
// accepting changes what agents are judged against, not what they send: an
// agent that sends the old fields still needs the migration, and the core
// does not report that drift to it again. A directive about another
// version, newer than acc or already accepted, is left alone.
func (d *Directives) accept(ctx context.Context, key string, acc events.Directive) error {
	fp := acc.ToFingerprint
	var written directiveHead
	e, err := d.view.UpdateEntry(ctx, key, func(current Entry, found bool) ([]byte, error) {
		written = directiveHead{}
		if !found {
			return nil, ErrNoChange
		}
		var dir events.Directive
		if err := json.Unmarshal(current.Value, &dir); err != nil {
			return nil, ErrNoChange // replaced by the next verdict for the agent
		}
		if dir.ToFingerprint != fp || dir.AcceptedFingerprint == fp || dir.Verdict.Sequence >= acc.Verdict.Sequence {
			return nil, ErrNoChange
		}
		dir.Held = false
		dir.AcceptedFingerprint = fp
		switch dir.Action {
		case guards.ActionProceed:
			dir.Reason += "; baseline accepted"
		default:
			dir.Reason += "; baseline accepted: the agent still needs this directive until it integrates against the accepted version"
		}
		written = headOf(&dir, 0)
		return json.Marshal(dir)
	})
	if err != nil {
		return fmt.Errorf("marking directive %s accepted: %w", key, err)
	}
	if written.readable && e.Revision != 0 {
		written.rev = e.Revision
		d.mu.Lock()
		d.heads[key] = written
		d.mu.Unlock()
	}
	return nil
}

// put writes the directive that next derives from the head of the current
// one (nil if none or unreadable), unless next says there is nothing to
// change. When the head of the key's current revision is known and next
// changes nothing, put neither copies nor decodes the value.
func (d *Directives) put(ctx context.Context, key string, next func(cur *directiveHead) (events.Directive, bool)) error {
	if rev, ok := d.view.Revision(key); ok {
		if h, ok := d.head(key, rev); ok && h.readable {
			if _, change := next(&h); !change {
				return nil
			}
		}
	}
	var written directiveHead
	e, err := d.view.UpdateEntry(ctx, key, func(current Entry, found bool) ([]byte, error) {
		written = directiveHead{} // called again after a conflict
		var cur *directiveHead
		if found {
			h := d.readHead(ctx, key, current)
			if h.readable {
				cur = &h
			}
		}
		dir, ok := next(cur)
		if !ok {
			return nil, ErrNoChange
		}
		written = headOf(&dir, 0)
		return json.Marshal(dir)
	})
	if err != nil {
		return fmt.Errorf("writing directive %s: %w", key, err)
	}
	if written.readable && e.Revision != 0 {
		written.rev = e.Revision
		d.mu.Lock()
		d.heads[key] = written
		d.mu.Unlock()
	}
	return nil
}

// head returns the cached head of key at rev.
func (d *Directives) head(key string, rev uint64) (directiveHead, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.heads[key]
	return h, ok && h.rev == rev
}

// readHead returns the head of a key's current value: cached for its
// revision, or decoded (and cached). A value that is not a directive is
// logged once per revision and has an unreadable head.
func (d *Directives) readHead(ctx context.Context, key string, current Entry) directiveHead {
	if h, ok := d.head(key, current.Revision); ok {
		return h
	}
	h := directiveHead{rev: current.Revision}
	var c events.Directive
	if err := json.Unmarshal(current.Value, &c); err == nil {
		h = headOf(&c, current.Revision)
	} else {
		zerolog.Ctx(ctx).Warn().Str("key", key).Err(err).Msg("directive unreadable; replacing it")
	}
	d.mu.Lock()
	if cur, ok := d.heads[key]; !ok || cur.rev < h.rev {
		d.heads[key] = h
	}
	d.mu.Unlock()
	return h
}

// short keeps a fingerprint's algorithm and 12 hex digits, for reasons.
func short(fp string) string {
	if fp == "" {
		return "(none)"
	}
	if i := strings.IndexByte(fp, ':'); i >= 0 && len(fp) > i+13 {
		return fp[:i+13] + "…"
	}
	return fp
}

// startServiceDirectives loads the projector of a Service, unless disabled.
func startServiceDirectives(ctx context.Context, res *Resources, opts ServiceOptions) (*Directives, error) {
	if opts.Directives.Disable {
		return nil, nil
	}
	return StartDirectives(ctx, res)
}
