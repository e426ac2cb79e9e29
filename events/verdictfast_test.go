package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/guards"
)

// verdictFastCases are schema verdict messages for
// TestDecodeSchemaVerdictFastPath and FuzzDecodeFastPath: the verdicts
// toolsentry writes (fast reports whether the fast path must read them),
// then hand-made variants around the edges of verdict.schema.v1.
func verdictFastCases(t testing.TB) []struct {
	name, subject string
	header        map[string][]string
	body          string
	fast          bool
} {
	t.Helper()
	type tc = struct {
		name, subject string
		header        map[string][]string
		body          string
		fast          bool
	}
	encode := func(sv SchemaVerdict) Message {
		msg, err := Names{}.NewSchemaVerdict(sv, time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	match := schemaVerdict()
	match.Verdict, match.Directive, match.AgentID = guards.SchemaMatch, "PROCEED", ""
	match.Action, match.Summary = guards.ActionProceed, "crm.lookup matches its baseline"
	match.Changes, match.Affected = json.RawMessage(`[]`), json.RawMessage(`[]`)
	match.Migration = json.RawMessage(`{"steps":[],"blocked":null}`) // as the core writes it
	drift := schemaVerdict()
	drift.Migration = json.RawMessage(`{"steps":[{"op":"rename","from":"user_id","to":"userId"}],"blocked":[]}`)
	drift.Action, drift.Summary = guards.ActionMigrate, "agent-7 must send userId instead of user_id; migration available"
	older := schemaVerdict() // written before verdicts had an action and a summary
	older.Action, older.Summary = "", ""
	nulls := schemaVerdict()
	nulls.Changes, nulls.Affected, nulls.Migration = nil, nil, nil
	unicode := match
	unicode.ToolID, unicode.Version = "outil.é", strings.Repeat("é", 128)

	var cases []tc
	for _, c := range []struct {
		name string
		sv   SchemaVerdict
	}{{"match", match}, {"drift with a migration", drift}, {"without action and summary", older}, {"nulls", nulls}, {"non-ASCII", unicode}} {
		msg := encode(c.sv)
		cases = append(cases, tc{c.name, msg.Subject, msg.Header, string(msg.Data), true})
	}
	base := encode(match)
	data := func(body string) string { // the data object of base's body
		_, d, _ := strings.Cut(body, `"data":`)
		return d[:len(d)-1]
	}
	okData := data(string(base.Data))
	attrs := `"id":"v-1","source":"toolsentry","type":"` + TypeSchemaVerdict + `","subject":"crm.lookup"`
	edit := func(name, old, new string) tc {
		if !strings.Contains(okData, old) {
			t.Fatalf("%s: %q is not in %s", name, old, okData)
		}
		return tc{name: name, subject: base.Subject, body: string(structured(attrs, strings.Replace(okData, old, new, 1)))}
	}
	fastEdit := func(name, old, new string) tc { // one the fast path must read
		c := edit(name, old, new)
		c.fast = true
		return c
	}
	cases = append(cases,
		tc{name: "plain attributes", subject: base.Subject, body: string(structured(attrs, okData)), fast: true},
		tc{name: "members in another order", subject: base.Subject, fast: true, body: string(structured(attrs,
			strings.Replace(strings.Replace(okData, `"verdict":"SCHEMA_MATCH",`, ``, 1), `"input_sequence":7`, `"input_sequence":7,"verdict":"SCHEMA_MATCH"`, 1)))},
		fastEdit("white space", `,"tool_id":`, " ,\n\t\"tool_id\" : "),
		fastEdit("an agent", `"tool_id":`, `"agent_id":"agent-7","tool_id":`),
		edit("an empty agent", `"tool_id":`, `"agent_id":"","tool_id":`),
		edit("a null agent", `"tool_id":`, `"agent_id":null,"tool_id":`),
		edit("an unknown member", `"tool_id":`, `"extra":1,"tool_id":`),
		edit("a repeated member", `"tool_id":`, `"version":"2","tool_id":`),
		edit("no version", `"version":"2",`, ``),
		fastEdit("an empty version", `"version":"2"`, `"version":""`),
		edit("a long version", `"version":"2"`, `"version":"`+strings.Repeat("v", 129)+`"`),
		edit("a long tool", `"tool_id":"crm.lookup"`, `"tool_id":"`+strings.Repeat("t", 129)+`"`),
		edit("an empty directive", `"directive":"PROCEED"`, `"directive":""`),
		fastEdit("an escaped directive", `"directive":"PROCEED"`, `"directive":"PRO\u0043EED \"now\"\n"`),
		edit("an unknown action", `"action":"PROCEED"`, `"action":"GO"`),
		edit("a lower-case action", `"action":"PROCEED"`, `"action":"proceed"`),
		edit("a null action", `"action":"PROCEED"`, `"action":null`),
		edit("an empty summary", `"summary":"crm.lookup matches its baseline"`, `"summary":""`),
		edit("a long summary", `"summary":"crm.lookup matches its baseline"`, `"summary":"`+strings.Repeat("s", MaxSummaryLen+1)+`"`),
		fastEdit("the longest summary", `"summary":"crm.lookup matches its baseline"`, `"summary":"`+strings.Repeat("é", MaxSummaryLen)+`"`),
		edit("a repeated action", `"tool_id":`, `"action":"HALT","tool_id":`),
		edit("a lower-case verdict", `"verdict":"SCHEMA_MATCH"`, `"verdict":"schema_match"`),
		edit("an upper-case digest", `"manifest_digest":"`+digest, `"manifest_digest":"`+strings.ToUpper(digest)),
		edit("a short digest", `"manifest_digest":"`+digest, `"manifest_digest":"`+digest[1:]),
		edit("a sequence written 7.0", `"input_sequence":7`, `"input_sequence":7.0`),
		edit("a sequence written 7e0", `"input_sequence":7`, `"input_sequence":7e0`),
		edit("a negative sequence", `"input_sequence":7`, `"input_sequence":-7`),
		fastEdit("the largest sequence", `"input_sequence":7`, `"input_sequence":18446744073709551615`),
		edit("a sequence beyond 64 bits", `"input_sequence":7`, `"input_sequence":18446744073709551616`),
		edit("a string sequence", `"input_sequence":7`, `"input_sequence":"7"`),
		edit("changes an object", `"changes":[]`, `"changes":{}`),
		fastEdit("changes with space", `"changes":[]`, `"changes":[ ]`),
		fastEdit("changes with values", `"changes":[]`, `"changes":[{"z":1,"a":[true,null,"x\u00e9"],"n":1.50}]`),
		edit("changes with a repeated name", `"changes":[]`, `"changes":[{"a":1,"a":2}]`),
		edit("affected a string", `"affected":[]`, `"affected":"user_id"`),
		fastEdit("migration an array", `"migration":{"steps":[],"blocked":null}`, `"migration":[{"op":"x"}]`),
		edit("migration a number", `"migration":{"steps":[],"blocked":null}`, `"migration":1`),
		fastEdit("migration null", `"migration":{"steps":[],"blocked":null}`, `"migration":null`),
		edit("no input sequence", `,"input_sequence":7`, ``),
		edit("a truncated body", `"input_sequence":7}`, `"input_sequence":7`),
		tc{name: "the subject of another tool", subject: strings.Replace(base.Subject, "crm=2Elookup", "crm=2Eother", 1), body: string(structured(attrs, okData))},
		tc{name: "the subject of another verdict", subject: strings.Replace(base.Subject, "schema_match", "no_baseline", 1), body: string(structured(attrs, okData))},
		tc{name: "data not an object", subject: base.Subject, body: string(structured(attrs, `[]`))},
		tc{name: "data null", subject: base.Subject, body: string(structured(attrs, `null`))},
		tc{name: "the type of a composition verdict", subject: base.Subject, body: string(structured(strings.Replace(attrs, TypeSchemaVerdict, TypeCompositionVerdict, 1), okData))},
	)
	return cases
}

// TestDecodeSchemaVerdictFastPath: on a schema verdict subject, Decode with
// the fast path returns what it returns without, error message included,
// and the verdicts toolsentry writes take the fast path.
func TestDecodeSchemaVerdictFastPath(t *testing.T) {
	for _, tc := range verdictFastCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			fast, fastErr := Names{}.decode(tc.subject, tc.header, []byte(tc.body), true)
			generic, genericErr := Names{}.decode(tc.subject, tc.header, []byte(tc.body), false)
			if fmt.Sprint(fastErr) != fmt.Sprint(genericErr) {
				t.Fatalf("error with the fast path %v, without %v\nbody: %s", fastErr, genericErr, tc.body)
			}
			if diff := diffEvent(generic, fast); diff != "" {
				t.Fatalf("event (-generic +fast):\n%s\nbody: %s", diff, tc.body)
			}
			if g, f := generic.SchemaVerdict, fast.SchemaVerdict; g != nil && f != nil {
				// diffEvent compares raw JSON by meaning; the paths write the same bytes.
				for _, raw := range [][2]json.RawMessage{{g.Changes, f.Changes}, {g.Affected, f.Affected}, {g.Migration, f.Migration}} {
					if string(raw[0]) != string(raw[1]) || (raw[0] == nil) != (raw[1] == nil) {
						t.Errorf("raw JSON %q without the fast path, %q with", raw[0], raw[1])
					}
				}
			}
			if !tc.fast {
				return
			}
			if fastErr != nil {
				t.Fatalf("refused: %v", fastErr)
			}
			if env, err := readEnvelope(tc.header, []byte(tc.body), KindSchemaVerdict); err != nil || env.sv == nil {
				t.Errorf("the fast path did not read the verdict (%v):\n%s", err, tc.body)
			}
		})
	}
}
