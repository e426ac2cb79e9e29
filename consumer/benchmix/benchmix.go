// Package benchmix generates the benchmark's event mix: a fleet of tools
// and agents whose schema observations, invocations, contracts and
// workflows exercise every verdict, deterministic for a seed, so that
// `toolsentry bench` and the runtime's Go benchmarks measure the same
// work. It is not part of the runtime's API.
package benchmix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// ErrInvalidOptions is matched (errors.Is) by the error of New for options
// it cannot build a mix from.
var ErrInvalidOptions = errors.New("invalid bench mix options")

// Options shape a Mix. Zero fields take defaults.
type Options struct {
	// Events is the number of events in the mix. Required.
	Events int
	// Tools is the number of tools observed (default Events/100, between
	// 10 and 1,000).
	Tools int
	// Agents is the number of agents invoking them (default 50).
	Agents int
	// Seed chooses the mix; the same options give the same events, byte
	// for byte (default 1).
	Seed uint64
	// IDPrefix starts every event id, followed by '-' and the event's
	// index in 12 digits (default "bench"). Letters, digits and '-'.
	IDPrefix string
	// Prefix is the subject prefix (default DefaultPrefix).
	Prefix string
}

// The mix's proportions, per mille of the events.
const (
	benchSchemaPerMille   = 80 // schema observations
	benchContractPerMille = 10 // quality contracts
	benchWorkflowPerMille = 5  // workflow declarations
	// the rest are invocations
)

// benchDriftEvery makes every benchDriftEvery-th tool drift from its third
// observation on.
const benchDriftEvery = 8

// Kind tokens of the mix's events, as in the telemetry subjects.
const (
	KindSchema     = "schema"
	KindInvocation = "invocation"
	KindContract   = "contract"
	KindWorkflow   = "workflow"
)

// Event is one telemetry event of a Mix, ready to publish with
// Header (which holds Nats-Msg-Id = ID). Data is the event's own copy.
type Event struct {
	Kind    string // KindSchema, KindInvocation, KindContract or KindWorkflow
	Subject string
	ID      string
	Header  nats.Header
	Data    []byte
}

// Counts are the events of a mix by kind.
type Counts struct {
	Schema, Invocation, Contract, Workflow int
}

// Mix is the synthetic telemetry of `toolsentry bench` and the
// pipeline benchmarks: what a fleet of agents sends, deterministic and
// generated as it is read, so that a run of a million events holds no more
// memory than one of a thousand.
//
//   - Schema observations (8%) go round the tools. The first observation of
//     a tool has no baseline, the second repeats it (counted, no verdict);
//     from the third on every
//     eighth tool has drifted: a required field renamed, a type changed, a
//     default flipped, or an optional field added that no agent uses.
//   - Invocations (about 90%) come from the agents, each calling its own
//     tools with arguments, of which only the field paths and JSON types are
//     sent (events.FieldTypesOf), and an outcome. Agents keep sending what
//     they integrated against, so drifted tools yield drift verdicts.
//   - Contracts (1%) declare the quality of the tools that workflows chain,
//     with an accuracy that changes every round; workflow declarations
//     (0.5%) chain two to five of those tools.
//
// The events are encoded once per distinct payload (a few thousand, by
// tool, agent and variant) when the mix is built; reading an event copies
// its payload and writes its id in. A Mix is safe for concurrent use.
type Mix struct {
	opts      Options
	slots     int          // tools per agent
	pool      []int        // the tools that contracts and workflows name
	schema    [][]benchTpl // by tool: base, drifted (drifting tools only)
	invoke    [][]benchTpl // by agent: slot × benchVariants
	contract  [][]benchTpl // by pool tool: accuracy variants
	workflow  [][]benchTpl // by composition: requirement variants
	zeroIndex string       // the 12 digits of the templates' ids
}

// benchTpl is an encoded event whose id holds zeroIndex at idAt.
type benchTpl struct {
	subject string
	header  nats.Header
	data    []byte
	idAt    int
}

