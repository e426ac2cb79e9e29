package events

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// This file is Decode's fast path for invocations, most of the traffic: a
// parser that reads invocation data straight into an Invocation, checking
// it against tool.invocation.v1 as it goes, and a reader of structured-mode
// bodies that does so in the same pass as the attributes. The generic path
// builds a tree of the whole body, validates the data with the JSON Schema
// validator and then reads the payload out of the tree, at several times
// the cost.
//
// The fast path only ever succeeds. On anything it is not sure of (any
// error, and the forms it leaves alone, such as data_base64 or a number
// with a huge exponent) it gives up, and the generic path reads the message
// from the start and returns its own error: errors are those of the
// generic path. What the fast path accepts, the generic path accepts with
// the same result, and the other way round. The generic path is the
// reference: FuzzInvocationValidatorMatchesSchema and FuzzDecodeFastPath
// compare the two, and TestInvocationValidatorFollowsSchema derives edge
// cases from the schema document, so that a change of the schema that the
// code below does not follow fails the tests.

// The members of tool.invocation.v1 data, as bits of a set.
const (
	invAgentID uint16 = 1 << iota
	invToolID
	invToolVersion
	invSchemaFingerprint
	invArguments
	invArgumentTypes
	invUsedFields
	invOutputFieldsRead
	invOutcome
	invTraceID
	invSpanID
	invParentSpanID
	invWorkflowID
	invLatencyMS
)

// The string limits of tool.invocation.v1, in code points (JSON Schema's
// minLength and maxLength count code points, not bytes).
const (
	invIDLen    = 128  // agent_id, tool_id, tool_version
	invRefLen   = 256  // schema_fingerprint, trace and span ids, workflow_id, outcome.error_type
	invPathLen  = 1024 // items of used_fields and output_fields_read, names in argument_types
	invMaxPaths = 1000 // items of used_fields and output_fields_read (maxItems)
	invMaxTypes = 1000 // members of argument_types (maxProperties)
)

// invocationMember returns the bit of a member of invocation data, and
// for a string member its maximum length; 0 for a member the schema does
// not allow (additionalProperties is false).
func invocationMember(name string) (bit uint16, maxLen int) {
	switch name {
	case "agent_id":
		return invAgentID, invIDLen
	case "tool_id":
		return invToolID, invIDLen
	case "tool_version":
		return invToolVersion, invIDLen
	case "schema_fingerprint":
		return invSchemaFingerprint, invRefLen
	case "arguments":
		return invArguments, 0
	case "argument_types":
		return invArgumentTypes, 0
	case "used_fields":
		return invUsedFields, 0
	case "output_fields_read":
		return invOutputFieldsRead, 0
	case "outcome":
		return invOutcome, 0
	case "trace_id":
		return invTraceID, invRefLen
	case "span_id":
		return invSpanID, invRefLen
	case "parent_span_id":
		return invParentSpanID, invRefLen
	case "workflow_id":
		return invWorkflowID, invRefLen
	case "latency_ms":
		return invLatencyMS, 0
	}
	return 0, 0
}

// invocationBlock holds an Invocation and what its pointers point to, so
// that one allocation serves them all.
type invocationBlock struct {
	inv     Invocation
	outcome Outcome
	correct bool
	latency float64
}

// typeEntry is a member of argument_types: a path and the types named.
type typeEntry struct {
	path  string
	types toolschema.TypeSet
}

// parseInvocation reads raw, binary-mode data or decoded data_base64, as
// invocation data; see parser.invocation.
func parseInvocation(raw []byte) (*Invocation, bool) {
	p := newParser(raw)
	defer p.release()
	p.skipSpace()
	inv, ok := p.invocation()
	if !ok {
		return nil, false
	}
	p.skipSpace()
	if p.i != len(p.b) {
		return nil, false
	}
	return inv, true
}

