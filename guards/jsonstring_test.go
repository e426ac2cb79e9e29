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

// envelopeForm is what the CloudEvents envelope's form (EscapeInvalidUTF8
// alone) writes: encoding/json's string, character by character, with
// U+2028 and U+2029 as they are.
func envelopeForm(t *testing.T, s string) []byte {
	t.Helper()
	out := []byte{'"'}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' {
			out = append(out, s[i:i+size]...)
		} else {
			m := marshal(t, s[i:i+size], false) // an invalid byte alone: "\ufffd"
			out = append(out, m[1:len(m)-1]...)
		}
		i += size
	}
	return append(out, '"')
}

// TestAppendJSONStringEnvelope: the envelope's form is encoding/json's
// without the line terminators' escapes. Its \b and \f are written by name
// (the events package's writer it replaced wrote \u0008 and \u000c, which
// no event that leaves events held: Decode refuses control characters in
// attributes, so Encode does).
func TestAppendJSONStringEnvelope(t *testing.T) {
	for _, s := range append(stringCases, randomStrings(5000)...) {
		if got, want := AppendJSONString(nil, s, EscapeInvalidUTF8), envelopeForm(t, s); !bytes.Equal(got, want) {
			t.Fatalf("EscapeInvalidUTF8 %q:\n got %s\nwant %s", s, got, want)
		}
	}
	if got := string(AppendJSONString(nil, "\b\f", EscapeInvalidUTF8)); got != `"\b\f"` {
		t.Errorf("the envelope's \\b and \\f: %s", got)
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
