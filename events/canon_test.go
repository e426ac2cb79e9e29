package events

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// canonCases are bodies for the canonical form: what verdicts hold, and the
// corners of RFC 8785 and of jcs.Transform. fast says that the fast writer
// handles the case itself (no fallback to jcs.Transform).
var canonCases = []struct {
	name, body string
	fast       bool
}{
	{"empty", `{}`, true},
	{"white space", " \t{ \"b\" : [ 1 , { } , [ ] ] ,\n\"a\":null }\r\n", true},
	{"sorted by UTF-16", `{"b":1,"a":2,"é":3,"aa":4,"":5,"A":6,"\u0080":7,"ÿ":8}`, true},
	{"beyond the BMP before the private use area", `{"` + "\uE000" + `":1,"` + "\U0001F600" + `":2,"` + "\U0001F601" + `":3,"` + "\U00010000" + `":4,"` + "\uFFFF" + `":5}`, true},
	{"escaped names", `{"\u0062":1,"a\n":2,"a\"":3,"a\\":4,"a\/":5,"\u00e9t\u00e9":6}`, true},
	{"string escapes", `{"s":"\" \\ \/ \b \f \n \r \t \u0000 \u001f \u007f \u0041 \u00e9 \u20ac \u2028 \uffff"}`, true},
	{"raw characters", "{\"s\":\"é€\U0001F600\u2028\u007f<>&'\"}", true},
	{"literals", `{"t":true,"f":false,"n":null,"a":[true,false,null]}`, true},
	{"integers", `{"a":0,"b":-0,"c":7,"d":-12,"e":123456789012345,"f":-999999999999999}`, true},
	{"long integers", `{"a":1234567890123456,"b":12345678901234567890,"c":-9007199254740993,"d":100000000000000000000000}`, true},
	{"fractions and exponents", `{"a":1.0,"b":1e0,"c":1E+2,"d":1e-7,"e":0.000001,"f":1e21,"g":0.1,"h":-1.5e-10,"i":5e-324,"j":1.7976931348623157e308,"k":2.50,"l":-0.0,"m":0e5}`, true},
	{"many members", manyMembers(40), true},
	{"nested", `{"z":{"y":{"x":[{"b":1,"a":2},[{"d":[],"c":{}}]]}},"a":[[["deep"]]]}`, true},
	{"a verdict", `{"specversion":"1.0","id":"x","source":"toolsentry","type":"io.toolsentry.verdict.schema.v1","subject":"crm.lookup","time":"2026-11-29T10:00:00Z","datacontenttype":"application/json","predecessorhash":"sha256:00","data":{"verdict":"SCHEMA_MATCH","changes":[],"migration":{"steps":[]},"input_sequence":18446744073709551615}}`, true},
	// jcs.Transform's own ways, left to it.
	{"escaped surrogate pair", `{"s":"\ud83d\ude00"}`, false},
	{"escaped lone surrogate", `{"s":"\ud800\u0041"}`, false},
	{"escaped surrogate pair in a name", `{"\ud83d\ude00":1,"\ue000":2}`, false},
	{"number out of range", `{"a":1e400}`, false},
	{"nested beyond the fast writer", strings.Repeat(`{"a":`, canonMaxDepth+1) + `1` + strings.Repeat(`}`, canonMaxDepth+1), false},
}

// manyMembers is an object of n members in no order, more than the
// writer sorts by insertion, with names that share long prefixes and names
// that UTF-16 orders otherwise than UTF-8.
func manyMembers(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("member_with_a_long_prefix_%d", (i*7919)%n)
		switch i % 5 {
		case 1:
			name = fmt.Sprintf("%c%d", 0xe000+i, i)
		case 2:
			name = fmt.Sprintf("%c%d", 0x10000+i, i)
		}
		fmt.Fprintf(&b, "\"%s\":%d", name, i)
	}
	return b.String() + "}"
}

// TestCanonicalizeIsJCS holds the fast canonical form to jcs.Transform,
// with and without a member to leave out.
func TestCanonicalizeIsJCS(t *testing.T) {
	for _, tc := range canonCases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if _, err := parseJSON(body); err != nil {
				t.Fatalf("not JSON that parseJSON accepts: %v", err)
			}
			c := canonWriter{in: body}
			if fast := c.topObject(); fast != tc.fast {
				t.Errorf("fast writer took it: %v, want %v", fast, tc.fast)
			}
			checkCanonical(t, body)
		})
	}
}