// invocation reads the invocation data at p.i into an Invocation, as
// parseData, schemas.Validate and invocationOf would together, and reports
// true; or reports false, with p.i anywhere, if one of them would fail or
// the data holds a form this reader leaves to them.
func (p *parser) invocation() (*Invocation, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, false
	}
	p.i++
	blk := new(invocationBlock)
	inv := &blk.inv
	var seen uint16
	typesBase := len(p.types)
	defer func() { p.types = p.types[:typesBase] }()
	p.skipSpace()
	for {
		key, ok := p.memberName()
		if !ok {
			return nil, false // also {}: agent_id and tool_id are required
		}
		bit, maxLen := invocationMember(key)
		if bit == 0 || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		ok = true
		switch bit {
		case invAgentID:
			inv.AgentID, ok = p.keptString(maxLen)
		case invToolID:
			inv.ToolID, ok = p.keptString(maxLen)
		case invToolVersion:
			inv.ToolVersion, ok = p.keptString(maxLen)
		case invSchemaFingerprint:
			inv.SchemaFingerprint, ok = p.keptString(maxLen)
		case invTraceID:
			inv.TraceID, ok = p.keptString(maxLen)
		case invSpanID:
			inv.SpanID, ok = p.keptString(maxLen)
		case invParentSpanID:
			inv.ParentSpanID, ok = p.keptString(maxLen)
		case invWorkflowID:
			inv.WorkflowID, ok = p.keptString(maxLen)
		case invArguments:
			// As parseJSONSummarizing: the object's paths and types, no values.
			if p.i >= len(p.b) || p.b[p.i] != '{' || p.args != nil {
				return nil, false
			}
			p.args = make(FieldTypes, 8) // most calls have few: one group
			ok = p.summarizeObject("", 0) == nil
		case invArgumentTypes:
			ok = p.argumentTypes()
		case invUsedFields:
			inv.UsedFields, ok = p.paths()
		case invOutputFieldsRead:
			inv.OutputFieldsRead, ok = p.paths()
		case invOutcome:
			ok = p.outcome(blk)
		case invLatencyMS:
			blk.latency, ok = p.latency()
			inv.LatencyMS = &blk.latency
		}
		if !ok {
			return nil, false
		}
		more, ok := p.afterItem('}')
		if !ok {
			return nil, false
		}
		if more {
			continue
		}
		break
	}
	if seen&(invAgentID|invToolID) != invAgentID|invToolID {
		return nil, false
	}
	// As invocationOf: argument_types merged into the paths of arguments.
	inv.ArgumentTypes = p.args
	if seen&invArgumentTypes != 0 {
		types := p.types[typesBase:]
		if inv.ArgumentTypes == nil {
			inv.ArgumentTypes = make(FieldTypes, len(types))
		}
		for _, t := range types {
			if inv.ArgumentTypes.add(strings.Clone(t.path), t.types) != nil {
				return nil, false
			}
		}
	}
	return inv, true
}

// memberName reads an object member's name and the colon after it.
func (p *parser) memberName() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	name, err := p.str()
	return name, err == nil && p.colon()
}

// colon moves past the colon after a member name and the space around it.
func (p *parser) colon() bool {
	p.skipSpace()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		return false
	}
	p.i++
	p.skipSpace()
	return true
}

// boundedString reads a JSON string of 1 to maxLen code points.
func (p *parser) boundedString(maxLen int) (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	s, err := p.str()
	if err != nil || s == "" || len(s) > maxLen && utf8.RuneCountInString(s) > maxLen {
		return "", false
	}
	return s, true
}

// keptString is boundedString for a string the payload keeps: a clone, as
// str makes.
func (p *parser) keptString(maxLen int) (string, bool) {
	s, ok := p.boundedString(maxLen)
	return strings.Clone(s), ok
}

// paths reads used_fields or output_fields_read (#/$defs/paths): an array
// of at most invMaxPaths strings of 1 to invPathLen code points, as strs
// returns them (never nil).
func (p *parser) paths() ([]string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return nil, false
	}
	p.i++
	base := len(p.strs)
	defer func() { p.strs = p.strs[:base] }()
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return []string{}, true
	}
	for {
		s, ok := p.boundedString(invPathLen)
		if !ok || len(p.strs)-base == invMaxPaths {
			return nil, false
		}
		p.strs = append(p.strs, s)
		more, ok := p.afterItem(']')
		if !ok {
			return nil, false
		}
		if more {
			continue
		}
		out := make([]string, len(p.strs)-base)
		for i, s := range p.strs[base:] {
			out[i] = strings.Clone(s)
		}
		return out, true
	}
}

