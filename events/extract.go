package events

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// Limits on the arguments of an invocation, so that one event cannot make
// the decoder build an unbounded list of paths.
const (
	MaxArgumentFields = 1000 // distinct paths, arguments and argument_types together
	MaxArgumentDepth  = 32   // nesting of objects and arrays
	MaxFieldPathLen   = 1024 // characters in one path
)

// setPayload turns validated data into the payload of e.Kind and returns the
// payload's key and, for verdicts, its verdict name.
func (e *Event) setPayload(data any, args FieldTypes) (key, verdict string, err error) {
	m := data.(map[string]any) // every schema requires an object
	switch e.Kind {
	case KindSchemaObserved:
		p, err := schemaObservedOf(m)
		if err != nil {
			return "", "", err
		}
		e.SchemaObserved = p
		if p.IsList() {
			return p.Server, "", nil
		}
		return p.ToolID, "", nil
	case KindInvocation:
		p, err := invocationOf(m, args)
		if err != nil {
			return "", "", err
		}
		e.Invocation = p
		return p.ToolID, "", nil
	case KindContract:
		acc, err := number(m, "accuracy")
		if err != nil {
			return "", "", err
		}
		e.Contract = &Contract{
			ToolID:                  str(m, "tool_id"),
			Accuracy:                acc,
			Determinism:             str(m, "determinism"),
			OutputSchemaHash:        str(m, "output_schema_hash"),
			ExpectedInputSchemaHash: str(m, "expected_input_schema_hash"),
		}
		return e.Contract.ToolID, "", nil
	case KindQualityCheckpoint:
		p, err := qualityCheckpointOf(m)
		if err != nil {
			return "", "", err
		}
		e.QualityCheckpoint = p
		return p.ToolID, "", nil
	case KindWorkflow:
		raw, err := rawOf(m)
		if err != nil {
			return "", "", fmt.Errorf("%w: workflow: %v", ErrSchemaInvalid, err)
		}
		e.Workflow = &Workflow{CompositionID: str(m, "composition_id"), Raw: raw}
		return e.Workflow.CompositionID, "", nil
	case KindSchemaVerdict:
		p, err := schemaVerdictOf(m)
		if err != nil {
			return "", "", err
		}
		e.SchemaVerdict = p
		return p.ToolID, string(p.Verdict), nil
	case KindCompositionVerdict:
		p, err := compositionVerdictOf(m)
		if err != nil {
			return "", "", err
		}
		e.CompositionVerdict = p
		return p.CompositionID, string(p.Verdict), nil
	case KindWorkflowObserved:
		p, err := workflowObservedOf(m)
		if err != nil {
			return "", "", err
		}
		e.WorkflowObserved = p
		return p.CompositionID, "", nil
	case KindBaselineAccepted, KindBaselineReset, KindAgentMigrated, KindAgentForgotten:
		e.Operator = &OperatorAction{ToolID: str(m, "tool_id"), AgentID: str(m, "agent_id"), Fingerprint: str(m, "fingerprint"),
			Operator: str(m, "operator"), Reason: str(m, "reason")}
		return e.Operator.ToolID, "", nil
	}
	return "", "", fmt.Errorf("%w: kind %s has no payload", ErrUnknownType, e.Kind)
}

// str and strs read validated strings. They clone them: the parser's
// strings share one copy of the whole message, argument values included,
// and a decoded Event must not keep that copy alive.
func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return strings.Clone(s)
}

func strs(m map[string]any, k string) []string {
	arr, ok := m[k].([]any)
	if !ok {
		return nil
	}
	out := make([]string, len(arr))
	for i, v := range arr {
		s, _ := v.(string)
		out[i] = strings.Clone(s)
	}
	return out
}

// number reads a validated JSON number as a float64, refusing one that a
// float64 cannot hold.
func number(m map[string]any, k string) (float64, error) {
	n, _ := m[k].(json.Number)
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: %s: %s is out of range", ErrSchemaInvalid, k, n)
	}
	return f, nil
}

func optNumber(m map[string]any, k string) (*float64, error) {
	if _, ok := m[k]; !ok {
		return nil, nil
	}
	f, err := number(m, k)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

func sequence(m map[string]any, k string) (uint64, error) {
	n, _ := m[k].(json.Number)
	u, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		// The schema allowed an integer written as 7.0 or 7e0.
		f, ferr := strconv.ParseFloat(string(n), 64)
		if ferr != nil || f < 0 || f >= 1<<64 || f != math.Trunc(f) {
			return 0, fmt.Errorf("%w: %s: %s is not a stream sequence", ErrSchemaInvalid, k, n)
		}
		u = uint64(f)
	}
	return u, nil
}

func raw(m map[string]any, k string) (json.RawMessage, error) {
	r, err := rawOf(m[k])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSchemaInvalid, k, err)
	}
	return r, nil
}