// TestCanonicalizeGolden holds the fast canonical form to jcs.Transform on
// every event the golden files pin, verdicts among them.
func TestCanonicalizeGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "encoded", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden files: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, body, _ := bytes.Cut(b, []byte("\n")) // after the subject line
		c := canonWriter{in: body}
		if !c.topObject() {
			t.Errorf("%s: the fast writer did not take it", f)
		}
		checkCanonical(t, body)
	}
}

// checkCanonical compares canonicalize with jcs.Transform over body, and
// over body without each top-level member (but one named "") in turn, as ReadChainLink always
// computed it: the member deleted from the decoded object, which was
// written back as JSON.
func checkCanonical(t *testing.T, body []byte) {
	t.Helper()
	want, wantErr := jcs.Transform(body)
	got, err := canonicalize(body, "")
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("canonicalize(%s)\n got %s (%v)\nwant %s (%v)", body, got, err, want, wantErr)
	}
	v, err := parseJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(map[string]any)
	for name := range obj {
		if name == "" {
			continue // "" leaves nothing out
		}
		without := make(map[string]any, len(obj))
		for k, v := range obj {
			if k != name {
				without[k] = v
			}
		}
		b, err := marshalJSON(without)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := jcs.Transform(b)
		got, err := canonicalize(body, name)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("canonicalize(%s) without %q\n got %s (%v)\nwant %s (%v)", body, name, got, err, want, wantErr)
		}
	}
}

// FuzzCanonicalize holds the fast canonical form to jcs.Transform on any
// object that parseJSON accepts (what ReadChainLink hands it), and
// ReadChainLink's fast path to its general one on any body.
func FuzzCanonicalize(f *testing.F) {
	for _, tc := range canonCases {
		f.Add([]byte(tc.body))
	}
	for _, tc := range chainLinkCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkChainLink(t, body)
		v, err := parseJSON(body)
		if err != nil {
			return
		}
		if _, ok := v.(map[string]any); !ok {
			return
		}
		checkCanonical(t, body)
	})
}

// BenchmarkVerdictDigest measures the digest of a schema verdict as the
// core computes it for the chain, and the signer again: parse, canonical
// form (RFC 8785), SHA-256.
func BenchmarkVerdictDigest(b *testing.B) {
	msg, err := Names{}.NewSchemaVerdict(schemaVerdict(), time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
		WithPrevious(DigestPrefix+strings.Repeat("0a", 32)))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"impl=toolsentry", func() error { _, err := VerdictDigest(msg.Data); return err }},
		{"impl=jcs.Transform", func() error { _, err := jcs.Transform(msg.Data); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(msg.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verdicts/s")
		})
	}
}

// TestCanonicalizeRandom holds the fast canonical form to jcs.Transform on
// random documents: names and strings from every range RFC 8785 orders or
// escapes differently, numbers of every form, written with random escapes
// and white space.
func TestCanonicalizeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	runes := []rune{'a', 'b', 'A', '"', '\\', '/', 0, 0x08, 0x0c, '\n', '\r', '\t', 0x1f, 0x7f, 0x80, 0xe9, 0x2028, 0xd7ff, 0xe000, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	numbers := []string{"0", "-0", "1", "-1", "10", "123456789012345", "1234567890123456", "9007199254740993", "1e21", "1E-7", "0.000001", "1.5", "-2.50", "1e+2", "5e-324", "1.7976931348623157e308", "0.1", "100000000000000000000", "4.35", "1e-6", "-0.0"}
	var str func(b *bytes.Buffer)
	str = func(b *bytes.Buffer) {
		b.WriteByte('"')
		for range r.IntN(5) {
			c := runes[r.IntN(len(runes))]
			switch {
			case c < 0x20 || c == '"' || c == '\\' || r.IntN(4) == 0 && c < 0x10000:
				fmt.Fprintf(b, `\u%04x`, c)
			default:
				b.WriteRune(c)
			}
		}
		b.WriteByte('"')
	}
	var value func(b *bytes.Buffer, depth int)
	value = func(b *bytes.Buffer, depth int) {
		space := func() {
			if r.IntN(4) == 0 {
				b.WriteString(" \n\t\r"[r.IntN(4):][:1])
			}
		}
		space()
		switch k := r.IntN(8); {
		case k == 0 && depth < 5:
			b.WriteByte('{')
			seen := map[string]bool{}
			for i := range r.IntN(6) {
				var name bytes.Buffer
				str(&name)
				v, err := parseJSON(name.Bytes())
				if err != nil || seen[v.(string)] {
					continue
				}
				seen[v.(string)] = true
				if i > 0 && len(seen) > 1 {
					b.WriteByte(',')
				}
				space()
				b.Write(name.Bytes())
				space()
				b.WriteByte(':')
				value(b, depth+1)
			}
			b.WriteByte('}')
		case k == 1 && depth < 5:
			b.WriteByte('[')
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteByte(',')
				}
				value(b, depth+1)
			}
			b.WriteByte(']')
		case k == 2:
			str(b)
		case k == 3:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		default:
			b.WriteString(numbers[r.IntN(len(numbers))])
		}
		space()
	}
	checked := 0
	for range 3000 {
		var b bytes.Buffer
		b.WriteString(`{"specversion":"1.0","data":`)
		value(&b, 0)
		b.WriteByte('}')
		if _, err := parseJSON(b.Bytes()); err != nil {
			continue // a name repeated after decoding, say
		}
		checkCanonical(t, b.Bytes())
		if _, fast := checkChainLink(t, b.Bytes()); !fast {
			t.Errorf("fast path refused %s", b.Bytes())
		}
		checked++
	}
	if checked < 2000 {
		t.Errorf("only %d documents checked", checked)
	}
}

