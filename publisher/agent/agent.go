package agent

// This file is the client that agents embed: it emits their invocation
// telemetry off the call path, and guards their calls by the directives in
// force (guard.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// ErrQueueFull is returned by Agent.Emit when the telemetry queue is full
// (NATS is down or slow): the invocation is dropped and counted, and the
// agent's call goes on.
var ErrQueueFull = errors.New("telemetry queue full: invocation dropped")

// ErrClosed is returned by Agent.Emit after Close: the invocation is
// dropped and counted.
var ErrClosed = errors.New("agent client closed")

// Defaults of AgentOptions.
const (
	DefaultQueueSize = 4096
	DefaultBatchSize = 128
)

// AgentOptions configure an Agent.
type AgentOptions struct {
	// AgentID names the agent in telemetry and directives. Required.
	AgentID string
	// Source is the CloudEvents source of its telemetry (default
	// "agents/<AgentID>").
	Source string
	// Names are the subjects and buckets (default prefix toolsentry).
	Names events.Names
	// Fingerprints maps a tool id (qualified: events.QualifiedToolID) to
	// the schema fingerprint the agent integrated against: sent with each
	// invocation (the core reports the drift from that version), and a
	// directive migrating to exactly that version does not apply to the
	// agent.
	Fingerprints map[string]string
	// QueueSize bounds the invocations waiting to be published (default
	// 4096); beyond it Emit drops.
	QueueSize int
	// BatchSize is how many queued invocations are published before their
	// acknowledgements are awaited together (default 128).
	BatchSize int
	// Publisher bounds the publishes in flight and how long one waits for
	// its acknowledgement before it counts as failed (default 256, 5s).
	Publisher publisher.Options
	// ProbeInterval: see DefaultProbeInterval.
	ProbeInterval time.Duration
}

// Stats count what happened to emitted invocations.
type Stats struct {
	// Emitted were accepted into the queue.
	Emitted uint64 `json:"emitted"`
	// Published were stored by the telemetry stream (or were duplicates
	// of a stored one).
	Published uint64 `json:"published"`
	// Dropped were refused by Emit (queue full, or closed) or left in the
	// queue when Close's deadline passed.
	Dropped uint64 `json:"dropped"`
	// Failed were sent but not acknowledged (NATS down, no stream, ack
	// timeout). They are not retried: the agent's call path and memory come
	// first.
	Failed uint64 `json:"failed"`
	// Invalid were accepted by Emit but refused by the event contract when
	// encoded (a field out of its JSON Schema's bounds): a caller's bug,
	// counted apart.
	Invalid uint64 `json:"invalid"`
	// Queued are waiting now.
	Queued int `json:"queued"`
}

// Invocation is one tool call as the agent reports it. Arguments are read
// for their field paths and JSON types only (events.FieldTypesOf): no value
// leaves the agent.
//
// A tool is (server, tool name): the invocation's tool id is
// events.QualifiedToolID(Server, Tool), "github/get_issue" for Server
// "github" and Tool "get_issue", the id under which toolsentry baselines
// the tools that server lists. Without Server, Tool is the id as it is
// (already qualified, or the bare id of a tool observed with no server).
type Invocation struct {
	Tool string
	// Server is the MCP server the tool was called on (its
	// serverInfo.name, or the name its schema observations carry); ""
	// when Tool is already the tool's id.
	Server    string
	Arguments json.RawMessage
	// SchemaFingerprint the agent integrated against (default
	// AgentOptions.Fingerprints[tool id]).
	SchemaFingerprint string
	ToolVersion       string
	UsedFields        []string
	OutputFieldsRead  []string
	Outcome           *events.Outcome
	WorkflowID        string
	TraceID, SpanID   string
	Latency           time.Duration
	Time              time.Time // default: now
}

// Agent is the client an agent embeds: Emit sends its invocation telemetry
// asynchronously, Guard and Workflow answer from a local view of its
// directives. Safe for concurrent use.
//
//	client, _ := agent.NewAgent(ctx, nc, agent.AgentOptions{AgentID: "billing-7"})
//	defer client.Close(ctx)
//	args, err := client.Guard(ctx, "crm.lookup", args) // rewritten by the migration in force, or a *HaltError
//	... call the tool with args ...
//	client.Emit(agent.Invocation{Tool: "crm.lookup", Arguments: args, Outcome: &events.Outcome{Status: "ok"}})
type Agent struct {
	opts AgentOptions
	js   jetstream.JetStream
	view *DirectiveView

	mu     sync.RWMutex // guards closed and sends on queue
	closed bool
	queue  chan queued
	abort  chan struct{} // closed when Close's deadline passes
	done   chan struct{} // closed when the sender has finished

	emitted, published, dropped, failed, invalid atomic.Uint64
	closeOnce                                    sync.Once
	closeErr                                     error
}

