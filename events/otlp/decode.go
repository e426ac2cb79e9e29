package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ParseProtobuf reads an ExportTraceServiceRequest in the protobuf
// encoding (OTLP/HTTP with Content-Type application/x-protobuf). Errors
// wrap ErrNotOTLP.
func ParseProtobuf(body []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		return nil, fmt.Errorf("%w: protobuf: %v", ErrNotOTLP, err)
	}
	return req, nil
}

// ParseJSON reads an ExportTraceServiceRequest in OTLP/JSON (OTLP/HTTP with
// Content-Type application/json, and each line of the collector's file
// exporter): the protobuf JSON mapping, except that trace and span ids are
// hex strings, not base64. Unknown fields are ignored, as the OTLP
// specification requires of receivers. Errors wrap ErrNotOTLP.
func ParseJSON(body []byte) (*coltracepb.ExportTraceServiceRequest, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrNotOTLP, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrNotOTLP)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: a JSON value that is not an object", ErrNotOTLP)
	}
	if err := hexIDsToBase64(obj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotOTLP, err)
	}
	fixed, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotOTLP, err)
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, req); err != nil {
		return nil, fmt.Errorf("%w: OTLP/JSON: %v", ErrNotOTLP, err)
	}
	return req, nil
}

// hexIDsToBase64 rewrites the hex ids of OTLP/JSON (traceId, spanId,
// parentSpanId of spans and links) into the base64 that protojson reads.
func hexIDsToBase64(req map[string]any) error {
	for _, rs := range list(req, "resourceSpans", "resource_spans") {
		for _, ss := range list(rs, "scopeSpans", "scope_spans") {
			for _, sp := range list(ss, "spans") {
				if err := rewriteIDs(sp, "span"); err != nil {
					return err
				}
				for _, l := range list(sp, "links") {
					if err := rewriteIDs(l, "link"); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func list(v any, keys ...string) []map[string]any {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out []map[string]any
	for _, k := range keys {
		arr, _ := obj[k].([]any)
		for _, e := range arr {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

func rewriteIDs(obj map[string]any, what string) error {
	for _, pair := range [][2]string{{"traceId", "trace_id"}, {"spanId", "span_id"}, {"parentSpanId", "parent_span_id"}} {
		for _, k := range pair {
			s, ok := obj[k].(string)
			if !ok || s == "" {
				continue
			}
			b, err := hex.DecodeString(s)
			if err != nil {
				return fmt.Errorf("%s %s %q: not hex", what, pair[0], s)
			}
			obj[k] = base64.StdEncoding.EncodeToString(b)
		}
	}
	return nil
}

// Format is the format of a trace file.
type Format string

// The trace file formats ReadFile reads.
const (
	// FormatOTLPJSON is the collector file exporter's output: JSON lines,
	// each an ExportTraceServiceRequest in OTLP/JSON.
	FormatOTLPJSON Format = "otlp-json"
	// FormatGoStdout is the OpenTelemetry Go SDK stdout exporter's output
	// (stdouttrace): one JSON object per span (tracetest.SpanStub), compact
	// or pretty-printed.
	FormatGoStdout Format = "go-stdouttrace"
)

// ReadFile reads a trace file, telling its format from its first JSON
// value: a JSON object with resourceSpans is the collector's file exporter
// output, one with SpanContext and Name the Go SDK's stdout exporter's. All
// of it becomes one request, so that a trace split across lines is
// translated whole. Errors wrap ErrNotOTLP and name the line.
func ReadFile(data []byte) (*coltracepb.ExportTraceServiceRequest, Format, error) {
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	dec := json.NewDecoder(bytes.NewReader(data))
	var format Format
	req := &coltracepb.ExportTraceServiceRequest{}
	for {
		start := skipSpace(data, int(dec.InputOffset()))
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		line := 1 + bytes.Count(data[:start], []byte{'\n'})
		if err != nil {
			return nil, "", fmt.Errorf("%w: line %d: not JSON: %v", ErrNotOTLP, line, err)
		}
		var head map[string]json.RawMessage
		if json.Unmarshal(raw, &head) != nil {
			return nil, "", fmt.Errorf("%w: line %d: a JSON value that is not an object", ErrNotOTLP, line)
		}
		this := Format("")
		switch {
		case head["resourceSpans"] != nil || head["resource_spans"] != nil:
			this = FormatOTLPJSON
		case head["SpanContext"] != nil && head["Name"] != nil:
			this = FormatGoStdout
		default:
			return nil, "", fmt.Errorf("%w: line %d: neither an OTLP/JSON ExportTraceServiceRequest (no resourceSpans, as the collector's file exporter writes) nor a span of the Go SDK's stdout exporter (no SpanContext)", ErrNotOTLP, line)
		}
		if format == "" {
			format = this
		} else if this != format {
			return nil, "", fmt.Errorf("%w: line %d: %s after %s: one format per file", ErrNotOTLP, line, this, format)
		}
		if this == FormatOTLPJSON {
			r, err := ParseJSON(raw)
			if err != nil {
				return nil, "", fmt.Errorf("line %d: %w", line, err)
			}
			req.ResourceSpans = append(req.ResourceSpans, r.GetResourceSpans()...)
			continue
		}
		rs, err := stubToOTLP(raw)
		if err != nil {
			return nil, "", fmt.Errorf("%w: line %d: %v", ErrNotOTLP, line, err)
		}
		req.ResourceSpans = append(req.ResourceSpans, rs)
	}
	return req, format, nil
}

func skipSpace(data []byte, pos int) int {
	for pos < len(data) && strings.IndexByte(" \t\r\n", data[pos]) >= 0 {
		pos++
	}
	return pos
}

// stub is the JSON the Go SDK's stdout exporter writes for a span
// (go.opentelemetry.io/otel/sdk/trace/tracetest.SpanStub).
type stub struct {
	Name        string
	SpanContext stubContext
	Parent      stubContext
	SpanKind    int32
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []stubKV
	Events      []struct {
		Name       string
		Attributes []stubKV
		Time       time.Time
	}
	Status struct {
		Code        string
		Description string
	}
	Resource             []stubKV
	InstrumentationScope struct {
		Name    string
		Version string
	}
}

type stubContext struct {
	TraceID string
	SpanID  string
}

type stubKV struct {
	Key   string
	Value stubValue
}

type stubValue struct {
	Type  string
	Value json.RawMessage
}

// stubToOTLP converts one stdout exporter span into OTLP.
func stubToOTLP(raw []byte) (*tracepb.ResourceSpans, error) {
	var s stub
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("a Go SDK span: %v", err)
	}
	sp := &tracepb.Span{Name: s.Name, Kind: tracepb.Span_SpanKind(s.SpanKind)}
	var err error
	if sp.TraceId, err = hexID(s.SpanContext.TraceID, "SpanContext.TraceID"); err != nil {
		return nil, err
	}
	if sp.SpanId, err = hexID(s.SpanContext.SpanID, "SpanContext.SpanID"); err != nil {
		return nil, err
	}
	if sp.ParentSpanId, err = hexID(s.Parent.SpanID, "Parent.SpanID"); err != nil {
		return nil, err
	}
	if isZero(sp.ParentSpanId) {
		sp.ParentSpanId = nil
	}
	sp.StartTimeUnixNano, sp.EndTimeUnixNano = nanos(s.StartTime), nanos(s.EndTime)
	if sp.Attributes, err = stubAttrs(s.Attributes); err != nil {
		return nil, err
	}
	for _, e := range s.Events {
		attrs, err := stubAttrs(e.Attributes)
		if err != nil {
			return nil, fmt.Errorf("event %q: %v", e.Name, err)
		}
		sp.Events = append(sp.Events, &tracepb.Span_Event{Name: e.Name, TimeUnixNano: nanos(e.Time), Attributes: attrs})
	}
	switch s.Status.Code {
	case "Error":
		sp.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: s.Status.Description}
	case "Ok":
		sp.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	case "Unset", "":
	default:
		return nil, fmt.Errorf("Status.Code %q: want Unset, Ok or Error", s.Status.Code)
	}
	res, err := stubAttrs(s.Resource)
	if err != nil {
		return nil, fmt.Errorf("Resource: %v", err)
	}
	return &tracepb.ResourceSpans{
		Resource: &resourcepb.Resource{Attributes: res},
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: s.InstrumentationScope.Name, Version: s.InstrumentationScope.Version},
			Spans: []*tracepb.Span{sp},
		}},
	}, nil
}

func hexID(s, field string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s %q: not hex", field, s)
	}
	return b, nil
}

func nanos(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

func stubAttrs(kvs []stubKV) ([]*commonpb.KeyValue, error) {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		v, err := stubAny(kv.Value, 0)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %v", kv.Key, err)
		}
		out = append(out, &commonpb.KeyValue{Key: kv.Key, Value: v})
	}
	return out, nil
}

// stubAny converts an attribute.Value as the Go SDK marshals it ({"Type":
// "INT64", "Value": 3}) into an OTLP AnyValue.
func stubAny(v stubValue, depth int) (*commonpb.AnyValue, error) {
	if depth > 32 {
		return nil, errors.New("nested too deep")
	}
	scalar := func(typ string, raw json.RawMessage) (*commonpb.AnyValue, error) {
		var err error
		switch typ {
		case "BOOL":
			var b bool
			if err = json.Unmarshal(raw, &b); err == nil {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}, nil
			}
		case "INT64":
			var i int64
			if err = json.Unmarshal(raw, &i); err == nil {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}, nil
			}
		case "FLOAT64":
			var f float64
			if err = json.Unmarshal(raw, &f); err == nil {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}, nil
			}
		case "STRING":
			var s string
			if err = json.Unmarshal(raw, &s); err == nil {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}, nil
			}
		case "BYTESLICE":
			var b []byte // base64 in JSON
			if err = json.Unmarshal(raw, &b); err == nil {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: b}}, nil
			}
		case "EMPTY":
			return &commonpb.AnyValue{}, nil
		default:
			return nil, fmt.Errorf("unknown value type %q", typ)
		}
		return nil, fmt.Errorf("a %s value: %v", typ, err)
	}
	switch v.Type {
	case "BOOLSLICE", "INT64SLICE", "FLOAT64SLICE", "STRINGSLICE":
		var elems []json.RawMessage
		if err := json.Unmarshal(v.Value, &elems); err != nil {
			return nil, fmt.Errorf("a %s value: %v", v.Type, err)
		}
		arr := &commonpb.ArrayValue{}
		for _, e := range elems {
			a, err := scalar(strings.TrimSuffix(v.Type, "SLICE"), e)
			if err != nil {
				return nil, err
			}
			arr.Values = append(arr.Values, a)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}, nil
	case "SLICE":
		var elems []stubValue
		if err := json.Unmarshal(v.Value, &elems); err != nil {
			return nil, fmt.Errorf("a SLICE value: %v", err)
		}
		arr := &commonpb.ArrayValue{}
		for _, e := range elems {
			a, err := stubAny(e, depth+1)
			if err != nil {
				return nil, err
			}
			arr.Values = append(arr.Values, a)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}, nil
	case "MAP":
		var kvs []stubKV
		if err := json.Unmarshal(v.Value, &kvs); err != nil {
			return nil, fmt.Errorf("a MAP value: %v", err)
		}
		list := &commonpb.KeyValueList{}
		for _, kv := range kvs {
			a, err := stubAny(kv.Value, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", kv.Key, err)
			}
			list.Values = append(list.Values, &commonpb.KeyValue{Key: kv.Key, Value: a})
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: list}}, nil
	}
	return scalar(v.Type, v.Value)
}
