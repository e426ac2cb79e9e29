package schemas

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCompileForeignSchema(t *testing.T) {
	const input = `{"type":"object","properties":{"q":{"type":"string","pattern":"^[a-z]+$"},"perPage":{"type":"integer"}},"required":["q"],"additionalProperties":false}`
	s, err := Compile("search_issues input", []byte(input))
	if err != nil {
		t.Fatal(err)
	}
	decode := func(payload string) any {
		var v any
		if err := json.Unmarshal([]byte(payload), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := s.Conforms(decode(`{"q":"x","perPage":5}`)); err != nil {
		t.Errorf("a conforming payload: %v", err)
	}
	for _, c := range []struct{ payload, want, secret string }{
		{`{"q":"x","per_page":5}`, `at /: unexpected "per_page"`, ""},
		{`{"perPage":5}`, `at /: missing required "q"`, ""},
		{`{"q":"x","perPage":"five-secret"}`, `at /perPage: got string, want integer`, "five-secret"},
		{`{"q":"SECRET"}`, `at /q: fails pattern`, "SECRET"},
	} {
		err := s.Conforms(decode(c.payload))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "search_issues input") {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.payload, err, c.want)
		}
		if c.secret != "" && strings.Contains(err.Error(), c.secret) {
			t.Errorf("%s: the error %q quotes the payload's value", c.payload, err)
		}
	}
}

func TestCompileRefusesOutsideDocuments(t *testing.T) {
	for _, doc := range []string{
		`{"$ref":"https://example.com/other.json"}`,
		`{"$ref":"file:///etc/passwd"}`,
		`{"type":`,
		`{"type":"no-such-type"}`,
	} {
		if _, err := Compile("tool", []byte(doc)); !errors.Is(err, ErrForeignSchema) {
			t.Errorf("Compile(%s) = %v, want ErrForeignSchema", doc, err)
		}
	}
	// A $ref inside the document is fine.
	s, err := Compile("tool", []byte(`{"$defs":{"id":{"type":"string"}},"type":"object","properties":{"id":{"$ref":"#/$defs/id"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Conforms(map[string]any{"id": 1.0}); err == nil {
		t.Error("an integer id conforms")
	}
}