// NewAgent starts the agent's client on nc: a view of its directives
// (loaded before it returns; ctx bounds the wait) and the telemetry sender.
// The directives bucket must exist: `toolsentry serve` creates it.
func NewAgent(ctx context.Context, nc *nats.Conn, opts AgentOptions) (*Agent, error) {
	if opts.AgentID == "" {
		return nil, fmt.Errorf("%w: agent id is required", publisher.ErrInvalidConfig)
	}
	if _, err := events.KeyToken(opts.AgentID); err != nil {
		return nil, fmt.Errorf("%w: agent id: %w", publisher.ErrInvalidConfig, err)
	}
	if opts.Source == "" {
		opts.Source = "agents/" + opts.AgentID
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Publisher.MaxPending == 0 {
		opts.Publisher.MaxPending = publisher.DefaultMaxPending
	}
	if opts.Publisher.AckTimeout == 0 {
		opts.Publisher.AckTimeout = publisher.DefaultAckTimeout
	}
	if opts.QueueSize < 1 || opts.BatchSize < 1 || opts.Publisher.MaxPending < 1 || opts.Publisher.AckTimeout < 0 {
		return nil, fmt.Errorf("%w: queue size %d, batch size %d, max pending %d, ack timeout %s: want positive",
			publisher.ErrInvalidConfig, opts.QueueSize, opts.BatchSize, opts.Publisher.MaxPending, opts.Publisher.AckTimeout)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.Publisher.MaxPending),
		jetstream.WithPublishAsyncTimeout(opts.Publisher.AckTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("creating jetstream context: %w", err)
	}
	view, err := WatchDirectives(ctx, js, opts.Names, ViewOptions{Agent: opts.AgentID, ProbeInterval: opts.ProbeInterval})
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:  opts,
		js:    js,
		view:  view,
		queue: make(chan queued, opts.QueueSize),
		abort: make(chan struct{}),
		done:  make(chan struct{}),
	}
	go a.send()
	return a, nil
}

// AgentID is the agent's id.
func (a *Agent) AgentID() string { return a.opts.AgentID }

// View is the agent's view of its directives.
func (a *Agent) View() *DirectiveView { return a.view }

// Emit queues one invocation for publishing and returns at once: it never
// waits for NATS. A full queue (NATS down or slow) or a closed client drops
// the invocation, counts it (Stats.Dropped) and returns ErrQueueFull or
// ErrClosed; the caller goes on either way. Emit reads the arguments' paths
// and types at once (no value is kept) and leaves encoding to the sender.
// An invocation without a tool or whose arguments are not a JSON object is
// the caller's error, returned and not counted.
func (a *Agent) Emit(inv Invocation) error {
	msg, err := a.prepare(inv)
	if err != nil {
		return err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		a.dropped.Add(1)
		return ErrClosed
	}
	select {
	case a.queue <- msg:
		a.emitted.Add(1)
		return nil
	default:
		a.dropped.Add(1)
		return ErrQueueFull
	}
}

// queued is an invocation waiting for the sender: its payload holds field
// paths and types only, the values are gone.
type queued struct {
	p  events.Invocation
	at time.Time
}

// prepare reads what Emit must read on the caller's goroutine (the
// arguments' paths and types, so that no value is kept) and checks what the
// caller can get wrong; encoding waits for the sender.
func (a *Agent) prepare(inv Invocation) (queued, error) {
	if inv.Tool == "" {
		return queued{}, fmt.Errorf("invocation: tool: %w: no tool name", events.ErrBadKey)
	}
	toolID := events.QualifiedToolID(inv.Server, inv.Tool)
	if _, err := events.KeyToken(toolID); err != nil {
		return queued{}, fmt.Errorf("invocation: tool: %w", err)
	}
	p := events.Invocation{
		AgentID:           a.opts.AgentID,
		ToolID:            toolID,
		ToolVersion:       inv.ToolVersion,
		SchemaFingerprint: inv.SchemaFingerprint,
		UsedFields:        inv.UsedFields,
		OutputFieldsRead:  inv.OutputFieldsRead,
		Outcome:           inv.Outcome,
		WorkflowID:        inv.WorkflowID,
		TraceID:           inv.TraceID,
		SpanID:            inv.SpanID,
	}
	if p.SchemaFingerprint == "" {
		p.SchemaFingerprint = a.opts.Fingerprints[toolID]
	}
	if len(inv.Arguments) > 0 {
		ft, err := events.FieldTypesOf(inv.Arguments)
		if err != nil {
			return queued{}, fmt.Errorf("invocation of %s: arguments: %w", toolID, err)
		}
		p.ArgumentTypes = ft
	}
	if inv.Latency > 0 {
		ms := float64(inv.Latency) / float64(time.Millisecond)
		p.LatencyMS = &ms
	}
	at := inv.Time
	if at.IsZero() {
		at = time.Now()
	}
	return queued{p: p, at: at.UTC()}, nil
}

