package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/guards"
)

// checkPlainVerdict encodes ev with and without the field by field check of
// a schema verdict and fails unless both give the same message or both
// fail: the check must never accept what Decode refuses. It reports
// whether the check took the verdict.
func checkPlainVerdict(t *testing.T, ev Event) bool {
	t.Helper()
	n := Names{}
	withCheck, err1 := n.encode(ev, true)
	decoded, err2 := n.encode(ev, false)
	// (Decode's error is the same either way; its text may list schema
	// violations in another order.)
	if (err1 == nil) != (err2 == nil) || err1 != nil && !errors.Is(err1, ErrBadEvent) {
		t.Fatalf("%+v:\nwith the field check: %v\ndecoded: %v", ev.SchemaVerdict, err1, err2)
	}
	if err1 != nil {
		return false
	}
	if withCheck.Subject != decoded.Subject || withCheck.ID != decoded.ID || !bytes.Equal(withCheck.Data, decoded.Data) {
		t.Fatalf("messages differ:\n%s\n%s", withCheck.Data, decoded.Data)
	}
	if ev.Type == "" {
		ev.Type = ev.Kind.Type()
	}
	return plainSchemaVerdict(&ev)
}

func schemaVerdictEvent(v SchemaVerdict) Event {
	return Event{
		Kind: KindSchemaVerdict, ID: VerdictID(KindSchemaVerdict, v.InputEventID, v.ToolID, v.AgentID, v.ManifestDigest),
		Source: "toolsentry", Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Subject: v.ToolID, SchemaVerdict: &v,
		Extensions: map[string]string{AttrPrevious: DigestPrefix + strings.Repeat("0a", 32)},
	}
}