// argumentTypes reads argument_types into p.types: an object of at most
// invMaxTypes members, names of at most invPathLen code points, each value
// a type name or a non-empty array of distinct type names (#/$defs/types).
func (p *parser) argumentTypes() bool {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return false
	}
	p.i++
	base, keysBase := len(p.types), len(p.keys)
	defer func() { p.keys = p.keys[:keysBase] }()
	var seen map[string]struct{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		path, err := p.str()
		if err != nil || len(path) > invPathLen && utf8.RuneCountInString(path) > invPathLen {
			return false
		}
		if p.repeated(keysBase, path, &seen) || len(p.types)-base == invMaxTypes || !p.colon() {
			return false
		}
		t, ok := p.typeNames()
		if !ok {
			return false
		}
		p.types = append(p.types, typeEntry{path, t})
		more, ok := p.afterItem('}')
		if !ok {
			return false
		}
		if more {
			continue
		}
		return true
	}
}

// typeNames reads a value of argument_types: a type name, or a non-empty
// array of distinct type names.
func (p *parser) typeNames() (toolschema.TypeSet, bool) {
	if p.i < len(p.b) && p.b[p.i] == '"' {
		return p.typeName()
	}
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return 0, false
	}
	p.i++
	var set toolschema.TypeSet
	p.skipSpace()
	for {
		t, ok := p.typeName()
		if !ok || set&t != 0 { // also []: minItems is 1
			return 0, false
		}
		set |= t
		more, ok := p.afterItem(']')
		if !ok {
			return 0, false
		}
		if more {
			continue
		}
		return set, true
	}
}

func (p *parser) typeName() (toolschema.TypeSet, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return 0, false
	}
	s, err := p.str()
	if err != nil {
		return 0, false
	}
	t, err := toolschema.ParseType(s)
	return t, err == nil
}

// The members of an invocation's outcome, as bits of a set.
const (
	outStatus = 1 << iota
	outErrorType
	outCorrect
)

// outcomeMember returns the bit of a member of the outcome object; 0 for a
// member the schema does not allow (additionalProperties is false).
func outcomeMember(name string) int {
	switch name {
	case "status":
		return outStatus
	case "error_type":
		return outErrorType
	case "correct":
		return outCorrect
	}
	return 0
}

// outcome reads the outcome object into blk: status "ok" or "error"
// (required), error_type a string of 1 to invRefLen code points, correct a
// boolean, nothing else.
func (p *parser) outcome(blk *invocationBlock) bool {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return false
	}
	p.i++
	o := &blk.outcome
	seen := 0
	p.skipSpace()
	for {
		key, ok := p.memberName()
		if !ok {
			return false
		}
		bit := outcomeMember(key)
		switch bit {
		case outStatus:
			s, ok := p.boundedString(len("error"))
			switch {
			case !ok:
				return false
			case s == "ok":
				o.Status = "ok"
			case s == "error":
				o.Status = "error"
			default:
				return false
			}
		case outErrorType:
			var ok bool
			if o.ErrorType, ok = p.keptString(invRefLen); !ok {
				return false
			}
		case outCorrect:
			switch {
			case p.i < len(p.b) && p.b[p.i] == 't' && p.literal("true") == nil:
				blk.correct = true
			case p.i < len(p.b) && p.b[p.i] == 'f' && p.literal("false") == nil:
				blk.correct = false
			default:
				return false
			}
			o.Correct = &blk.correct
		}
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		more, ok := p.afterItem('}')
		if !ok {
			return false
		}
		if more {
			continue
		}
		if seen&outStatus == 0 {
			return false
		}
		blk.inv.Outcome = o
		return true
	}
}

