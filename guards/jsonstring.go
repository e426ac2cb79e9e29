package guards

import "unicode/utf8"

// This file is the one JSON string writer of the module: RFC 8785's string
// form for fingerprints and canonical JSON, encoding/json's for the payloads
// written without reflection, and the CloudEvents envelope's. PyJSONDumps
// (pytext.go) is not one of them: it reproduces Python's json.dumps.

// Escaping says what AppendJSONString escapes beyond what every JSON string
// needs. Every form escapes '"' and '\\' with a backslash and the control
// characters U+0000 to U+001F, \b \f \n \r \t by name and the others as
// \u00xx (lower-case hex); it writes everything else as UTF-8, unless a flag
// says otherwise.
type Escaping uint8

const (
	// EscapeInvalidUTF8 writes a byte that is not part of valid UTF-8 as
	// \ufffd; without it, as U+FFFD itself. Either way it reads back as
	// U+FFFD.
	EscapeInvalidUTF8 Escaping = 1 << iota
	// EscapeLineTerminators writes U+2028 and U+2029 as \u2028 and \u2029.
	EscapeLineTerminators
	// EscapeHTML writes <, > and & as \u003c, \u003e and \u0026.
	EscapeHTML
)

const (
	// Canonical is the string form of RFC 8785 (JCS, section 3.2.2.2), as
	// github.com/gowebpki/jcs writes it. RFC 8785 takes valid UTF-8 only;
	// an invalid byte is written as U+FFFD, as decoding it would give.
	Canonical Escaping = 0
	// Marshal is how encoding/json writes a string with SetEscapeHTML(false).
	Marshal = EscapeInvalidUTF8 | EscapeLineTerminators
	// MarshalHTML is how json.Marshal writes a string.
	MarshalHTML = Marshal | EscapeHTML
)

// asciiPlain has, for each ASCII byte, the bits of the masks under which
// AppendJSONString writes it as it is: plainAlways for every form,
// plainUnlessHTML for the forms without EscapeHTML. Bytes from
// utf8.RuneSelf up are in no mask.
var asciiPlain = func() (t [utf8.RuneSelf]uint8) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		switch c {
		case '"', '\\':
		case '<', '>', '&':
			t[c] = plainUnlessHTML
		default:
			t[c] = plainAlways | plainUnlessHTML
		}
	}
	return t
}()

const (
	plainAlways uint8 = 1 << iota
	plainUnlessHTML
)

// plainMask is the bit of asciiPlain that esc writes as it is.
func plainMask(esc Escaping) uint8 {
	if esc&EscapeHTML != 0 {
		return plainAlways
	}
	return plainUnlessHTML
}

// AppendJSONString appends s to dst as a JSON string, quotes included,
// escaped as esc says.
//
// This is the seam where encoding/json/v2 (GOEXPERIMENT=jsonv2 in Go 1.26)
// will replace ours. jsontext.AppendQuote writes the Canonical form (and
// reports invalid UTF-8 as an error); a jsontext.Encoder with EscapeForJS
// and EscapeForHTML writes the Marshal forms, except that it writes invalid
// UTF-8 as U+FFFD itself, not as \ufffd, so the EscapeInvalidUTF8 forms
// (payloads, envelope) would change bytes there.
func AppendJSONString(dst []byte, s string, esc Escaping) []byte {
	mask := plainMask(esc)
	dst = append(dst, '"')
	start := 0 // s[start:i] is yet to be written as it is
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiPlain[b]&mask != 0 {
				i++
				continue
			}
			dst = appendASCIIEscape(append(dst, s[start:i]...), b)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			if esc&EscapeInvalidUTF8 != 0 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, "\uFFFD"...)
			}
		case (r == '\u2028' || r == '\u2029') && esc&EscapeLineTerminators != 0:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSONRune appends r, one character of a JSON string (without the
// quotes), escaped as AppendJSONString escapes it under esc. r must be a
// Unicode scalar value (not a surrogate, at most U+10FFFF); utf8.RuneError
// is U+FFFD itself.
func AppendJSONRune(dst []byte, r rune, esc Escaping) []byte {
	switch {
	case r < utf8.RuneSelf:
		if asciiPlain[r]&plainMask(esc) != 0 {
			return append(dst, byte(r))
		}
		return appendASCIIEscape(dst, byte(r))
	case (r == '\u2028' || r == '\u2029') && esc&EscapeLineTerminators != 0:
		return append(dst, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// appendASCIIEscape appends the escape of an ASCII byte that is not written
// as it is: '"' and '\\' after a backslash, \b \f \n \r \t by name, the
// others (control characters and HTML's <, > and &) as \u00xx.
func appendASCIIEscape(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', lowerHex[b>>4], lowerHex[b&0xf])
}