// TestPlainSchemaVerdict: the field by field check takes the verdicts the
// core writes, and leaves every verdict that Decode would refuse, or that
// it does not recognise as plainly valid, to Decode.
func TestPlainSchemaVerdict(t *testing.T) {
	base := schemaVerdict()
	base.Migration = json.RawMessage(`{"steps":[],"blockers":[]}`)
	for _, tc := range []struct {
		name  string
		edit  func(*Event)
		plain bool
	}{
		{"as the core writes it", func(*Event) {}, true},
		{"no agent, no chain link, no time", func(e *Event) { e.SchemaVerdict.AgentID = ""; e.Extensions = nil; e.Time = time.Time{} }, true},
		{"no subject attribute", func(e *Event) { e.Subject = "" }, true},
		{"null raw values", func(e *Event) {
			e.SchemaVerdict.Changes, e.SchemaVerdict.Affected, e.SchemaVerdict.Migration = nil, json.RawMessage(`null`), json.RawMessage(" null ")
		}, true},
		{"raw values with white space", func(e *Event) { e.SchemaVerdict.Changes = json.RawMessage(" [ {\"a\" : 1} ]\n") }, true},
		{"longest ids", func(e *Event) {
			e.SchemaVerdict.ToolID, e.SchemaVerdict.AgentID = strings.Repeat("é", 128), strings.Repeat("a", 128)
			e.SchemaVerdict.GuardVersion, e.SchemaVerdict.Version = strings.Repeat("1", 128), strings.Repeat("v", 128)
			e.Subject = e.SchemaVerdict.ToolID
		}, true},
		{"largest sequence", func(e *Event) { e.SchemaVerdict.InputSequence = 1<<64 - 1 }, true},
		{"non-ASCII strings", func(e *Event) { e.SchemaVerdict.Directive = "HALT: “user_id” → <userId> & more" }, true},
		{"an action and a summary", func(e *Event) {
			e.SchemaVerdict.Action, e.SchemaVerdict.Summary = guards.ActionMigrate, "agent-7 must send userId instead of user_id; migration available"
		}, true},
		{"the longest summary", func(e *Event) { e.SchemaVerdict.Summary = strings.Repeat("é", MaxSummaryLen) }, true},
		// Refused by Decode.
		{"tool id too long", func(e *Event) { e.SchemaVerdict.ToolID = strings.Repeat("é", 129); e.Subject = e.SchemaVerdict.ToolID }, false},
		{"agent id too long", func(e *Event) { e.SchemaVerdict.AgentID = strings.Repeat("a", 129) }, false},
		{"version too long", func(e *Event) { e.SchemaVerdict.Version = strings.Repeat("v", 129) }, false},
		{"fingerprint too long", func(e *Event) { e.SchemaVerdict.CurrentFingerprint = strings.Repeat("f", 257) }, false},
		{"no directive", func(e *Event) { e.SchemaVerdict.Directive = "" }, false},
		{"an unknown action", func(e *Event) { e.SchemaVerdict.Action = "GO" }, false},
		{"summary too long", func(e *Event) { e.SchemaVerdict.Summary = strings.Repeat("é", MaxSummaryLen+1) }, false},
		{"summary not UTF-8", func(e *Event) { e.SchemaVerdict.Summary = "a \xff" }, false},
		{"no guard version", func(e *Event) { e.SchemaVerdict.GuardVersion = "" }, false},
		{"no input event", func(e *Event) { e.SchemaVerdict.InputEventID = "" }, false},
		{"no input subject", func(e *Event) { e.SchemaVerdict.InputSubject = "" }, false},
		{"upper-case digest", func(e *Event) { e.SchemaVerdict.ManifestDigest = strings.ToUpper(e.SchemaVerdict.ManifestDigest) }, false},
		{"short digest", func(e *Event) { e.SchemaVerdict.ManifestDigest = e.SchemaVerdict.ManifestDigest[1:] }, false},
		{"verdict name too long", func(e *Event) { e.SchemaVerdict.Verdict = guards.SchemaVerdict("D" + strings.Repeat("_", 64)) }, false},
		{"changes an object", func(e *Event) { e.SchemaVerdict.Changes = json.RawMessage(`{}`) }, false},
		{"affected a string", func(e *Event) { e.SchemaVerdict.Affected = json.RawMessage(`"a"`) }, false},
		{"migration a number", func(e *Event) { e.SchemaVerdict.Migration = json.RawMessage(`1`) }, false},
		{"raw with a repeated member", func(e *Event) { e.SchemaVerdict.Changes = json.RawMessage(`[{"a":1,"a":2}]`) }, false},
		{"raw with an overlong number", func(e *Event) { e.SchemaVerdict.Affected = json.RawMessage(`[` + strings.Repeat("1", 65) + `]`) }, false},
		{"raw not UTF-8", func(e *Event) { e.SchemaVerdict.Changes = json.RawMessage("[\"\xff\"]") }, false},
		{"subject attribute of another key", func(e *Event) { e.Subject = "other" }, false},
		{"type of another kind", func(e *Event) { e.Type = TypeCompositionVerdict }, false},
		{"source not a URI-reference", func(e *Event) { e.Source = "%zz" }, false},
		{"source with a control character", func(e *Event) { e.Source = "a\x7f" }, false},
		{"no id", func(e *Event) { e.ID = "" }, false},
		{"extension shadowing an attribute", func(e *Event) { e.Extensions = map[string]string{"id": "x"} }, false},
		{"extension name not a-z0-9", func(e *Event) { e.Extensions = map[string]string{"Tenant": "x"} }, false},
		{"time beyond year 9999", func(e *Event) { e.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		{"tool id with a control character", func(e *Event) { e.SchemaVerdict.ToolID = "a\nb"; e.Subject = "a\nb" }, false},
		// Accepted by Decode, but not plainly: left to it.
		{"another extension", func(e *Event) { e.Extensions = map[string]string{"traceparent": "00-1"} }, false},
		{"dataschema", func(e *Event) { e.DataSchema = "https://example.com/s" }, false},
		{"escaped surrogates in raw", func(e *Event) { e.SchemaVerdict.Affected = json.RawMessage(`["\ud83d\ude00"]`) }, false},
		{"directive not UTF-8", func(e *Event) { e.SchemaVerdict.Directive = "HALT \xff" }, false},
		{"year 0", func(e *Event) { e.Time = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := schemaVerdictEvent(base)
			sv := *ev.SchemaVerdict
			ev.SchemaVerdict = &sv
			tc.edit(&ev)
			if plain := checkPlainVerdict(t, ev); plain != tc.plain {
				t.Errorf("field check took it: %v, want %v", plain, tc.plain)
			}
		})
	}
}

// FuzzEncodeSchemaVerdict: the field by field check of a schema verdict
// never accepts what Decode refuses, and Encode writes the same either way.
func FuzzEncodeSchemaVerdict(f *testing.F) {
	v := schemaVerdict()
	f.Add(string(v.Verdict), v.Directive, v.ManifestDigest, v.ToolID, v.AgentID, v.Version, v.BaselineFingerprint,
		`[{"path":"user_id"}]`, `["user_id"]`, `{"steps":[]}`, v.GuardVersion, v.InputEventID, uint64(7), "toolsentry", int64(1795000000), "", "MIGRATE", "agent-7 must send userId instead of user_id; migration available")
	f.Add("NO_BASELINE", "PROCEED", strings.Repeat("0", 64), "é", "", "", "", `[]`, `null`, `[]`, "1", "e", uint64(0), "a:b", int64(0), "traceparent", "", "")
	f.Fuzz(func(t *testing.T, verdict, directive, digest, tool, agent, version, fp, changes, affected, migration, guardVersion, input string, seq uint64, source string, unix int64, ext, action, summary string) {
		sv := SchemaVerdict{
			Verdict: guards.SchemaVerdict(verdict), Directive: directive, Action: guards.Action(action), Summary: summary,
			ManifestDigest: digest, ToolID: tool, AgentID: agent,
			Version: version, BaselineFingerprint: fp, CurrentFingerprint: fp, GuardVersion: guardVersion,
			InputEventID: input, InputSubject: input, InputSequence: seq,
		}
		for _, r := range []struct {
			dst *json.RawMessage
			s   string
		}{{&sv.Changes, changes}, {&sv.Affected, affected}, {&sv.Migration, migration}} {
			if r.s != "" {
				*r.dst = json.RawMessage(r.s)
			}
		}
		ev := schemaVerdictEvent(sv)
		ev.Source = source
		ev.Time = time.Unix(unix, 0)
		if ext != "" {
			ev.Extensions = map[string]string{ext: fp}
		}
		checkPlainVerdict(t, ev)
	})
}

// TestPlainVerdictName: plainVerdictName, which Names.Verdict uses, is
// verdictRE.
func TestPlainVerdictName(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"A", "Z", "a", "0", "9", "_", "-", " ", "é", "\n", "D"}
	cases := []string{"", "A", "SCHEMA_MATCH", "DRIFT_ON_USED_FIELDS", "a", "_A", "0A", "A" + strings.Repeat("_", 63), "A" + strings.Repeat("_", 64), "AB\n"}
	for range 5000 {
		var b strings.Builder
		for range r.IntN(70) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		if got, want := plainVerdictName(s), verdictRE.MatchString(s); got != want {
			t.Errorf("plainVerdictName(%q) = %v, verdictRE says %v", s, got, want)
		}
	}
}
