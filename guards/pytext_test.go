package guards

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Expected values below were printed by CPython 3.11 (json.dumps with
// sort_keys=True, repr, and f-string formats).
func TestPyJSONDumps(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"", `{"k": "", "l": ["", ""]}`},
		{"a", `{"k": "a", "l": ["a", "a"]}`},
		{"é", `{"k": "\u00e9", "l": ["\u00e9", "\u00e9"]}`},
		{"😀", `{"k": "\ud83d\ude00", "l": ["\ud83d\ude00", "\ud83d\ude00"]}`},
		{"\x7f", `{"k": "\u007f", "l": ["\u007f", "\u007f"]}`},
		{`"\`, `{"k": "\"\\", "l": ["\"\\", "\"\\"]}`},
		{"\n\r\t\b\f\x01\x1f", `{"k": "\n\r\t\b\f\u0001\u001f", "l": ["\n\r\t\b\f\u0001\u001f", "\n\r\t\b\f\u0001\u001f"]}`},
		{"\u2028", `{"k": "\u2028", "l": ["\u2028", "\u2028"]}`},
		{"𝔘", `{"k": "\ud835\udd18", "l": ["\ud835\udd18", "\ud835\udd18"]}`},
		{"日本", `{"k": "\u65e5\u672c", "l": ["\u65e5\u672c", "\u65e5\u672c"]}`},
		{"\xff", `{"k": "\ufffd", "l": ["\ufffd", "\ufffd"]}`}, // invalid UTF-8 reads as U+FFFD
	}
	for _, tt := range tests {
		got := PyJSONDumps(PyObject{"l": []string{tt.in, tt.in}, "k": tt.in})
		if got != tt.want {
			t.Errorf("PyJSONDumps(%q):\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
}

func TestPyJSONDumpsSortsKeysByCodePoint(t *testing.T) {
	got := PyJSONDumps(PyObject{"b": "1", "a": "2", "é": "3", "Z": "4", "😀": "5", "日": "6", "nested": PyObject{"y": true, "x": 7}, "list": []string(nil)})
	want := `{"Z": "4", "a": "2", "b": "1", "list": [], "nested": {"x": 7, "y": true}, "\u00e9": "3", "\u65e5": "6", "\ud83d\ude00": "5"}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestPyReprStrings(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, `[]`},
		{[]string{""}, `['']`},
		{[]string{"a", "b"}, `['a', 'b']`},
		{[]string{"é", "😀", "日本", "𝔘"}, `['é', '😀', '日本', '𝔘']`},
		{[]string{"\x7f"}, `['\x7f']`},
		{[]string{`"\`}, `['"\\']`},
		{[]string{"\n\r\t\b\f\x01\x1f"}, `['\n\r\t\x08\x0c\x01\x1f']`},
		{[]string{"it's"}, `["it's"]`},
		{[]string{`say "hi"`}, `['say "hi"']`},
		{[]string{`both ' and "`}, `['both \' and "']`},
		{[]string{"\u200b", "\u00a0", "\ufeff", "\u2028"}, `['\u200b', '\xa0', '\ufeff', '\u2028']`},
		{[]string{"\U000E0001"}, `['\U000e0001']`}, // a format character above the BMP
	}
	for _, tt := range tests {
		if got := PyReprStrings(tt.in); got != tt.want {
			t.Errorf("PyReprStrings(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPyFloatFormats(t *testing.T) {
	tests := []struct {
		x                       float64
		fixed3, fixed2, percent string
	}{
		{0.0625, "0.062", "0.06", "6.25%"}, // a binary tie rounds half to even
		{0.0005, "0.001", "0.00", "0.05%"}, // 0.0005 is slightly above the tie in binary
		{0.0015, "0.002", "0.00", "0.15%"},
		{0.0025, "0.003", "0.00", "0.25%"},
		{0.125, "0.125", "0.12", "12.50%"},
		{0.7737809375, "0.774", "0.77", "77.38%"},
		{1, "1.000", "1.00", "100.00%"},
		{0, "0.000", "0.00", "0.00%"},
		{0.005, "0.005", "0.01", "0.50%"},
		{2.675, "2.675", "2.67", "267.50%"},
		{0.955, "0.955", "0.95", "95.50%"},
		{0.9995, "1.000", "1.00", "99.95%"},
	}
	for _, tt := range tests {
		if got := PyFixed(tt.x, 3); got != tt.fixed3 {
			t.Errorf("PyFixed(%v, 3) = %s, want %s", tt.x, got, tt.fixed3)
		}
		if got := PyFixed(tt.x, 2); got != tt.fixed2 {
			t.Errorf("PyFixed(%v, 2) = %s, want %s", tt.x, got, tt.fixed2)
		}
		if got := PyPercent(tt.x, 2); got != tt.percent {
			t.Errorf("PyPercent(%v, 2) = %s, want %s", tt.x, got, tt.percent)
		}
	}
}

func FuzzPyJSONDumps(f *testing.F) {
	for _, s := range parityStrings {
		f.Add(s, "k")
	}
	f.Add("\xff\xfe", "\xc0")
	f.Fuzz(func(t *testing.T, s, key string) {
		obj := PyObject{key: s, "list": []string{s, key}}
		out := PyJSONDumps(obj)
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out: %q", out)
		}
		for i := 0; i < len(out); i++ {
			if out[i] < 0x20 || out[i] > 0x7e {
				t.Fatalf("byte %#x outside printable ASCII at %d in %q", out[i], i, out)
			}
		}
		var ref strings.Builder
		refPyJSONString(&ref, s)
		var got strings.Builder
		writePyJSONString(&got, s)
		if got.String() != ref.String() {
			t.Fatalf("writePyJSONString(%q) = %s, want %s", s, got.String(), ref.String())
		}
		if again := PyJSONDumps(obj); again != out {
			t.Fatalf("unstable output: %q then %q", out, again)
		}
		repr := PyReprStrings([]string{s, key})
		if !utf8.ValidString(repr) || !strings.HasPrefix(repr, "[") || !strings.HasSuffix(repr, "]") {
			t.Fatalf("bad repr %q", repr)
		}
	})
}

// refPyJSONString is writePyJSONString before its run of plain ASCII:
// rune by rune. The fuzz test holds the writer to it.
func refPyJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	writePyJSONRunes(b, s)
	b.WriteByte('"')
}
