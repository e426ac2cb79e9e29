package events

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// structured returns a structured-mode body: the attributes (a JSON object's
// members without braces) and the data.
func structured(attrs, data string) []byte {
	return []byte(`{"specversion":"1.0",` + attrs + `,"data":` + data + `}`)
}

const invAttrs = `"id":"e-1","source":"agents/billing","type":"io.toolsentry.tool.invocation.v1","time":"2026-11-29T10:00:00Z"`

const invSubject = "toolsentry.telemetry.invocation.crm=2Elookup"

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UTC()
}

func ptr[T any](v T) *T { return &v }

// cmpOpts compares raw JSON by meaning.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b json.RawMessage) bool {
		if a == nil || b == nil {
			return a == nil && b == nil
		}
		var x, y any
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			return string(a) == string(b)
		}
		return cmp.Equal(x, y)
	}),
}

func diffEvent(want, got Event) string { return cmp.Diff(want, got, cmpOpts) }

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func mustBase64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
