package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// headerText writes headers as "Name: value" lines, the form FuzzDecode
// mutates.
func headerText(h map[string][]string) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func parseHeaderText(s string) map[string][]string {
	if s == "" {
		return nil
	}
	h := map[string][]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		h[k] = append(h[k], v)
	}
	return h
}

// FuzzDecode: Decode never panics, and whatever it accepts Encode writes
// back so that Decode gives the same event again, on the same subject.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases(f) {
		f.Add(tc.subject, headerText(tc.header), tc.body)
	}
	for _, tc := range errorCases() {
		f.Add(tc.subject, headerText(tc.header), []byte(tc.body))
	}
	f.Add(invSubject, headerText(binHeader("ce-comment", "%22a%20b%22")), []byte(okData))
	for _, kind := range []Kind{KindBaselineAccepted, KindBaselineReset, KindAgentMigrated, KindAgentForgotten} {
		p := OperatorAction{ToolID: "crm.lookup", Operator: "ana", Reason: "r"}
		switch kind {
		case KindBaselineAccepted:
			p.Fingerprint = "sha256:ab"
		case KindAgentMigrated, KindAgentForgotten:
			p.AgentID = "bot"
		}
		m, err := Names{}.NewOperatorAction(Meta{ID: "op", Source: "cli"}, kind, p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.Subject, headerText(m.Header), m.Data)
	}
	f.Fuzz(func(t *testing.T, subject, header string, body []byte) {
		ev, err := Decode(subject, parseHeaderText(header), body)
		if err != nil {
			if _, ok := ReasonFor(err); !ok {
				t.Fatalf("an error without a reason: %v", err)
			}
			return
		}
		msg, err := Names{}.Encode(ev)
		if err != nil {
			t.Fatalf("Encode of a decoded event: %v\nevent: %+v", err, ev)
		}
		if msg.Subject != subject {
			t.Fatalf("re-encoded on %q, decoded from %q", msg.Subject, subject)
		}
		again, err := Decode(msg.Subject, msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(x))): %v\n%s", err, msg.Data)
		}
		if diff := diffEvent(ev, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// stdParse is the reference for parseJSON: encoding/json with UseNumber.
func stdParse(b []byte) (any, error) {
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// hasRefusedNumber reports whether a decoded tree holds a number literal
// longer than maxNumberLen or with an exponent beyond ±maxExp10 (counted
// here without parseJSON's code), which parseJSON refuses on purpose.
func hasRefusedNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		if len(x) > maxNumberLen {
			return true
		}
		if i := strings.IndexAny(string(x), "eE"); i >= 0 {
			digits := strings.TrimLeft(strings.TrimLeft(string(x[i+1:]), "+-"), "0")
			return len(digits) > 5 || len(digits) == 5 && digits > "10000"
		}
	case []any:
		for _, e := range x {
			if hasRefusedNumber(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasRefusedNumber(e) {
				return true
			}
		}
	}
	return false
}

var parseSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `"a\u00e9\ud83d\ude00\n"`, `"\ud800"`, `"\ud800\u0041"`,
	`{"a":[1,{"b":null}],"c":"\\\"/"}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, ` [ 1 , 2 ] `, `01`, `1.`, `.5`, `1e`, `-`,
	`{"a" 1}`, `[1,]`, `{"a":1,}`, "\"\x01\"", `"\x"`, `nul`, `{} x`, "\"\xff\"", `1E400`, `"` + strings.Repeat("a", 100) + `"`,
}

// FuzzParseJSON checks the single-pass parser against encoding/json: it
// accepts exactly what encoding/json accepts, minus text that is not UTF-8,
// repeated member names, over-long numbers and exponents beyond ±maxExp10,
// and builds the same tree.
func FuzzParseJSON(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseJSON(b)
		want, stdErr := stdParse(b)
		var pe *pathError
		switch {
		case stdErr != nil:
			if err == nil {
				t.Fatalf("parseJSON accepts %q, encoding/json does not: %v", b, stdErr)
			}
		case !utf8.Valid(b):
			if err == nil {
				t.Fatalf("parseJSON accepts invalid UTF-8 %q", b)
			}
		case errors.As(err, &pe):
			if pe.msg == "" && !hasDuplicate(b) {
				t.Fatalf("parseJSON reports a repeated member in %q: %v", b, err)
			}
			if pe.msg != "" && !hasRefusedNumber(want) {
				t.Fatalf("parseJSON reports a long number or a huge exponent in %q: %v", b, err)
			}
		case err != nil:
			t.Fatalf("parseJSON refuses %q: %v", b, err)
		default:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("parseJSON(%q) (-encoding/json +parseJSON):\n%s", b, diff)
			}
		}
	})
}

// hasDuplicate reports, with encoding/json's tokenizer, whether some object
// in b repeats a member name.
func hasDuplicate(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		names  map[string]bool
		key    bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{object: true, names: map[string]bool{}, key: true})
			case '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.key {
				if top.names[v] {
					return true
				}
				top.names[v] = true
				top.key = false
				continue
			}
			if top != nil && top.object {
				top.key = true
			}
		default:
			if top != nil && top.object {
				top.key = true
			}
		}
	}
}

func TestParseJSONSeeds(t *testing.T) {
	for _, s := range parseSeeds {
		_, err := parseJSON([]byte(s))
		_, stdErr := stdParse([]byte(s))
		var pe *pathError
		if (err == nil) != (stdErr == nil) && !errors.As(err, &pe) && utf8.ValidString(s) {
			t.Errorf("%q: parseJSON %v, encoding/json %v", s, err, stdErr)
		}
	}
	if _, err := parseJSON([]byte(`{"a":{"b":[0,{"c":1,"c":2}]}}`)); err == nil || err.Error() != "member /a/b/1/c repeated" {
		t.Errorf("repeated member: %v", err)
	}
	if v, err := parseJSON([]byte(`"\ud800\u0041"`)); err != nil || v != "\uFFFDA" {
		t.Errorf("lone surrogate: %q, %v", v, err)
	}
	deep := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	if _, err := parseJSON([]byte(deep)); err == nil {
		t.Error("nesting beyond maxJSONDepth accepted")
	}
}

func TestIsIntegerLiteral(t *testing.T) {
	for lit, want := range map[string]bool{
		"0": true, "-7": true, "1.0": true, "1.50": false, "1e2": true, "1.5e1": true, "1.55e1": false,
		"1e-2": false, "100e-2": true, "0.0e-5": true, "-0": true, "12345678901234567890123": true,
		"1e999999999999": true, "1e-999999999999": false, "0e-999999999999": true, "2.5E+0": false, "2.5E+1": true,
	} {
		if got := isIntegerLiteral(lit); got != want {
			t.Errorf("isIntegerLiteral(%s) = %v, want %v", lit, got, want)
		}
	}
}