func schemaObservedOf(m map[string]any) (*SchemaObserved, error) {
	p := &SchemaObserved{ToolID: str(m, "tool_id"), Version: str(m, "version"), Server: str(m, "server")}
	if list, ok := m["tools"].(map[string]any); ok {
		p.NextCursor = str(list, "nextCursor")
		arr, _ := list["tools"].([]any)
		p.Tools = make([]MCPTool, len(arr))
		seen := make(map[string]int, len(arr))
		for i, t := range arr {
			tool, err := mcpToolOf(t.(map[string]any))
			if err != nil {
				return nil, fmt.Errorf("%w: tools.tools[%d]: %v", ErrSchemaInvalid, i, err)
			}
			if j, dup := seen[tool.Name]; dup {
				return nil, fmt.Errorf("%w: tools.tools[%d]: tool name %q repeats tools.tools[%d]", ErrSchemaInvalid, i, tool.Name, j)
			}
			seen[tool.Name] = i
			p.Tools[i] = tool
		}
		return p, nil
	}
	tool, err := mcpToolOf(m["tool"].(map[string]any))
	if err != nil {
		return nil, fmt.Errorf("%w: tool: %v", ErrSchemaInvalid, err)
	}
	p.Tool = &tool
	return p, nil
}

func mcpToolOf(m map[string]any) (MCPTool, error) {
	t := MCPTool{Name: str(m, "name"), Title: str(m, "title"), Description: str(m, "description")}
	var err error
	for k, v := range m {
		var dst *json.RawMessage
		switch k {
		case "name", "title", "description":
			continue
		case "inputSchema":
			dst = &t.InputSchema
		case "outputSchema":
			dst = &t.OutputSchema
		case "annotations":
			dst = &t.Annotations
		case "_meta":
			dst = &t.Meta
		default:
			if t.Other == nil {
				t.Other = make(map[string]json.RawMessage)
			}
			r, err := marshalJSON(v)
			if err != nil {
				return MCPTool{}, err
			}
			t.Other[strings.Clone(k)] = r
			continue
		}
		if *dst, err = rawOf(v); err != nil {
			return MCPTool{}, err
		}
	}
	return t, nil
}

func invocationOf(m map[string]any, args FieldTypes) (*Invocation, error) {
	p := &Invocation{
		AgentID:           str(m, "agent_id"),
		ToolID:            str(m, "tool_id"),
		ToolVersion:       str(m, "tool_version"),
		SchemaFingerprint: str(m, "schema_fingerprint"),
		UsedFields:        strs(m, "used_fields"),
		OutputFieldsRead:  strs(m, "output_fields_read"),
		TraceID:           str(m, "trace_id"),
		SpanID:            str(m, "span_id"),
		ParentSpanID:      str(m, "parent_span_id"),
		WorkflowID:        str(m, "workflow_id"),
	}
	p.ArgumentTypes = args // the parser summarised "arguments"
	if types, ok := m["argument_types"].(map[string]any); ok {
		if p.ArgumentTypes == nil {
			p.ArgumentTypes = make(FieldTypes, len(types))
		}
		for path, v := range types {
			var names []any
			switch x := v.(type) {
			case string:
				names = []any{x}
			case []any:
				names = x
			}
			for _, name := range names {
				t, err := toolschema.ParseType(name.(string))
				if err != nil {
					return nil, fmt.Errorf("%w: argument_types: %q: %v", ErrSchemaInvalid, path, err)
				}
				if err := p.ArgumentTypes.add(strings.Clone(path), t); err != nil {
					return nil, fmt.Errorf("%w: argument_types: %v", ErrSchemaInvalid, err)
				}
			}
		}
	}
	if o, ok := m["outcome"].(map[string]any); ok {
		p.Outcome = &Outcome{Status: str(o, "status"), ErrorType: str(o, "error_type")}
		if c, ok := o["correct"].(bool); ok {
			p.Outcome.Correct = &c
		}
	}
	var err error
	if p.LatencyMS, err = optNumber(m, "latency_ms"); err != nil {
		return nil, err
	}
	return p, nil
}

// add records type t at path. path must not share memory with a parsed
// body (see parseJSON).
func (f FieldTypes) add(path string, t toolschema.TypeSet) error {
	if old, ok := f[path]; ok {
		f[path] = old | t
		return nil
	}
	if len(f) >= MaxArgumentFields {
		return fmt.Errorf("more than %d field paths", MaxArgumentFields)
	}
	if utf8.RuneCountInString(path) > MaxFieldPathLen {
		return fmt.Errorf("a field path longer than %d characters", MaxFieldPathLen)
	}
	f[path] = t
	return nil
}

// FieldTypesOf returns the field paths and types of a JSON object, such as
// an MCP tools/call's arguments, without its values: what an agent's
// telemetry client puts in Invocation.ArgumentTypes so that values never
// leave the agent.
func FieldTypesOf(arguments []byte) (FieldTypes, error) {
	_, f, err := parseJSONSummarizing(arguments, []string{})
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: %v", ErrBadEvent, err)
	}
	if f == nil {
		return nil, fmt.Errorf("%w: arguments: not a JSON object", ErrBadEvent)
	}
	return f, nil
}

