package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// State is what the core reads. Records it returns are the store's: the
// core never modifies them, it writes changed copies through Effects. All
// lists are sorted (by agent, by composition) so that the core's output
// does not depend on map order.
type State interface {
	Baseline(toolID string) (*BaselineRecord, bool)
	Usage(toolID, agentID string) (*UsageRecord, bool)
	// UsageOfTool returns every agent's usage of the tool, by agent id.
	UsageOfTool(toolID string) []*UsageRecord
	Quality(toolID string) (*QualityRecord, bool)
	Outcomes(toolID string) (*OutcomeRecord, bool)
	Workflow(compositionID string) (*WorkflowRecord, bool)
	// WorkflowsUsing returns the workflows whose structure calls the tool,
	// by composition id.
	WorkflowsUsing(toolID string) []*WorkflowRecord
}

// Input is one telemetry event as the stream delivered it.
type Input struct {
	Event   events.Event
	Subject string
	Seq     uint64 // stream sequence: what makes a redelivery recognisable
}

// Write is one state change: the record to store under its ids.
type Write struct {
	Bucket Bucket
	IDs    []string // the record's ids: [tool], [tool, agent] or [composition]
	Record any      // *BaselineRecord, *UsageRecord, *QualityRecord, *OutcomeRecord or *WorkflowRecord
	// Deferred says the record may stay in the shell's memory instead of
	// being stored now: it can be rebuilt from the telemetry stream (an
	// outcome record that only counted one more invocation; see
	// OutcomeRecord.Count). The shell must store the record before it
	// forgets it, or rebuild it from the last stored one.
	Deferred bool
	// Delete says the record under IDs is deleted (Record is nil): an
	// operator's reset of a baseline or forgetting of an agent's usage.
	Delete bool
}

// Effects are what applying one input does: verdicts and telemetry to
// publish, then state to write. A shell publishes the messages first and
// writes the state after their acknowledgement, so that a crash in between
// repeats the same messages (same ids: the streams drop them) rather than
// losing them.
type Effects struct {
	Verdicts []events.Message
	// Telemetry are inputs for another lane (quality checkpoints), to
	// publish on the telemetry stream. A replay ignores them: it reads the
	// recorded ones from the stream.
	Telemetry []events.Message
	Writes    []Write
}

// Options tune the core. Zero fields take defaults.
type Options struct {
	// Names are the subjects and buckets (default: prefix toolsentry).
	Names events.Names
	// QualityEvery re-evaluates the workflows that use a tool after this
	// many counted outcomes of the tool (default 100), so measured quality
	// reaches composition verdicts without evaluating them on every call.
	QualityEvery int64
}

// Core applies telemetry to state. It is deterministic: the same state and
// input give the same effects. It is safe for concurrent use by inputs of
// different keys; its only memory is a cache of parsed tool definitions,
// keyed by content.
type Core struct {
	opts Options

	mu    sync.Mutex
	defs  map[string]map[string]*parsedTool // by version, then raw tool JSON
	ndefs int                               // entries in defs
	// drifts are the diffs of pairs of cached versions of a tool: a drift
	// is diffed once and judged for every agent from the one diff.
	drifts map[driftKey]*toolschema.Drift
}

// driftKey names the diff of a tool's old version against its new one.
type driftKey struct {
	toolID   string
	old, new *parsedTool
}

// maxCachedDrifts bounds the cache of diffs.
const maxCachedDrifts = 1024

// parsedTool is a cached tool version: its definition and, once asked for,
// its fingerprint and the digest of its Tool fields outside it.
type parsedTool struct {
	def toolschema.ToolDefinition

	once        sync.Once
	fingerprint string
	toolFields  string
	err         error
}

// hash computes the entry's fingerprint and tool fields digest, once.
func (p *parsedTool) hash() {
	p.once.Do(func() {
		if p.fingerprint, p.err = toolschema.Fingerprint(p.def); p.err == nil {
			p.toolFields, p.err = toolschema.ToolFieldsDigest(p.def)
		}
	})
}