// chainLinkCases are bodies for ReadChainLink's fast path and its general
// one; fast says that the fast path takes the body.
var chainLinkCases = []struct {
	name, body string
	fast       bool
}{
	{"plain", digestBody, true},
	{"signed", strings.Replace(digestBody, `"id":"x"`, `"id":"x","dssematerial":"eyJ9"`, 1), true},
	{"signed, escaped", strings.Replace(digestBody, `"id":"x"`, `"id":"x","dssem\u0061terial":"ey\u004a9"`, 1), true},
	{"signature not a string", strings.Replace(digestBody, `"id":"x"`, `"id":"x","dssematerial":{"a":1}`, 1), true},
	{"signature null", strings.Replace(digestBody, `"id":"x"`, `"id":"x","dssematerial":null`, 1), true},
	{"previous null", strings.Replace(digestBody, `"sha256:0000000000000000000000000000000000000000000000000000000000000000"`, `null`, 1), true},
	{"previous escaped", strings.Replace(digestBody, `"sha256:0000`, `"sha256:\u0030000`, 1), true},
	{"no previous", `{"specversion":"1.0","data":{}}`, true},
	{"specversion null", `{"specversion":null}`, true},
	{"previous not a string", `{"specversion":"1.0","predecessorhash":7}`, false},
	{"signature twice", `{"specversion":"1.0","dssematerial":"a","dssematerial":"b"}`, false},
	{"previous twice", `{"specversion":"1.0","predecessorhash":"a","predecessorhash":"a"}`, false},
	{"no specversion", `{"id":"x","data":{}}`, false},
	{"specversion nested only", `{"data":{"specversion":"1.0"}}`, false},
	{"not an object", `["specversion"]`, false},
	{"not JSON", `{"specversion":"1.0",}`, false},
	{"trailing data", `{"specversion":"1.0"} {}`, false},
	{"long number", `{"specversion":"1.0","data":` + strings.Repeat("1", maxNumberLen+1) + `}`, false},
	{"invalid UTF-8", "{\"specversion\":\"1.0\",\"data\":\"\xff\"}", false},
	{"escaped surrogates", `{"specversion":"1.0","data":"\ud83d\ude00"}`, false},
}

// TestReadChainLinkFast holds ReadChainLink's fast path to its general
// one: where the fast path takes a body, the general path gives the same
// link, and parseJSON accepts the body.
func TestReadChainLinkFast(t *testing.T) {
	for _, tc := range chainLinkCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, fast := checkChainLink(t, []byte(tc.body)); fast != tc.fast {
				t.Errorf("fast path took it: %v, want %v", fast, tc.fast)
			}
		})
	}
	for _, tc := range canonCases {
		body := `{"specversion":"1.0","predecessorhash":"p","dssematerial":"s","data":` + tc.body + `}`
		if _, fast := checkChainLink(t, []byte(body)); fast != tc.fast {
			t.Errorf("%s: fast path took it: %v, want %v", tc.name, fast, tc.fast)
		}
	}
}

// checkChainLink compares ReadChainLink's fast path with its general one
// on body and reports the link and whether the fast path took the body.
func checkChainLink(t *testing.T, body []byte) (ChainLink, bool) {
	t.Helper()
	want, wantErr := readChainLink(body)
	got, fast := readChainLinkFast(body)
	if !fast {
		return want, false
	}
	if _, err := parseJSON(body); err != nil {
		t.Fatalf("fast path took %q, which parseJSON refuses: %v", body, err)
	}
	if wantErr != nil || got != want {
		t.Fatalf("ReadChainLink(%q): fast path %+v, general path %+v (%v)", body, got, want, wantErr)
	}
	return got, true
}