// isIntegerLiteral reports whether a JSON number literal has an integer
// value (as JSON Schema's "integer" means: 1.0 and 1e2 are integers), from
// its digits alone, exactly.
func isIntegerLiteral(lit string) bool {
	lit = trimSign(lit)
	mant, exp := lit, 0
	for i := 0; i < len(lit); i++ {
		if lit[i] == 'e' || lit[i] == 'E' {
			mant = lit[:i]
			e := lit[i+1:]
			neg := false
			if e != "" && (e[0] == '+' || e[0] == '-') {
				neg = e[0] == '-'
				e = e[1:]
			}
			for j := 0; j < len(e) && exp < 1<<20; j++ {
				exp = exp*10 + int(e[j]-'0')
			}
			if neg {
				exp = -exp
			}
			break
		}
	}
	intPart, frac := mant, ""
	for i := 0; i < len(mant); i++ {
		if mant[i] == '.' {
			intPart, frac = mant[:i], mant[i+1:]
			break
		}
	}
	digits := intPart + frac
	point := len(intPart) + exp // digits at index >= point are the fraction
	for i := max(point, 0); i < len(digits); i++ {
		if digits[i] != '0' {
			return false
		}
	}
	return true
}

func trimSign(s string) string {
	if s != "" && s[0] == '-' {
		return s[1:]
	}
	return s
}

func schemaVerdictOf(m map[string]any) (*SchemaVerdict, error) {
	p := &SchemaVerdict{
		Verdict:             guards.SchemaVerdict(str(m, "verdict")),
		Directive:           str(m, "directive"),
		Action:              guards.Action(str(m, "action")),
		Summary:             str(m, "summary"),
		ManifestDigest:      str(m, "manifest_digest"),
		ToolID:              str(m, "tool_id"),
		AgentID:             str(m, "agent_id"),
		Version:             str(m, "version"),
		BaselineFingerprint: str(m, "baseline_fingerprint"),
		CurrentFingerprint:  str(m, "current_fingerprint"),
		GuardVersion:        str(m, "guard_version"),
		InputEventID:        str(m, "input_event_id"),
		InputSubject:        str(m, "input_subject"),
	}
	var err error
	if p.Changes, err = raw(m, "changes"); err != nil {
		return nil, err
	}
	if p.Affected, err = raw(m, "affected"); err != nil {
		return nil, err
	}
	if p.Migration, err = raw(m, "migration"); err != nil {
		return nil, err
	}
	if p.InputSequence, err = sequence(m, "input_sequence"); err != nil {
		return nil, err
	}
	return p, nil
}

func compositionVerdictOf(m map[string]any) (*CompositionVerdict, error) {
	p := &CompositionVerdict{
		Verdict:        guards.CompositionVerdict(str(m, "verdict")),
		Directive:      str(m, "directive"),
		Action:         guards.Action(str(m, "action")),
		Summary:        str(m, "summary"),
		ManifestDigest: str(m, "manifest_digest"),
		CompositionID:  str(m, "composition_id"),
		GuardVersion:   str(m, "guard_version"),
		InputEventID:   str(m, "input_event_id"),
		InputSubject:   str(m, "input_subject"),
	}
	var err error
	if p.ComposedQuality, err = number(m, "composed_quality"); err != nil {
		return nil, err
	}
	if p.ComposedQualityLower, err = optNumber(m, "composed_quality_lower"); err != nil {
		return nil, err
	}
	if p.ComposedQualityUpper, err = optNumber(m, "composed_quality_upper"); err != nil {
		return nil, err
	}
	p.Confidence = workflow.Confidence(str(m, "confidence"))
	if p.FailureModes, err = raw(m, "failure_modes"); err != nil {
		return nil, err
	}
	if p.InputSequence, err = sequence(m, "input_sequence"); err != nil {
		return nil, err
	}
	if o, ok := m["observed"].(map[string]any); ok {
		if p.Observed, err = observedQualityOf(o); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// qualityCheckpointOf reads a validated checkpoint, refusing counts that
// contradict each other.
func qualityCheckpointOf(m map[string]any) (*QualityCheckpoint, error) {
	p := &QualityCheckpoint{ToolID: str(m, "tool_id")}
	for _, f := range []struct {
		name string
		dst  func(uint64)
	}{
		{"calls", func(n uint64) { p.Calls = int64(n) }},
		{"successes", func(n uint64) { p.Successes = int64(n) }},
		{"through_sequence", func(n uint64) { p.ThroughSequence = n }},
	} {
		n, _ := m[f.name].(json.Number)
		v, err := strconv.ParseUint(string(n), 10, 63)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s is not a count", ErrSchemaInvalid, f.name, n)
		}
		f.dst(v)
	}
	if p.Successes > p.Calls {
		return nil, fmt.Errorf("%w: successes %d exceed calls %d", ErrSchemaInvalid, p.Successes, p.Calls)
	}
	p.Fingerprint = str(m, "fingerprint")
	var err error
	if p.InputSchema, err = rawOf(m["input_schema"]); err != nil {
		return nil, fmt.Errorf("%w: input_schema: %v", ErrSchemaInvalid, err)
	}
	if p.OutputSchema, err = rawOf(m["output_schema"]); err != nil {
		return nil, fmt.Errorf("%w: output_schema: %v", ErrSchemaInvalid, err)
	}
	return p, nil
}