// maxCachedDefs bounds the cache of parsed tool definitions.
const maxCachedDefs = 4096

// New returns a core with the options' defaults filled in.
func New(opts Options) *Core {
	if opts.QualityEvery <= 0 {
		opts.QualityEvery = 100
	}
	return &Core{opts: opts, defs: map[string]map[string]*parsedTool{}, drifts: map[driftKey]*toolschema.Drift{}}
}

// ErrUnsupported is returned for an input the core does not consume (a
// verdict published on a telemetry subject, say): bad input, never retried.
var ErrUnsupported = errors.New("not a telemetry event")

// Apply decides what one input does. An error wrapping events' or guards'
// sentinel errors is bad input (dead-letter it); the core has no transient
// errors of its own.
func (c *Core) Apply(st State, in Input) (Effects, error) {
	ev := in.Event
	if afterOperator(st, in) {
		return Effects{}, nil // applied before the tool's last operator action (operator.go)
	}
	switch {
	case ev.Operator != nil:
		return c.applyOperator(st, in)
	case ev.SchemaObserved != nil:
		return c.applySchema(st, in)
	case ev.Invocation != nil:
		return c.applyInvocation(st, in)
	case ev.Contract != nil:
		return c.applyContract(st, in)
	case ev.Workflow != nil:
		return c.applyWorkflow(st, in)
	case ev.QualityCheckpoint != nil:
		return c.applyCheckpoint(st, in)
	case ev.WorkflowObserved != nil:
		return c.applyObserved(st, in)
	}
	return Effects{}, fmt.Errorf("%w: %s", ErrUnsupported, ev.Type)
}

// definition parses (and caches) a tool version's MCP Tool object.
func (c *Core) definition(v ToolVersion) (toolschema.ToolDefinition, error) {
	p, err := c.parsed(v)
	if err != nil {
		return toolschema.ToolDefinition{}, err
	}
	return p.def, nil
}

// fingerprinted returns a tool version's definition and its fingerprint
// (toolschema.Fingerprint), both cached: an observation of a known version
// neither parses nor hashes it again.
func (c *Core) fingerprinted(v ToolVersion) (toolschema.ToolDefinition, string, error) {
	p, err := c.parsed(v)
	if err != nil {
		return toolschema.ToolDefinition{}, "", err
	}
	p.hash()
	return p.def, p.fingerprint, p.err
}

// toolFields returns the digest of a tool version's Tool fields outside
// its fingerprint (toolschema.ToolFieldsDigest: _meta, icons), cached.
func (c *Core) toolFields(v ToolVersion) (string, error) {
	p, err := c.parsed(v)
	if err != nil {
		return "", err
	}
	p.hash()
	return p.toolFields, p.err
}

// evaluateDrift is toolschema.EvaluateDrift of two tool versions' definitions
// (their ids set to the tool's), from the diff of the two versions that
// the cache keeps with their fingerprints: the versions are diffed once,
// not per agent and per observation. A version that the cache cannot
// fingerprint, or a diff that fails, is left to EvaluateDrift, to fail
// alike.
func (c *Core) evaluateDrift(oldV ToolVersion, old toolschema.ToolDefinition, newV ToolVersion, new toolschema.ToolDefinition, surface toolschema.UsedSurface) (toolschema.DriftReport, error) {
	po, oerr := c.parsed(oldV)
	pn, nerr := c.parsed(newV)
	if oerr != nil || nerr != nil {
		return toolschema.EvaluateDrift(old, new, surface)
	}
	_, oldFP, oerr := c.fingerprinted(oldV)
	_, newFP, nerr := c.fingerprinted(newV)
	if oerr != nil || nerr != nil || old.ID != new.ID {
		return toolschema.EvaluateDrift(old, new, surface)
	}
	key := driftKey{toolID: new.ID, old: po, new: pn}
	c.mu.Lock()
	d, ok := c.drifts[key]
	c.mu.Unlock()
	if !ok {
		var err error
		if d, err = toolschema.NewDrift(old, new, oldFP, newFP); err != nil {
			return toolschema.EvaluateDrift(old, new, surface)
		}
		c.mu.Lock()
		if len(c.drifts) >= maxCachedDrifts {
			clear(c.drifts)
		}
		c.drifts[key] = d
		c.mu.Unlock()
	}
	return d.Evaluate(surface)
}

