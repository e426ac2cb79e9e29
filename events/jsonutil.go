package events

import (
	"bytes"
	"encoding/json"

	"github.com/toolsentry/toolsentry/guards"
)

// marshalJSON is json.Marshal without HTML escaping and without the
// encoder's trailing newline. Maps come out with sorted keys, so the output
// of a decoded value is canonical.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// rawOf returns v (a decoded JSON value) as canonical JSON; nil for null.
func rawOf(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return marshalJSON(v)
}

// appendJSONString appends s as a JSON string the way the CloudEvents
// envelope writes its attributes: RFC 8785's string form (U+2028 and U+2029
// as they are) with invalid UTF-8 as \ufffd, as encoding/json writes it.
func appendJSONString(dst []byte, s string) []byte {
	return guards.AppendJSONString(dst, s, guards.EscapeInvalidUTF8)
}
