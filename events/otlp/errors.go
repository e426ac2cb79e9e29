package otlp

import (
	"errors"
	"fmt"
)

var (
	// ErrNotOTLP is returned when bytes are not trace data this package
	// reads: not an OTLP ExportTraceServiceRequest in protobuf or OTLP/JSON,
	// and (for ReadFile) not the OpenTelemetry Go SDK's stdout exporter
	// output either. Nothing of such input is translated.
	ErrNotOTLP = errors.New("not OTLP trace data")

	// ErrBadSpan is returned (inside a *SpanError) for a GenAI span that
	// cannot be translated: a tool span without a tool name or with
	// arguments that are not a JSON object, ids of the wrong length, tool
	// definitions that are not a list of tools, an invoke_agent span that
	// names no composition. Spans that are not GenAI tool, agent or
	// definition spans are never errors: they are ignored.
	ErrBadSpan = errors.New("malformed GenAI span")
)

// SpanError names a span that could not be translated and why. It wraps
// ErrBadSpan.
type SpanError struct {
	TraceID string // hex; "" when the id itself is malformed
	SpanID  string // hex; "" when the id itself is malformed
	Name    string // the span's name
	Err     error  // what is wrong, without the span
}

func (e *SpanError) Error() string {
	return fmt.Sprintf("span %q (trace %s, span %s): %v", e.Name, orDash(e.TraceID), orDash(e.SpanID), e.Err)
}

// Unwrap returns ErrBadSpan and the cause.
func (e *SpanError) Unwrap() []error { return []error{ErrBadSpan, e.Err} }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