// parsed returns the cache entry of a tool version, parsing it on a miss.
// The lookup allocates nothing: the key is the version, then the raw JSON.
func (c *Core) parsed(v ToolVersion) (*parsedTool, error) {
	c.mu.Lock()
	p, ok := c.defs[v.Version][string(v.Tool)]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	defs, err := toolschema.ParseToolDocument(v.Tool)
	if err != nil {
		return nil, err
	}
	if len(defs) != 1 {
		return nil, fmt.Errorf("%w: a tool version holds %d tools", guards.ErrInvalid, len(defs))
	}
	p = &parsedTool{def: defs[0]}
	p.def.Version = v.Version
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.defs[v.Version][string(v.Tool)]; ok {
		return q, nil // parsed meanwhile by another key's input
	}
	if c.ndefs >= maxCachedDefs { // a bound, not an LRU: parsing again is only slower
		clear(c.defs)
		clear(c.drifts) // their versions are no longer the cache's
		c.ndefs = 0
	}
	byRaw := c.defs[v.Version]
	if byRaw == nil {
		byRaw = map[string]*parsedTool{}
		c.defs[v.Version] = byRaw
	}
	byRaw[string(v.Tool)] = p
	c.ndefs++
	return p, nil
}

// meta is what every verdict records of its input.
func verdictInput(in Input) (eventID, subject string, seq uint64) {
	return in.Event.ID, in.Subject, in.Seq
}

func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("core: marshalling %T: %v", v, err)) // our own types always marshal
	}
	return b
}

func cloneBaseline(r *BaselineRecord) *BaselineRecord {
	c := *r
	c.Known = slices.Clone(r.Known)
	return &c
}

func cloneUsage(r *UsageRecord) *UsageRecord {
	c := *r
	c.Input = make(map[string][]string, len(r.Input))
	for k, v := range r.Input {
		c.Input[k] = slices.Clone(v)
	}
	c.Output = slices.Clone(r.Output)
	c.Notified = slices.Clone(r.Notified)
	c.Omitted = slices.Clone(r.Omitted)
	return &c
}

func cloneQuality(r *QualityRecord) *QualityRecord {
	c := *r
	if r.Contract != nil {
		k := *r.Contract
		c.Contract = &k
	}
	return &c
}

func cloneOutcomes(r *OutcomeRecord) *OutcomeRecord {
	c := *r
	return &c
}

func cloneWorkflow(r *WorkflowRecord) *WorkflowRecord {
	c := *r
	c.Tools = slices.Clone(r.Tools)
	if r.Last != nil {
		l := *r.Last
		c.Last = &l
	}
	return &c
}

// CompositionLane is the ordering key of every input that composition
// verdicts depend on: contracts, workflow declarations, quality
// checkpoints and observed runs (see OrderingKey). It cannot collide with a tool's key: keys
// are subject tokens, which never hold a space.
//
// The lanes own their records: a tool's lane alone writes the tool's
// baseline, usage and outcome records; the composition lane alone writes
// quality and workflow records and publishes composition verdicts. So one
// writer produces each verdict key's verdicts, in stream order, and a
// replay that applies the stream in order reads the state the live worker
// read.
const CompositionLane = "composition lane"

// OrderingKey returns the key whose events must be applied in stream order
// with this one, from the telemetry subject's kind and key tokens:
// contracts, workflows, quality checkpoints and observed runs share
// CompositionLane, every other kind is ordered by its subject key (the tool).
func OrderingKey(kindToken, keyToken string) string {
	switch kindToken {
	case "contract", "workflow", "quality", "observed":
		return CompositionLane
	}
	return keyToken
}
