package events

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// Event is one decoded CloudEvent: its attributes, the key of the subject it
// arrived on, and exactly one payload, the one that Kind names.
type Event struct {
	Kind       Kind
	ID         string
	Source     string
	Type       string
	Time       time.Time         // in UTC; zero when the event has no time
	Subject    string            // the CloudEvents subject attribute; "" when absent
	DataSchema string            // the dataschema attribute; "" when absent
	Extensions map[string]string // extension attributes, canonical string form; nil when none
	Key        string            // the subject's key: tool, server or composition id

	SchemaObserved     *SchemaObserved
	Invocation         *Invocation
	Contract           *Contract
	Workflow           *Workflow
	QualityCheckpoint  *QualityCheckpoint
	SchemaVerdict      *SchemaVerdict
	CompositionVerdict *CompositionVerdict
	WorkflowObserved   *WorkflowObserved
	// Operator is the payload of the four operator kinds (Kind says which).
	Operator *OperatorAction
}

// SchemaObserved is the data of TypeSchemaObserved: one tool (Tool set,
// Tools nil; the key is ToolID) or a tools/list result (Tool nil, Tools
// non-nil; the key is Server).
type SchemaObserved struct {
	ToolID     string    // one tool
	Version    string    // one tool
	Server     string    // optional with one tool, required with a list
	Tool       *MCPTool  // one tool
	Tools      []MCPTool // a tools/list result: its tools, names unique
	NextCursor string    // a tools/list result: set when the list is only one page
}

// IsList reports whether s is a tools/list result rather than one tool.
func (s *SchemaObserved) IsList() bool { return s.Tool == nil }

// MCPTool is an MCP Tool object. The schemas and annotations are kept as
// canonical JSON (keys sorted); members this contract does not name are
// kept in Other, so nothing a server sends is lost.
type MCPTool struct {
	Name         string
	Title        string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage            // nil when absent
	Annotations  json.RawMessage            // nil when absent
	Meta         json.RawMessage            // _meta; nil when absent
	Other        map[string]json.RawMessage // nil when none
}

// MarshalJSON writes the MCP wire form: one object, its members sorted by
// name, the named fields over members of Other of the same name, strings
// without HTML escaping, raw values compacted.
func (t MCPTool) MarshalJSON() ([]byte, error) {
	return t.appendJSON(make([]byte, 0, 256+len(t.InputSchema)+len(t.OutputSchema)+len(t.Annotations)), false)
}

// Invocation is the data of TypeInvocation. It never holds argument
// values: the decoder turns "arguments" into ArgumentTypes and drops the
// values at once.
type Invocation struct {
	AgentID           string     `json:"agent_id"`
	ToolID            string     `json:"tool_id"`
	ToolVersion       string     `json:"tool_version,omitempty"`
	SchemaFingerprint string     `json:"schema_fingerprint,omitempty"`
	ArgumentTypes     FieldTypes `json:"argument_types,omitzero"`
	UsedFields        []string   `json:"used_fields,omitzero"`
	OutputFieldsRead  []string   `json:"output_fields_read,omitzero"`
	Outcome           *Outcome   `json:"outcome,omitempty"`
	TraceID           string     `json:"trace_id,omitempty"`
	SpanID            string     `json:"span_id,omitempty"`
	ParentSpanID      string     `json:"parent_span_id,omitempty"`
	WorkflowID        string     `json:"workflow_id,omitempty"`
	LatencyMS         *float64   `json:"latency_ms,omitempty"`
}

// Fields returns the input paths the agent sent: the paths of
// ArgumentTypes and UsedFields, sorted, without repeats.
func (inv *Invocation) Fields() []string {
	out := make([]string, 0, len(inv.ArgumentTypes)+len(inv.UsedFields))
	for p := range inv.ArgumentTypes {
		out = append(out, p)
	}
	out = append(out, inv.UsedFields...)
	sort.Strings(out)
	return slices.Compact(out)
}

// Outcome is how an invocation ended.
type Outcome struct {
	Status    string `json:"status"` // "ok" or "error"
	ErrorType string `json:"error_type,omitempty"`
	Correct   *bool  `json:"correct,omitempty"`
}

// FieldTypes maps a field path to the JSON types seen there. Paths are
// written as guards' schema diff writes them: property names from the root
// joined by '.', "[]" for array items, and . [ ] \ ( ) | * inside a name
// escaped with '\' ("user_id", "options.limit", "items[]", "items[].id",
// "a\.b" for the key "a.b"). Containers have a path too ("options" is an
// object).
type FieldTypes map[string]toolschema.TypeSet

// MarshalJSON writes each path's type as a JSON Schema type name, or an
// array of names when several were seen.
func (f FieldTypes) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(f))
	for p, t := range f {
		names := t.Names()
		if len(names) == 1 {
			m[p] = names[0]
		} else {
			m[p] = names
		}
	}
	return marshalJSON(m)
}

