package guards

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// stringCases hold what each form escapes differently: quote and
// backslash, every control character, HTML's characters, the line
// terminators, multi-byte UTF-8, invalid UTF-8 (a stray continuation byte,
// a truncated sequence, an encoded surrogate, an overlong '/').
var stringCases = []string{
	"", "plain", `quote " backslash \ slash /`, "\b\f\n\r\t", "\x00\x01\x1f\x7f",
	"<html>&amp;", "café 😀 €", "\u2028\u2029 \u2027\u202a", "\ufffd",
	"a\xffb", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "x\x80\u2028<\x00",
	"\u0080\u009f\u00a0", "\U0010ffff",
}

// randomStrings returns n strings drawn from the pieces of stringCases, so
// that the writers meet their cases in every order and next to each other.
func randomStrings(n int) []string {
	var pieces []string
	for _, s := range stringCases {
		for _, r := range s { // single bytes too: they split sequences
			pieces = append(pieces, string(r))
		}
		for i := 0; i < len(s); i++ {
			pieces = append(pieces, s[i:i+1])
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		out[i] = b.String()
	}
	return out
}

// marshal is encoding/json's string, with HTML escaping or without.
func marshal(t *testing.T, s string, html bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// TestAppendJSONStringMarshal: the Marshal forms are encoding/json's, byte
// for byte.
func TestAppendJSONStringMarshal(t *testing.T) {
	for _, s := range append(stringCases, randomStrings(5000)...) {
		if got, want := AppendJSONString(nil, s, Marshal), marshal(t, s, false); !bytes.Equal(got, want) {
			t.Fatalf("Marshal %q:\n got %s\nwant %s", s, got, want)
		}
		if got, want := AppendJSONString(nil, s, MarshalHTML), marshal(t, s, true); !bytes.Equal(got, want) {
			t.Fatalf("MarshalHTML %q:\n got %s\nwant %s", s, got, want)
		}
	}
}

// TestAppendJSONStringCanonical: the Canonical form is RFC 8785's, as
// jcs.Transform writes the string (invalid UTF-8 reaches it as \ufffd and
// comes out as U+FFFD), and the string example of RFC 8785 section
// 3.2.2.2 comes out as the RFC prints it.
func TestAppendJSONStringCanonical(t *testing.T) {
	for _, s := range append(stringCases, randomStrings(5000)...) {
		want, err := jcs.Transform(marshal(t, s, true))
		if err != nil {
			t.Fatalf("jcs.Transform %q: %v", s, err)
		}
		if got := AppendJSONString(nil, s, Canonical); !bytes.Equal(got, want) {
			t.Fatalf("Canonical %q:\n got %s\nwant %s", s, got, want)
		}
	}
	var rfc string // the RFC's input: "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"
	if err := json.Unmarshal([]byte(`"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`), &rfc); err != nil {
		t.Fatal(err)
	}
	if got, want := string(AppendJSONString(nil, rfc, Canonical)), `"€$\u000f\nA'B\"\\\\\"/"`; got != want {
		t.Errorf("RFC 8785's example: got %s, want %s", got, want)
	}
	for s, want := range map[string]string{
		"\u2028\u2029": "\"\u2028\u2029\"", // as they are, unlike encoding/json
		"<&>":          `"<&>"`,
		"\x7f":         "\"\x7f\"",
		"a\xffb":       "\"a\ufffdb\"", // U+FFFD itself
		"\xed\xa0\x80": "\"\ufffd\ufffd\ufffd\"",
	} {
		if got := string(AppendJSONString(nil, s, Canonical)); got != want {
			t.Errorf("Canonical %q = %q, want %q", s, got, want)
		}
	}
}

// TestAppendJSONRune: a character is written as AppendJSONString writes the
// string of it, for every Unicode scalar value and every form, so that
// canonicalization (which writes decoded escapes one by one) and the string
// writer cannot disagree.
func TestAppendJSONRune(t *testing.T) {
	forms := []Escaping{Canonical, EscapeInvalidUTF8, Marshal, MarshalHTML}
	var got, want []byte
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if 0xd800 <= r && r <= 0xdfff {
			continue
		}
		for _, esc := range forms {
			got = append(AppendJSONRune(append(got[:0], '"'), r, esc), '"')
			want = AppendJSONString(want[:0], string(r), esc)
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendJSONRune(%U, %b) = %s, AppendJSONString writes %s", r, esc, got, want)
			}
		}
	}
}

