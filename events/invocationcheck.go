package events

import (
	"math"
	"net/url"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// plainInvocation reports whether Decode certainly accepts the invocation
// that Encode writes for ev (its type defaulted, its payload marshalled),
// checking the typed fields against CloudEvents, tool.invocation.v1 and the
// decoder's own limits instead of writing and decoding the event again.
// Invocations are most of the telemetry, and emit, the MCP proxy, the OTLP
// receiver and the agent client build one per call: decoding each again
// cost as much as building it.
//
// Like plainSchemaVerdict it is sound, not complete: what it does not
// recognise as plainly valid (a dataschema, a string that is not UTF-8 or
// holds control characters where an attribute or key needs none, a NaN
// latency) it leaves to Decode, which accepts it or gives the reason.
// FuzzEncodeInvocation holds it to Decode, and TestPlainInvocation to the
// schema's limits.
func plainInvocation(ev *Event) bool {
	inv := ev.Invocation
	if ev.Kind != KindInvocation || inv == nil || ev.Type != TypeInvocation {
		return false
	}
	return plainAttributes(ev, inv.ToolID) &&
		textLen(inv.AgentID, 1, 128) &&
		plainAttr(inv.ToolID) && textLen(inv.ToolID, 1, 128) &&
		optionalText(inv.ToolVersion, 128) &&
		optionalText(inv.SchemaFingerprint, 256) &&
		plainFieldTypes(inv.ArgumentTypes) &&
		plainPaths(inv.UsedFields) &&
		plainPaths(inv.OutputFieldsRead) &&
		plainOutcome(inv.Outcome) &&
		optionalText(inv.TraceID, 256) &&
		optionalText(inv.SpanID, 256) &&
		optionalText(inv.ParentSpanID, 256) &&
		optionalText(inv.WorkflowID, 256) &&
		(inv.LatencyMS == nil || plainLatency(*inv.LatencyMS))
}

// plainAttributes reports whether the attributes of ev, an event keyed
// key, plainly pass envelope.attributes and Decode's subject check: an id
// and a source without control characters, the source a URI-reference, no
// dataschema, the subject attribute absent or the key, a time whose year
// RFC 3339 writes, and extensions named a-z0-9 that shadow no attribute,
// with values that need no second look.
func plainAttributes(ev *Event, key string) bool {
	if !plainAttr(ev.ID) || !plainAttr(ev.Source) || ev.DataSchema != "" {
		return false
	}
	if !plainPath(ev.Source) {
		if _, err := url.Parse(ev.Source); err != nil {
			return false
		}
	}
	if ev.Subject != "" && ev.Subject != key {
		return false
	}
	if !ev.Time.IsZero() {
		if y := ev.Time.UTC().Year(); y < 1 || y > 9999 {
			return false
		}
	}
	for name, value := range ev.Extensions {
		if !validAttrName(name) || coreAttr(name) >= 0 || name == "data" || name == "data_base64" || !plainAttr(value) {
			return false
		}
	}
	return true
}

// optionalText is an omitempty string of at most max characters.
func optionalText(s string, max int) bool { return s == "" || textLen(s, 1, max) }

// plainFieldTypes is argument_types: at most MaxArgumentFields paths of at
// most MaxFieldPathLen characters, each with a non-empty set of known type
// names (FieldTypes.MarshalJSON writes one name or an array of distinct
// ones).
func plainFieldTypes(f FieldTypes) bool {
	if len(f) > MaxArgumentFields {
		return false
	}
	for path, t := range f {
		if t == 0 || t&^toolschema.TypeAny != 0 || !textLen(path, 0, MaxFieldPathLen) {
			return false
		}
	}
	return true
}

// plainPaths is #/$defs/paths (used_fields, output_fields_read).
func plainPaths(paths []string) bool {
	if len(paths) > 1000 {
		return false
	}
	for _, p := range paths {
		if !textLen(p, 1, 1024) {
			return false
		}
	}
	return true
}

// plainOutcome is the outcome object: a status of ok or error.
func plainOutcome(o *Outcome) bool {
	return o == nil || (o.Status == "ok" || o.Status == "error") && optionalText(o.ErrorType, 256)
}

// plainLatency is latency_ms: a finite number, not negative (nor -0, which
// the decoder's fast path leaves to the validator).
func plainLatency(ms float64) bool {
	return !math.IsNaN(ms) && !math.IsInf(ms, 0) && !math.Signbit(ms)
}