// latency reads latency_ms: a number, not negative, that a float64 holds
// (as number reads it). A literal with an exponent beyond ±maxExp10 is
// left to the generic path, which refuses it.
func (p *parser) latency() (float64, bool) {
	if p.i >= len(p.b) || !(p.b[p.i] == '-' || '0' <= p.b[p.i] && p.b[p.i] <= '9') {
		return 0, false
	}
	start := p.i
	if p.scanNumber() != nil || p.i-start > maxNumberLen {
		return 0, false
	}
	lit := p.s[start:p.i]
	mant := lit
	if e := strings.IndexAny(lit, "eE"); e >= 0 {
		if !smallExponent(lit[e+1:]) {
			return 0, false
		}
		mant = lit[:e]
	}
	if mant[0] == '-' && strings.Trim(mant, "-0.") != "" {
		return 0, false // below the minimum, 0
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// smallExponent reports whether the exponent digits of a number literal
// (with an optional sign) are at most maxExp10. Within it, big.Rat takes
// every literal of up to maxNumberLen characters.
func smallExponent(exp string) bool {
	exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	n, err := strconv.Atoi(exp)
	return exp == "" || err == nil && n <= maxExp10
}

// readStructuredFast reads a structured-mode body whose data is of kind (an
// invocation or a schema verdict) in one pass, the attributes as
// readStructured would set them and the data by parser.invocation or
// parser.schemaVerdict; it reports false where readStructured could fail,
// for data_base64, and for data the kind's reader leaves to the generic
// path.
func readStructuredFast(body []byte, kind Kind) (envelope, bool) {
	p := newParser(body)
	defer p.release()
	var env envelope
	p.skipSpace()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return envelope{}, false
	}
	p.i++
	var coreSeen uint16             // core attributes, null ones included
	var extSeen map[string]struct{} // extension names, once many (see repeated)
	p.skipSpace()
	for {
		name, ok := p.memberName()
		if !ok {
			return envelope{}, false
		}
		switch core := coreAttr(name); {
		case name == "data":
			if env.hasData {
				return envelope{}, false
			}
			switch kind {
			case KindInvocation:
				env.inv, env.hasData = p.invocation()
			case KindSchemaVerdict:
				env.sv, env.hasData = p.schemaVerdict()
			}
			if !env.hasData {
				return envelope{}, false
			}
		case core >= 0:
			if coreSeen&(1<<core) != 0 {
				return envelope{}, false
			}
			coreSeen |= 1 << core
			v, isNull, ok := p.attrValue(true)
			if !ok {
				return envelope{}, false
			}
			if !isNull {
				switch {
				case core == attrSpecversion && v == "1.0":
					v = "1.0"
				case core == attrType && v == kind.Type():
					v = kind.Type()
				default:
					v = strings.Clone(v) // see str
				}
				env.attrs.core[core], env.attrs.isSet = v, env.attrs.isSet|1<<core
			}
		default: // data_base64 too: it is left to readStructured
			if !validAttrName(name) || p.repeated(0, name, &extSeen) {
				return envelope{}, false
			}
			v, isNull, ok := p.attrValue(false)
			if !ok {
				return envelope{}, false
			}
			if !isNull {
				env.attrs.ext = append(env.attrs.ext, attr{strings.Clone(name), strings.Clone(v)})
			}
		}
		more, ok := p.afterItem('}')
		if !ok {
			return envelope{}, false
		}
		if more {
			continue
		}
		break
	}
	p.skipSpace()
	if p.i != len(p.b) || env.attrs.isSet&(1<<attrSpecversion) == 0 || !env.hasData {
		return envelope{}, false
	}
	return env, true
}

// attrValue reads a structured-mode attribute value in canonical string
// form, as attrString gives it (core says whether it is a core attribute:
// a string then), or null; it reports false where attrString fails.
func (p *parser) attrValue(core bool) (v string, isNull, ok bool) {
	if p.i >= len(p.b) {
		return "", false, false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		s, err := p.str()
		return s, false, err == nil
	case c == 'n':
		return "", true, p.literal("null") == nil
	case core:
		return "", false, false
	case c == 't':
		return "true", false, p.literal("true") == nil
	case c == 'f':
		return "false", false, p.literal("false") == nil
	case c == '-' || '0' <= c && c <= '9':
		start := p.i
		if p.scanNumber() != nil {
			return "", false, false
		}
		lit := p.s[start:p.i]
		return lit, false, isCEInteger(lit)
	}
	return "", false, false
}

// afterItem reads what follows a member or an element: a comma (more, and
// the space after it skipped) or the closing byte (consumed). ok is false
// for anything else, or the end of the input.
func (p *parser) afterItem(closing byte) (more, ok bool) {
	p.skipSpace()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		p.skipSpace()
		return true, true
	case closing:
		p.i++
		return false, true
	}
	return false, false
}