// send publishes the queue in batches until the queue is closed and empty,
// or Close's deadline aborts it.
func (a *Agent) send() {
	defer close(a.done)
	batch := make([]queued, 0, a.opts.BatchSize)
	futures := make([]jetstream.PubAckFuture, 0, a.opts.BatchSize)
	for {
		var (
			msg queued
			ok  bool
		)
		select {
		case msg, ok = <-a.queue:
		case <-a.abort:
			a.dropRemaining()
			return
		}
		if !ok {
			return
		}
		batch = append(batch[:0], msg)
	fill:
		for len(batch) < a.opts.BatchSize {
			select {
			case m, more := <-a.queue:
				if !more {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		futures = futures[:0]
		for _, q := range batch {
			m, err := a.opts.Names.NewInvocation(events.Meta{ID: events.NewID(), Source: a.opts.Source, Time: q.at}, q.p)
			if err != nil {
				a.invalid.Add(1)
				continue
			}
			f, err := a.js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data},
				jetstream.WithMsgID(m.ID), jetstream.WithStallWait(a.opts.Publisher.AckTimeout))
			if err != nil {
				a.failed.Add(1)
				continue
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
				a.published.Add(1)
			case <-f.Err():
				a.failed.Add(1)
			case <-a.abort:
				a.failed.Add(1)
			}
		}
	}
}

func (a *Agent) dropRemaining() {
	for {
		select {
		case _, ok := <-a.queue:
			if !ok {
				return
			}
			a.dropped.Add(1)
		default:
			return
		}
	}
}

// Stats returns the telemetry counters.
func (a *Agent) Stats() Stats {
	return Stats{
		Emitted:   a.emitted.Load(),
		Published: a.published.Load(),
		Dropped:   a.dropped.Load(),
		Failed:    a.failed.Load(),
		Invalid:   a.invalid.Load(),
		Queued:    len(a.queue),
	}
}

// Guard returns the arguments to send for a call of tool, the tool's id
// (events.QualifiedToolID(server, name) for a server's tool, as its
// invocations carry it): payload itself
// when the directive in force says PROCEED (or there is none), payload
// rewritten by the migration when it says MIGRATE, or a *HaltError (with
// the directive, its verdict and manifest digest) when it says HALT or the
// payload cannot be migrated. It answers from the local view, with no
// round trip; Decide gives the directive and the view's staleness too. Its
// signature is that of a call hook:
//
//	func(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)
func (a *Agent) Guard(ctx context.Context, tool string, payload json.RawMessage) (json.RawMessage, error) {
	dec, err := a.Decide(ctx, tool, payload)
	if err != nil {
		return nil, err
	}
	return dec.Arguments, nil
}

// Decide is Guard with the whole decision: the arguments, the directive in
// force and the view's staleness.
func (a *Agent) Decide(ctx context.Context, tool string, payload json.RawMessage) (Decision, error) {
	return a.view.Guard(ctx, a.opts.AgentID, tool, payload, GuardOptions{Fingerprint: a.opts.Fingerprints[tool]})
}

// Listed tells the client that the agent has just been shown tool (a
// tools/list entry) under the id toolID, before its next call: when serve
// has not judged that version yet (a silent upgrade), the client judges it
// itself against the tool's baseline and the agent's recorded surface, as
// serve will, and Guard answers by that local directive until serve's
// arrives. See DirectiveView.Listed.
func (a *Agent) Listed(toolID string, tool events.MCPTool) (*events.Directive, error) {
	return a.view.Listed(toolID, tool)
}

// Workflow returns the current verdict and directive of a composition
// before the agent runs it: a *HaltError with the directive when it says
// HALT (degraded, incompatible), ErrNoDirective when it has no verdict yet.
func (a *Agent) Workflow(ctx context.Context, compositionID string) (events.Directive, error) {
	return a.view.Workflow(ctx, a.opts.AgentID, compositionID)
}

// Staleness reports how current the agent's view of its directives is.
func (a *Agent) Staleness() Staleness { return a.view.Staleness() }

// Close stops accepting invocations, publishes what is queued until ctx
// ends (what is left then is dropped and counted), and stops the view. It
// returns an error when invocations were dropped or failed at close. It is
// idempotent.
func (a *Agent) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		before := a.Stats()
		a.mu.Lock()
		a.closed = true
		close(a.queue)
		a.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			close(a.abort)
			<-a.done
		}
		a.view.Close()
		after := a.Stats()
		if lost := (after.Dropped - before.Dropped) + (after.Failed - before.Failed); lost > 0 {
			a.closeErr = fmt.Errorf("%w: %d invocations not published at close", publisher.ErrNotAcked, lost)
		}
	})
	return a.closeErr
}
