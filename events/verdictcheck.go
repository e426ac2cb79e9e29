package events

import (
	"bytes"
	"encoding/json"
	"net/url"
	"unicode/utf8"
)

// plainSchemaVerdict reports whether Decode certainly accepts the schema
// verdict that Encode writes for ev (its type defaulted, its payload
// marshalled): whether its attributes and fields plainly satisfy
// CloudEvents, the verdict.schema.v1 JSON Schema and the decoder's own
// checks, field by field, without writing and decoding the event. The core
// writes a verdict per observation and per agent, and decoding each again
// cost more than building it.
//
// It is conservative: anything it does not recognise as plainly valid
// (another extension than a chain link, a dataschema, a non-UTF-8 string,
// raw JSON that the canonical writer does not take) makes it report false,
// and Encode decodes the event as for every other kind, to accept it or to
// refuse it with Decode's error. FuzzEncodeSchemaVerdict holds it to Decode.
func plainSchemaVerdict(ev *Event) bool {
	v := ev.SchemaVerdict
	if ev.Kind != KindSchemaVerdict || v == nil || ev.Type != TypeSchemaVerdict {
		return false
	}
	// The attributes, as envelope.attributes checks them.
	if !plainAttr(ev.ID) || !plainAttr(ev.Source) || ev.DataSchema != "" {
		return false
	}
	if !plainToken(ev.Source) {
		if _, err := url.Parse(ev.Source); err != nil {
			return false
		}
	}
	if ev.Subject != "" && ev.Subject != v.ToolID {
		return false
	}
	if !ev.Time.IsZero() {
		if y := ev.Time.UTC().Year(); y < 1 || y > 9999 {
			return false
		}
	}
	if len(ev.Extensions) > 0 {
		if prev, ok := ev.Extensions[AttrPrevious]; !ok || len(ev.Extensions) > 1 || !ValidDigest(prev) {
			return false
		}
	}
	// The data, as the JSON Schema and schemaVerdictOf check it. The
	// subject (Names.Verdict) has checked the verdict's name and the key.
	return plainVerdictName(string(v.Verdict)) &&
		textLen(v.Directive, 1, -1) &&
		(v.Action == "" || v.Action.Valid()) &&
		(v.Summary == "" || textLen(v.Summary, 1, MaxSummaryLen)) &&
		lowerHex64(v.ManifestDigest) &&
		plainAttr(v.ToolID) && textLen(v.ToolID, 1, 128) &&
		(v.AgentID == "" || textLen(v.AgentID, 1, 128)) &&
		textLen(v.Version, 0, 128) &&
		textLen(v.BaselineFingerprint, 0, 256) &&
		textLen(v.CurrentFingerprint, 0, 256) &&
		plainRaw(v.Changes, '[') &&
		plainRaw(v.Affected, '[') &&
		plainRaw(v.Migration, '{', '[') &&
		textLen(v.GuardVersion, 1, 128) &&
		textLen(v.InputEventID, 1, -1) &&
		textLen(v.InputSubject, 1, -1)
}

// plainAttr reports whether s is a non-empty CloudEvents String that needs
// no second look: UTF-8 without control characters (see validAttrValue).
func plainAttr(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

// plainToken reports whether s is made of A-Z a-z 0-9 - _ only, as the
// source of verdicts (the prefix) is: a relative URI-reference, a path,
// that url.Parse takes without a second look.
func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// textLen reports whether s is UTF-8 of min to max characters (max < 0:
// no bound), as JSON Schema's minLength and maxLength count them.
func textLen(s string, min, max int) bool {
	if !utf8.ValidString(s) {
		return false
	}
	n := utf8.RuneCountInString(s)
	return n >= min && (max < 0 || n <= max)
}

// plainVerdictName reports whether s matches ^[A-Z][A-Z0-9_]*$ within 64
// characters.
func plainVerdictName(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// lowerHex64 reports whether s matches ^[0-9a-f]{64}$.
func lowerHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// plainRaw reports whether raw JSON is null (nil or the literal) or one
// value that starts with one of the bytes open ('[' for an array, '{' for
// an object), and is JSON that the decoder takes: UTF-8, no member name
// twice in an object, no overlong number. The canonical writer checks all
// that in one pass (and takes a bit less: escaped surrogates, deep
// nesting).
func plainRaw(raw json.RawMessage, open ...byte) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return raw == nil
	}
	if bytes.Equal(bytes.TrimRight(t, " \t\r\n"), []byte("null")) {
		return true
	}
	if bytes.IndexByte(open, t[0]) < 0 {
		return false
	}
	c := canonPool.Get().(*canonWriter)
	defer c.release()
	c.in = raw
	if !c.value() {
		return false
	}
	c.space()
	return c.i == len(c.in)
}