// benchVariants are the argument variants of an agent's calls to one tool:
// the required field only, plus one optional field, plus all of them, and
// a failed call.
const benchVariants = 4

const benchIndexDigits = 12

// New builds the mix's templates.
func New(opts Options) (*Mix, error) {
	if opts.Events < 1 {
		return nil, fmt.Errorf("%w: bench mix of %d events: want at least 1", ErrInvalidOptions, opts.Events)
	}
	if opts.Tools == 0 {
		opts.Tools = min(1000, max(10, opts.Events/100))
	}
	if opts.Agents == 0 {
		opts.Agents = 50
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = "bench"
	}
	if opts.Prefix == "" {
		opts.Prefix = events.DefaultPrefix
	}
	if opts.Tools < 1 || opts.Agents < 1 {
		return nil, fmt.Errorf("%w: bench mix of %d tools and %d agents: want at least 1 of each", ErrInvalidOptions, opts.Tools, opts.Agents)
	}
	if strings.Trim(opts.IDPrefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
		return nil, fmt.Errorf("%w: bench id prefix %q: want letters, digits and '-'", ErrInvalidOptions, opts.IDPrefix)
	}
	names, err := events.NewNames(opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	m := &Mix{
		opts:      opts,
		slots:     min(opts.Tools, max(3, 2*opts.Tools/opts.Agents)),
		zeroIndex: strings.Repeat("0", benchIndexDigits),
	}
	poolSize := min(opts.Tools, max(5, opts.Tools/10))
	for p := range poolSize {
		m.pool = append(m.pool, p*opts.Tools/poolSize)
	}
	meta := events.Meta{
		ID:     opts.IDPrefix + "-" + m.zeroIndex,
		Source: "toolsentry/bench",
		Time:   time.Date(2026, 10, 3, 10, 0, 0, 0, time.UTC),
	}
	tools := make([]benchTool, opts.Tools)
	for t := range tools {
		tools[t] = newBenchTool(t, opts.Seed)
	}

	m.schema = make([][]benchTpl, opts.Tools)
	for t, tool := range tools {
		versions := []benchToolVersion{tool.base()}
		if tool.drift != benchNoDrift {
			versions = append(versions, tool.drifted())
		}
		for _, v := range versions {
			msg, err := names.NewSchemaObserved(meta, events.SchemaObserved{
				ToolID: tool.id, Version: v.version, Server: tool.server,
				Tool: &events.MCPTool{Name: tool.name, Description: tool.description, InputSchema: v.inputSchema},
			})
			if err != nil {
				return nil, fmt.Errorf("bench mix: tool %s: %w", tool.id, err)
			}
			if err := m.add(&m.schema[t], msg); err != nil {
				return nil, err
			}
		}
	}

	m.invoke = make([][]benchTpl, opts.Agents)
	for a := range opts.Agents {
		agent := fmt.Sprintf("agent-%02d", a)
		for s := range m.slots {
			tool := tools[m.toolOf(a, s)]
			for v := range benchVariants {
				args := tool.arguments(v)
				types, err := events.FieldTypesOf(args)
				if err != nil {
					return nil, fmt.Errorf("bench mix: arguments of %s: %w", tool.id, err)
				}
				outcome := &events.Outcome{Status: "ok"}
				if v == benchVariants-1 {
					outcome = &events.Outcome{Status: "error", ErrorType: "timeout"}
				}
				latency := float64(20 + (a*7+s*13+v*31)%400)
				trace := benchHash(opts.Seed, uint64(a)<<32|uint64(s)<<8|uint64(v))
				msg, err := names.NewInvocation(meta, events.Invocation{
					AgentID: agent, ToolID: tool.id, ToolVersion: "1",
					ArgumentTypes: types, Outcome: outcome, LatencyMS: &latency,
					TraceID: fmt.Sprintf("%016x%016x", trace, ^trace),
				})
				if err != nil {
					return nil, fmt.Errorf("bench mix: invocation of %s: %w", tool.id, err)
				}
				if err := m.add(&m.invoke[a], msg); err != nil {
					return nil, err
				}
			}
		}
	}

	m.contract = make([][]benchTpl, len(m.pool))
	for p, t := range m.pool {
		det := guards.Deterministic
		if p%5 == 4 {
			det = guards.NonDeterministic
		}
		for _, acc := range []float64{0.99, 0.98, 0.97} {
			msg, err := names.NewContract(meta, events.Contract{
				ToolID: tools[t].id, Accuracy: acc, Determinism: det,
				OutputSchemaHash: "sha256:bench", ExpectedInputSchemaHash: "sha256:bench",
			})
			if err != nil {
				return nil, fmt.Errorf("bench mix: contract of %s: %w", tools[t].id, err)
			}
			if err := m.add(&m.contract[p], msg); err != nil {
				return nil, err
			}
		}
	}

	compositions := max(2, opts.Tools/50)
	m.workflow = make([][]benchTpl, compositions)
	for w := range compositions {
		chain := make([]string, 0, 5)
		for k := range min(2+w%4, len(m.pool)) {
			chain = append(chain, tools[m.pool[(w*3+k)%len(m.pool)]].id)
		}
		for _, req := range []float64{0.9, 0.85} {
			wf, err := json.Marshal(map[string]any{
				"composition_id":                            fmt.Sprintf("workflow-%03d", w),
				"workflow_quality_requirement":              req,
				"introduction_of_nondeterminism_acceptable": w%3 == 0,
				"policy":    map[string]any{"require_schema_compatibility": true},
				"structure": map[string]any{"chain": chain},
			})
			if err != nil {
				return nil, err
			}
			msg, err := names.NewWorkflow(meta, wf)
			if err != nil {
				return nil, fmt.Errorf("bench mix: workflow %d: %w", w, err)
			}
			if err := m.add(&m.workflow[w], msg); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Mix) add(to *[]benchTpl, msg events.Message) error {
	at := bytes.Index(msg.Data, []byte(`"id":"`+msg.ID+`"`))
	if at < 0 {
		return fmt.Errorf("bench mix: id %s not found in the encoded event", msg.ID)
	}
	*to = append(*to, benchTpl{
		subject: msg.Subject,
		header:  nats.Header(msg.Header),
		data:    msg.Data,
		idAt:    at + len(`"id":"`) + len(m.opts.IDPrefix) + 1,
	})
	return nil
}

// Options returns the options with their defaults filled in.
func (m *Mix) Options() Options { return m.opts }

// Len is the number of events.
func (m *Mix) Len() int { return m.opts.Events }

// toolOf is the tool of an agent's slot: agent a uses the Tools/Agents×2
// tools from a×slots on, so that every tool has about two agents.
func (m *Mix) toolOf(agent, slot int) int {
	return (agent*m.slots + slot) % m.opts.Tools
}

// kindOf is the kind of the i-th event.
func (m *Mix) kindOf(i int) string {
	switch r := benchHash(m.opts.Seed, uint64(i)) % 1000; {
	case r < benchSchemaPerMille:
		return KindSchema
	case r < benchSchemaPerMille+benchContractPerMille:
		return KindContract
	case r < benchSchemaPerMille+benchContractPerMille+benchWorkflowPerMille:
		return KindWorkflow
	}
	return KindInvocation
}

// FirstPassEnd is the index of the event that follows the mix's first
// observation of its last tool: from there on every tool has been observed
// once. It is Len when the mix ends before.
func (m *Mix) FirstPassEnd() int {
	seen := 0
	for i := range m.opts.Events {
		if m.kindOf(i) == KindSchema {
			if seen++; seen == m.opts.Tools {
				return i + 1
			}
		}
	}
	return m.opts.Events
}

// Counts returns the number of events of each kind.
func (m *Mix) Counts() Counts {
	var c Counts
	for i := range m.opts.Events {
		switch m.kindOf(i) {
		case KindSchema:
			c.Schema++
		case KindContract:
			c.Contract++
		case KindWorkflow:
			c.Workflow++
		default:
			c.Invocation++
		}
	}
	return c
}

// All yields the events in order with their index. Each call starts over;
// separate iterations may run concurrently.
func (m *Mix) All() iter.Seq2[int, Event] {
	return func(yield func(int, Event) bool) {
		var schemas, contracts, workflows int
		for i := range m.opts.Events {
			var tpl benchTpl
			kind := m.kindOf(i)
			switch kind {
			case KindSchema:
				tool, round := schemas%m.opts.Tools, schemas/m.opts.Tools
				schemas++
				versions := m.schema[tool]
				tpl = versions[min(len(versions)-1, max(0, round-1))] // drifted from the third observation
			case KindContract:
				p, round := contracts%len(m.pool), contracts/len(m.pool)
				contracts++
				tpl = m.contract[p][round%len(m.contract[p])]
			case KindWorkflow:
				w, round := workflows%len(m.workflow), workflows/len(m.workflow)
				workflows++
				tpl = m.workflow[w][round%len(m.workflow[w])]
			default:
				h := benchHash(m.opts.Seed^0x9e3779b97f4a7c15, uint64(i))
				agent := int(h % uint64(m.opts.Agents))
				slot := int((h >> 16) % uint64(m.slots))
				tpl = m.invoke[agent][slot*benchVariants+benchVariant(h>>32)]
			}
			if !yield(i, m.event(kind, tpl, i)) {
				return
			}
		}
	}
}

// benchVariant picks an argument variant: mostly the required field only,
// one call in twenty fails.
func benchVariant(h uint64) int {
	switch r := h % 20; {
	case r < 10:
		return 0
	case r < 16:
		return 1
	case r < 19:
		return 2
	}
	return 3
}

func (m *Mix) event(kind string, tpl benchTpl, i int) Event {
	data := bytes.Clone(tpl.data)
	digits := strconv.AppendInt(make([]byte, 0, benchIndexDigits), int64(i), 10)
	copy(data[tpl.idAt+benchIndexDigits-len(digits):], digits)
	id := string(data[tpl.idAt-len(m.opts.IDPrefix)-1 : tpl.idAt+benchIndexDigits])
	h := make(nats.Header, len(tpl.header))
	for k, v := range tpl.header {
		h[k] = slices.Clone(v)
	}
	h[events.HeaderMsgID] = []string{id}
	return Event{Kind: kind, Subject: tpl.subject, ID: id, Header: h, Data: data}
}

// Index returns the index of the mix's event with the given id.
func (m *Mix) Index(eventID string) (int, bool) {
	rest, ok := strings.CutPrefix(eventID, m.opts.IDPrefix+"-")
	if !ok || len(rest) != benchIndexDigits {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= m.opts.Events {
		return 0, false
	}
	return i, true
}

// benchHash is splitmix64 of seed and i: the mix's only source of choice.
func benchHash(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// benchField is a property a bench tool may declare, with the schema and
// an argument value of its type.
type benchField struct {
	name   string
	schema map[string]any
	arg    any
}

var benchFields = []benchField{
	{"query", map[string]any{"type": "string", "description": "What to look for."}, "acme"},
	{"user_id", map[string]any{"type": "string", "description": "The user's id."}, "u-1234"},
	{"path", map[string]any{"type": "string"}, "/var/data/report.csv"},
	{"limit", map[string]any{"type": "integer", "default": 10}, 25},
	{"include_deleted", map[string]any{"type": "boolean", "default": false}, true},
	{"threshold", map[string]any{"type": "number"}, 0.75},
	{"tags", map[string]any{"type": "array", "items": map[string]any{"type": "string"}}, []any{"a", "b"}},
	{"options", map[string]any{"type": "object", "properties": map[string]any{"page": map[string]any{"type": "integer"}, "sort": map[string]any{"type": "string", "enum": []any{"asc", "desc"}}}}, map[string]any{"page": 2, "sort": "asc"}},
	{"timeout_ms", map[string]any{"type": "integer", "minimum": 0}, 1500},
	{"format", map[string]any{"type": "string", "enum": []any{"json", "csv"}, "default": "json"}, "csv"},
	{"dry_run", map[string]any{"type": "boolean", "default": false}, false},
	{"region", map[string]any{"type": "string"}, "eu-west-1"},
}

// benchDrift is how a drifting tool changed.
type benchDrift int

const (
	benchNoDrift      benchDrift = iota
	benchRename                  // the required field renamed (the seed's silent rename)
	benchTypeChange              // limit: integer → string
	benchDefaultShift            // include_deleted: default false → true
	benchAddedUnused             // an optional field nobody sends
)

// benchTool is one synthetic tool: a required string field and a few
// optional ones.
type benchTool struct {
	id, server, name, description string
	required                      int   // index into benchFields
	optional                      []int // indexes into benchFields
	drift                         benchDrift
}

type benchToolVersion struct {
	version     string
	inputSchema json.RawMessage
}

func newBenchTool(t int, seed uint64) benchTool {
	h := benchHash(seed^0x5bd1e995, uint64(t))
	tool := benchTool{
		id:          fmt.Sprintf("svc%02d.tool%04d", t%20, t),
		server:      fmt.Sprintf("svc%02d", t%20),
		name:        fmt.Sprintf("tool%04d", t),
		description: fmt.Sprintf("Tool %d of service %d: looks things up and returns a page of results.", t, t%20),
		required:    int(h % 3), // query, user_id or path
	}
	if t%benchDriftEvery == benchDriftEvery/2 {
		tool.drift = benchDrift(1 + (t/benchDriftEvery)%4)
	}
	n := 2 + int(h>>8)%4
	for k := 0; len(tool.optional) < n && k < len(benchFields); k++ {
		f := 3 + (int(h>>16)+k*5)%(len(benchFields)-4) // never region: the added field
		if !containsInt(tool.optional, f) {
			tool.optional = append(tool.optional, f)
		}
	}
	for _, need := range []struct {
		drift benchDrift
		field int
	}{{benchTypeChange, 3}, {benchDefaultShift, 4}} {
		if tool.drift == need.drift && !containsInt(tool.optional, need.field) {
			tool.optional = append([]int{need.field}, tool.optional...)
		}
	}
	return tool
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (t benchTool) schema(drift benchDrift) json.RawMessage {
	props := map[string]any{}
	req := benchFields[t.required].name
	if drift == benchRename {
		req = benchCamel(req)
	}
	props[req] = benchFields[t.required].schema
	for _, f := range t.optional {
		field := benchFields[f]
		s := field.schema
		switch {
		case drift == benchTypeChange && field.name == "limit":
			s = map[string]any{"type": "string", "default": "10"}
		case drift == benchDefaultShift && field.name == "include_deleted":
			s = map[string]any{"type": "boolean", "default": true}
		}
		props[field.name] = s
	}
	if drift == benchAddedUnused {
		props["region"] = benchFields[len(benchFields)-1].schema
	}
	raw, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": []string{req}})
	if err != nil {
		panic(fmt.Sprintf("benchmix: tool schema: %v", err)) // maps of strings, numbers and slices always marshal
	}
	return raw
}

func (t benchTool) base() benchToolVersion {
	return benchToolVersion{version: "1", inputSchema: t.schema(benchNoDrift)}
}

func (t benchTool) drifted() benchToolVersion {
	return benchToolVersion{version: "2", inputSchema: t.schema(t.drift)}
}

// arguments are a call's arguments as the agent integrated them (against
// version 1): variant 0 sends the required field, 1 adds the first
// optional field, 2 and 3 send every field.
func (t benchTool) arguments(variant int) []byte {
	args := map[string]any{benchFields[t.required].name: benchFields[t.required].arg}
	for k, f := range t.optional {
		if variant == 0 || (variant == 1 && k > 0) {
			break
		}
		args[benchFields[f].name] = benchFields[f].arg
	}
	raw, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("benchmix: arguments: %v", err))
	}
	return raw
}

// benchCamel renames user_id to userId, query to queryText.
func benchCamel(s string) string {
	head, tail, ok := strings.Cut(s, "_")
	if !ok {
		return s + "Text"
	}
	return head + strings.ToUpper(tail[:1]) + tail[1:]
}