// Leaves returns the paths of leaves, sorted: scalars, and objects and
// arrays with no member or item recorded below them. It is
// toolschema.SurfaceFromArguments of the arguments the types were read from (the
// input surface the agent used), except for a container that was empty in
// one place and not in another (items [[1], []]): guards lists it as a leaf
// too, and Leaves cannot, since types do not say that one was empty; its
// children are listed either way.
func (f FieldTypes) Leaves() []string {
	var out []string
	for p, t := range f {
		if t&(toolschema.TypeObject|toolschema.TypeArray) == 0 || !f.hasChildren(p, t) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// hasChildren reports whether a container path has members or items
// recorded. A path seen both as an empty and as a non-empty container
// counts as having children.
func (f FieldTypes) hasChildren(p string, t toolschema.TypeSet) bool {
	if t&toolschema.TypeArray != 0 {
		if _, ok := f[toolschema.ItemsPath(p)]; ok {
			return true
		}
	}
	if t&toolschema.TypeObject != 0 {
		prefix := p + "."
		for q := range f {
			if strings.HasPrefix(q, prefix) {
				return true
			}
		}
	}
	return false
}

// Paths returns the paths, sorted.
func (f FieldTypes) Paths() []string {
	out := make([]string, 0, len(f))
	for p := range f {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Contract is the data of TypeContract.
type Contract struct {
	ToolID                  string  `json:"tool_id"`
	Accuracy                float64 `json:"accuracy"`
	Determinism             string  `json:"determinism"`
	OutputSchemaHash        string  `json:"output_schema_hash,omitempty"`
	ExpectedInputSchemaHash string  `json:"expected_input_schema_hash,omitempty"`
}

// ToolQuality returns the contract as the composition guard takes it.
func (c *Contract) ToolQuality() guards.ToolQuality {
	return guards.ToolQuality{
		ToolID:                  c.ToolID,
		Accuracy:                c.Accuracy,
		Determinism:             c.Determinism,
		OutputSchemaHash:        c.OutputSchemaHash,
		ExpectedInputSchemaHash: c.ExpectedInputSchemaHash,
	}
}

// QualityCheckpoint is the data of TypeQualityCheckpoint: what the tool's
// lane knew of the tool at its input at stream sequence ThroughSequence:
// the outcome counts and, when the observed schema changed there, the new
// version's fingerprint and schemas (nil when absent).
type QualityCheckpoint struct {
	ToolID          string          `json:"tool_id"`
	Calls           int64           `json:"calls"`
	Successes       int64           `json:"successes"`
	ThroughSequence uint64          `json:"through_sequence"`
	Fingerprint     string          `json:"fingerprint,omitempty"`
	InputSchema     json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema    json.RawMessage `json:"output_schema,omitempty"`
}

// Workflow is the data of TypeWorkflow. Raw is the whole workflow object as
// canonical JSON (keys sorted), for workflow.ParseWorkflow; its shape has been
// validated against the workflow.declared.v1 schema, its meaning has not.
type Workflow struct {
	CompositionID string
	Raw           json.RawMessage
}

// SchemaVerdict is the data of TypeSchemaVerdict. Changes, Affected and
// Migration are the schema diff's values as JSON; nil stands for null.
// Action and Summary say what the verdict tells its agent to do
// (Describe); verdicts written before they existed lack them ("").
type SchemaVerdict struct {
	Verdict             guards.SchemaVerdict `json:"verdict"`
	Directive           string               `json:"directive"`
	Action              guards.Action        `json:"action,omitempty"`
	Summary             string               `json:"summary,omitempty"`
	ManifestDigest      string               `json:"manifest_digest"`
	ToolID              string               `json:"tool_id"`
	AgentID             string               `json:"agent_id,omitempty"`
	Version             string               `json:"version"`
	BaselineFingerprint string               `json:"baseline_fingerprint"`
	CurrentFingerprint  string               `json:"current_fingerprint"`
	Changes             json.RawMessage      `json:"changes"`
	Affected            json.RawMessage      `json:"affected"`
	Migration           json.RawMessage      `json:"migration"`
	GuardVersion        string               `json:"guard_version"`
	InputEventID        string               `json:"input_event_id"`
	InputSubject        string               `json:"input_subject"`
	InputSequence       uint64               `json:"input_sequence"`
}

// CompositionVerdict is the data of TypeCompositionVerdict. Action and
// Summary are as for SchemaVerdict.
type CompositionVerdict struct {
	Verdict              guards.CompositionVerdict `json:"verdict"`
	Directive            string                    `json:"directive"`
	Action               guards.Action             `json:"action,omitempty"`
	Summary              string                    `json:"summary,omitempty"`
	ManifestDigest       string                    `json:"manifest_digest"`
	CompositionID        string                    `json:"composition_id"`
	ComposedQuality      float64                   `json:"composed_quality"`
	ComposedQualityLower *float64                  `json:"composed_quality_lower,omitempty"`
	ComposedQualityUpper *float64                  `json:"composed_quality_upper,omitempty"`
	Confidence           workflow.Confidence       `json:"confidence,omitempty"`    // CONFIRMED or INCONCLUSIVE; "" when absent
	FailureModes         json.RawMessage           `json:"failure_modes,omitempty"` // a JSON array; nil when absent
	Observed             *workflow.ObservedQuality `json:"observed,omitempty"`      // at an observed-runs checkpoint
	GuardVersion         string                    `json:"guard_version"`
	InputEventID         string                    `json:"input_event_id"`
	InputSubject         string                    `json:"input_subject"`
	InputSequence        uint64                    `json:"input_sequence"`
}
