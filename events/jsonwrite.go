package events

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/toolsentry/toolsentry/guards"
)

// This file writes the payloads that the hot path marshals (a schema
// verdict, an MCP tool, an invocation) without reflection: byte for byte
// what marshalJSON (encoding/json without HTML escaping) writes for them,
// as TestJSONWriters, FuzzJSONWriters, TestInvocationAppendJSON and
// FuzzEncodeInvocation check against encoding/json.

// appendMarshalString appends s as encoding/json writes a string without
// HTML escaping (guards.Marshal). (appendJSONString differs in U+2028 and
// U+2029, which it writes as they are.)
func appendMarshalString(dst []byte, s string) []byte {
	return guards.AppendJSONString(dst, s, guards.Marshal)
}

// appendEncodedString appends s as encoding/json writes a string, with
// HTML escaping (<, > and & as \u003c, \u003e and \u0026) or without.
func appendEncodedString(dst []byte, s string, html bool) []byte {
	if html {
		return guards.AppendJSONString(dst, s, guards.MarshalHTML)
	}
	return guards.AppendJSONString(dst, s, guards.Marshal)
}

// rawMessageType is the type encoding/json names in the error of a raw
// value that is not JSON.
var rawMessageType = reflect.TypeFor[json.RawMessage]()

// appendMarshalRaw appends raw JSON as encoding/json writes a
// json.RawMessage: null for nil, else compacted (white space removed),
// and fails with encoding/json's error if it is not one JSON value.
func appendMarshalRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	return appendEncodedRaw(dst, raw, false)
}

// appendEncodedRaw is appendMarshalRaw with HTML escaping or without:
// with it, <, >, &, U+2028 and U+2029 are escaped wherever they are, as
// encoding/json's compaction escapes them (valid JSON has them in strings
// only).
func appendEncodedRaw(dst []byte, raw json.RawMessage, html bool) ([]byte, error) {
	if raw == nil {
		return append(dst, "null"...), nil
	}
	start := len(dst)
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return nil, &json.MarshalerError{Type: rawMessageType, Err: err}
	}
	dst = buf.Bytes()
	if !html {
		return dst, nil
	}
	i := start
	for ; i < len(dst); i++ {
		if c := dst[i]; c == '<' || c == '>' || c == '&' || c == 0xE2 {
			break
		}
	}
	if i == len(dst) {
		return dst, nil
	}
	const hex = "0123456789abcdef"
	escaped := append([]byte(nil), dst[start:i]...)
	for ; i < len(dst); i++ {
		c := dst[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			escaped = append(escaped, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		case c == 0xE2 && i+2 < len(dst) && dst[i+1] == 0x80 && dst[i+2]&^1 == 0xA8:
			escaped = append(escaped, '\\', 'u', '2', '0', '2', hex[dst[i+2]&0xF])
			i += 2
		default:
			escaped = append(escaped, c)
		}
	}
	return append(dst[:start], escaped...), nil
}

// appendJSON appends the verdict as marshalJSON writes it: its members in
// field order, agent_id left out when empty.
func (v *SchemaVerdict) appendJSON(dst []byte) ([]byte, error) {
	var err error
	dst = append(dst, `{"verdict":`...)
	dst = appendMarshalString(dst, string(v.Verdict))
	dst = append(dst, `,"directive":`...)
	dst = appendMarshalString(dst, v.Directive)
	if v.Action != "" {
		dst = append(dst, `,"action":`...)
		dst = appendMarshalString(dst, string(v.Action))
	}
	if v.Summary != "" {
		dst = append(dst, `,"summary":`...)
		dst = appendMarshalString(dst, v.Summary)
	}
	dst = append(dst, `,"manifest_digest":`...)
	dst = appendMarshalString(dst, v.ManifestDigest)
	dst = append(dst, `,"tool_id":`...)
	dst = appendMarshalString(dst, v.ToolID)
	if v.AgentID != "" {
		dst = append(dst, `,"agent_id":`...)
		dst = appendMarshalString(dst, v.AgentID)
	}
	dst = append(dst, `,"version":`...)
	dst = appendMarshalString(dst, v.Version)
	dst = append(dst, `,"baseline_fingerprint":`...)
	dst = appendMarshalString(dst, v.BaselineFingerprint)
	dst = append(dst, `,"current_fingerprint":`...)
	dst = appendMarshalString(dst, v.CurrentFingerprint)
	dst = append(dst, `,"changes":`...)
	if dst, err = appendMarshalRaw(dst, v.Changes); err != nil {
		return nil, err
	}
	dst = append(dst, `,"affected":`...)
	if dst, err = appendMarshalRaw(dst, v.Affected); err != nil {
		return nil, err
	}
	dst = append(dst, `,"migration":`...)
	if dst, err = appendMarshalRaw(dst, v.Migration); err != nil {
		return nil, err
	}
	dst = append(dst, `,"guard_version":`...)
	dst = appendMarshalString(dst, v.GuardVersion)
	dst = append(dst, `,"input_event_id":`...)
	dst = appendMarshalString(dst, v.InputEventID)
	dst = append(dst, `,"input_subject":`...)
	dst = appendMarshalString(dst, v.InputSubject)
	dst = append(dst, `,"input_sequence":`...)
	dst = strconv.AppendUint(dst, v.InputSequence, 10)
	return append(dst, '}'), nil
}

// toolMember is one member of an MCP tool's wire form.
type toolMember struct {
	name  string
	str   string          // a string value, when raw is not set
	raw   json.RawMessage // a raw value
	isRaw bool
}