// The writers the module had before AppendJSONString, kept to show that it
// writes what each of them wrote.

// oldEnvelopeString is events.appendJSONString, the CloudEvents
// attributes' writer.
func oldEnvelopeString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// oldCanonicalString is toolschema.appendCanonicalString, the
// fingerprints' writer.
func oldCanonicalString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"':
				dst = append(dst, '\\', '"')
			case c == '\\':
				dst = append(dst, '\\', '\\')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// oldCanonicalRune is events.appendCanonicalRune, canonicalization's writer
// of a decoded escape.
func oldCanonicalRune(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
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
	if r < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// TestAppendJSONStringOldWriters: AppendJSONString writes what the writers
// it replaces wrote (events.appendEncodedString and cmd's writeJSONString
// were encoding/json's: TestAppendJSONStringMarshal). The one exception is
// the envelope's \b and \f, which it wrote as \u0008 and \u000c and which
// are now written by name: CloudEvents attributes hold no control
// characters (Decode refuses them, so Encode does), so no event that
// leaves events was written with them.
func TestAppendJSONStringOldWriters(t *testing.T) {
	for _, s := range append(stringCases, randomStrings(20000)...) {
		if got, want := AppendJSONString(nil, s, Canonical), oldCanonicalString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("Canonical %q:\n got %s\nwant %s", s, got, want)
		}
		got, want := AppendJSONString(nil, s, EscapeInvalidUTF8), oldEnvelopeString(nil, s)
		if strings.ContainsAny(s, "\b\f") {
			var a, b string
			if json.Unmarshal(got, &a) != nil || json.Unmarshal(want, &b) != nil || a != b {
				t.Fatalf("EscapeInvalidUTF8 %q: %s and %s read back as %q and %q", s, got, want, a, b)
			}
			continue
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("EscapeInvalidUTF8 %q:\n got %s\nwant %s", s, got, want)
		}
	}
	if got, was := string(AppendJSONString(nil, "\b\f", EscapeInvalidUTF8)), string(oldEnvelopeString(nil, "\b\f")); got != `"\b\f"` || was != `"\u0008\u000c"` {
		t.Errorf("the envelope's \\b and \\f: %s, was %s", got, was)
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if 0xd800 <= r && r <= 0xdfff {
			continue
		}
		if got, want := AppendJSONRune(nil, r, Canonical), oldCanonicalRune(nil, r); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONRune(%U) = %q, was %q", r, got, want)
		}
	}
}

// FuzzAppendJSONString: every form reads back as encoding/json reads what
// it writes for s, and the Marshal forms are what it writes.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want string
		if err := json.Unmarshal(marshal(t, s, true), &want); err != nil {
			t.Fatal(err)
		}
		for _, esc := range []Escaping{Canonical, EscapeInvalidUTF8, Marshal, MarshalHTML} {
			b := AppendJSONString(nil, s, esc)
			var got string
			if err := json.Unmarshal(b, &got); err != nil || got != want {
				t.Fatalf("%b: %q wrote %s, reads back %q (%v), want %q", esc, s, b, got, err, want)
			}
		}
		if got, want := AppendJSONString(nil, s, MarshalHTML), marshal(t, s, true); !bytes.Equal(got, want) {
			t.Fatalf("MarshalHTML %q:\n got %s\nwant %s", s, got, want)
		}
	})
}
