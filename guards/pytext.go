package guards

// This file is the one place that writes Python's text. The seeds hash the
// output of json.dumps(obj, sort_keys=True), f-string float formats and the
// repr of sorted string lists; an auditor recomputes our digests with the
// seeds' own Python, so every byte here must match CPython.

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// PyObject is a JSON object as Python's json.dumps(obj, sort_keys=True)
// writes it. Values may be string, []string (a Python tuple or list of
// strings), bool, int, float64 (written as Python's repr), []any, or a
// nested PyObject or map[string]any.
type PyObject map[string]any

// PyJSONDumps returns json.dumps(obj, sort_keys=True) with Python's defaults:
// separators ", " and ": ", ensure_ascii (non-ASCII as \uXXXX, surrogate pairs
// above U+FFFF). It panics on a value type outside PyObject's contract, which
// is a programming error in this package, never a consequence of input.
func PyJSONDumps(obj PyObject) string {
	var b strings.Builder
	b.Grow(256) // a manifest's object: a few ids and fingerprints
	writePyValue(&b, obj)
	return b.String()
}

func writePyValue(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		writePyJSONString(b, x)
	case []string:
		b.WriteByte('[')
		for i, s := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyJSONString(b, s)
		}
		b.WriteByte(']')
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(PyFloatRepr(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyValue(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		writePyValue(b, PyObject(x))
	case PyObject:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // UTF-8 byte order is code point order, as Python sorts
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyJSONString(b, k)
			b.WriteString(": ")
			writePyValue(b, x[k])
		}
		b.WriteByte('}')
	default:
		panic("guards: PyJSONDumps: unsupported value type")
	}
}

const lowerHex = "0123456789abcdef"

// writePyJSONString writes s as json.dumps does with ensure_ascii=True: only
// printable ASCII (space to '~') stays literal. Invalid UTF-8 bytes are
// written as U+FFFD, which is what decoding such bytes as JSON yields.
func writePyJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	// A run of printable ASCII without quote or backslash, the whole of
	// most ids and fingerprints, is written at once.
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x7e && s[i] != '"' && s[i] != '\\' {
		i++
	}
	b.WriteString(s[:i])
	writePyJSONRunes(b, s[i:])
	b.WriteByte('"')
}

// writePyJSONRunes writes s escaped as json.dumps does, rune by rune.
func writePyJSONRunes(b *strings.Builder, s string) {
	for _, r := range s { // ranging over invalid UTF-8 yields U+FFFD
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= 0x20 && r <= 0x7e:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			writeU4(b, 0xd800+(r>>10))
			writeU4(b, 0xdc00+(r&0x3ff))
		default:
			writeU4(b, r)
		}
	}
}

func writeU4(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(lowerHex[(r>>12)&0xf])
	b.WriteByte(lowerHex[(r>>8)&0xf])
	b.WriteByte(lowerHex[(r>>4)&0xf])
	b.WriteByte(lowerHex[r&0xf])
}

// PyFixed returns Python's f"{x:.{prec}f}": the exact binary value rounded
// half to even, as CPython's float formatting does (and strconv does too).
func PyFixed(x float64, prec int) string {
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// PyPercent returns Python's f"{x:.{prec}%}": CPython multiplies the float by
// 100 in double precision, formats it fixed, and appends a percent sign.
func PyPercent(x float64, prec int) string {
	return strconv.FormatFloat(x*100, 'f', prec, 64) + "%"
}

// PyReprStrings returns repr(list_of_str), for example ['a', "b'c"].
func PyReprStrings(items []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writePyRepr(&b, s)
	}
	b.WriteByte(']')
	return b.String()
}

// writePyRepr writes repr(s): single quotes unless s holds a single quote
// and no double quote; printable characters (str.isprintable) literal, others
// as \xNN, \uNNNN or \UNNNNNNNN.
func writePyRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x7f && r >= 0x20:
			b.WriteRune(r)
		case r < 0x80 || !pyPrintable(r):
			switch {
			case r < 0x100:
				b.WriteString(`\x`)
				b.WriteByte(lowerHex[(r>>4)&0xf])
				b.WriteByte(lowerHex[r&0xf])
			case r < 0x10000:
				writeU4(b, r)
			default:
				b.WriteString(`\U`)
				for shift := 28; shift >= 0; shift -= 4 {
					b.WriteByte(lowerHex[(r>>uint(shift))&0xf])
				}
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
}

// pyPrintable mirrors str.isprintable for non-ASCII runes: letters, marks,
// numbers, punctuation and symbols are printable; separators, controls,
// format, private-use, surrogate and unassigned code points are not.
func pyPrintable(r rune) bool {
	return unicode.IsPrint(r)
}

// SHA256Hex is the seeds' _hash: hex SHA-256 of the UTF-8 text.
func SHA256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// PyFloatRepr is a float as json.dumps writes it: repr, the shortest text
// that reads back the same, in exponent form when the decimal exponent is
// below -4 or at least 16, else positional with at least one fractional
// digit; NaN and Infinity as json.dumps spells them.
func PyFloatRepr(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	exp := 0
	if x != 0 {
		e := strconv.FormatFloat(x, 'e', -1, 64)
		exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		if exp < -4 || exp >= 16 {
			return e
		}
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}