// mcpToolType is the type encoding/json names in the error of a tool that
// does not marshal.
var mcpToolType = reflect.TypeFor[MCPTool]()

// AppendJSON appends what json.Marshal(t) writes: MarshalJSON's bytes with
// encoding/json's HTML escaping, and its error, without reflection or a
// second pass.
func (t MCPTool) AppendJSON(dst []byte) ([]byte, error) {
	out, err := t.appendJSON(dst, true)
	if err != nil {
		return nil, &json.MarshalerError{Type: mcpToolType, Err: err}
	}
	return out, nil
}

// appendJSON appends the tool's wire form as MarshalJSON describes it,
// HTML-escaped or not: one object, members sorted by name (byte order, as
// encoding/json sorts a map's keys), the named fields over members of Other
// of the same name.
func (t MCPTool) appendJSON(dst []byte, html bool) ([]byte, error) {
	var fixed [7]toolMember
	members := fixed[:0]
	members = append(members, toolMember{name: "name", str: t.Name})
	if t.Title != "" {
		members = append(members, toolMember{name: "title", str: t.Title})
	}
	if t.Description != "" {
		members = append(members, toolMember{name: "description", str: t.Description})
	}
	members = append(members, toolMember{name: "inputSchema", raw: t.InputSchema, isRaw: true})
	for _, m := range []toolMember{{name: "outputSchema", raw: t.OutputSchema}, {name: "annotations", raw: t.Annotations}, {name: "_meta", raw: t.Meta}} {
		if m.raw != nil {
			m.isRaw = true
			members = append(members, m)
		}
	}
	for k, v := range t.Other {
		if !slices.ContainsFunc(members, func(m toolMember) bool { return m.name == k }) {
			members = append(members, toolMember{name: k, raw: v, isRaw: true})
		}
	}
	slices.SortFunc(members, func(a, b toolMember) int { return strings.Compare(a.name, b.name) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendEncodedString(dst, m.name, html)
		dst = append(dst, ':')
		if !m.isRaw {
			dst = appendEncodedString(dst, m.str, html)
			continue
		}
		var err error
		if dst, err = appendEncodedRaw(dst, m.raw, html); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendJSON appends the invocation as marshalJSON writes it: its members in
// field order, the omitempty and omitzero ones left out, argument_types'
// paths sorted. It reports false, writing nothing, for a latency that
// encoding/json refuses (NaN, ±Inf): marshalJSON gives the error.
func (inv *Invocation) appendJSON(dst []byte) ([]byte, bool) {
	if l := inv.LatencyMS; l != nil && (math.IsNaN(*l) || math.IsInf(*l, 0)) {
		return dst, false
	}
	dst = append(dst, `{"agent_id":`...)
	dst = appendMarshalString(dst, inv.AgentID)
	dst = append(dst, `,"tool_id":`...)
	dst = appendMarshalString(dst, inv.ToolID)
	dst = appendOptionalString(dst, `,"tool_version":`, inv.ToolVersion)
	dst = appendOptionalString(dst, `,"schema_fingerprint":`, inv.SchemaFingerprint)
	if inv.ArgumentTypes != nil {
		dst = append(dst, `,"argument_types":{`...)
		for i, p := range inv.ArgumentTypes.Paths() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendMarshalString(dst, p)
			dst = append(dst, ':')
			switch names := inv.ArgumentTypes[p].Names(); len(names) {
			case 0:
				dst = append(dst, "null"...) // a nil []string
			case 1:
				dst = appendMarshalString(dst, names[0])
			default:
				dst = appendMarshalStrings(dst, names)
			}
		}
		dst = append(dst, '}')
	}
	if inv.UsedFields != nil {
		dst = appendMarshalStrings(append(dst, `,"used_fields":`...), inv.UsedFields)
	}
	if inv.OutputFieldsRead != nil {
		dst = appendMarshalStrings(append(dst, `,"output_fields_read":`...), inv.OutputFieldsRead)
	}
	if o := inv.Outcome; o != nil {
		dst = append(dst, `,"outcome":{"status":`...)
		dst = appendMarshalString(dst, o.Status)
		dst = appendOptionalString(dst, `,"error_type":`, o.ErrorType)
		if o.Correct != nil {
			dst = strconv.AppendBool(append(dst, `,"correct":`...), *o.Correct)
		}
		dst = append(dst, '}')
	}
	dst = appendOptionalString(dst, `,"trace_id":`, inv.TraceID)
	dst = appendOptionalString(dst, `,"span_id":`, inv.SpanID)
	dst = appendOptionalString(dst, `,"parent_span_id":`, inv.ParentSpanID)
	dst = appendOptionalString(dst, `,"workflow_id":`, inv.WorkflowID)
	if inv.LatencyMS != nil {
		dst = appendMarshalFloat(append(dst, `,"latency_ms":`...), *inv.LatencyMS)
	}
	return append(dst, '}'), true
}

// appendOptionalString appends member (`,"name":`) and s unless s is empty.
func appendOptionalString(dst []byte, member, s string) []byte {
	if s == "" {
		return dst
	}
	return appendMarshalString(append(dst, member...), s)
}

// appendMarshalStrings appends a []string as encoding/json writes it.
func appendMarshalStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendMarshalString(dst, s)
	}
	return append(dst, ']')
}

// appendMarshalFloat appends a finite float64 as encoding/json writes it:
// the shortest decimal, in exponent form below 1e-6 and from 1e21, with a
// one-digit negative exponent not zero-padded.
func appendMarshalFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
