package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func decodeTestJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := decodeJSONValue([]byte(s))
	if err != nil {
		t.Fatalf("decoding %s: %v", s, err)
	}
	return v
}

func encodeTestJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %v: %v", v, err)
	}
	return string(b)
}

var migrationApplyCases = []struct {
	name    string
	plan    MigrationPlan
	payload string
	want    string // the migrated payload, or
	wantErr string // the path a *MigrationError names
}{
	{"move", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: "user_id", To: "userId"}}},
		`{"user_id":"u1","q":1}`, `{"q":1,"userId":"u1"}`, ""},
	{"move absent field", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: "user_id", To: "userId"}}},
		`{"q":1}`, `{"q":1}`, ""},
	{"move onto a taken name", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: "user_id", To: "userId"}}},
		`{"user_id":"a","userId":"b"}`, "", "user_id"},
	{"move in array items", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: "assignees[].user_login", To: "assignees[].userLogin"}}},
		`{"assignees":[{"user_login":"a"},{"user_login":"b"},"x"]}`, `{"assignees":[{"userLogin":"a"},{"userLogin":"b"},"x"]}`, ""},
	{"move parent then child", MigrationPlan{Steps: []MigrationStep{
		{Op: OpMove, Path: "label_filter", To: "labelFilter"},
		{Op: OpMove, Path: "labelFilter.label_names", To: "labelFilter.labelNames"}}},
		`{"label_filter":{"label_names":["bug"]}}`, `{"labelFilter":{"labelNames":["bug"]}}`, ""},
	{"move at every depth of a recursion", MigrationPlan{Steps: []MigrationStep{
		{Op: OpMove, Path: "filter(.and[]|.or[])*.op", To: "filter(.and[]|.or[])*.operator"}}},
		`{"filter":{"op":"eq","and":[{"op":"lt","or":[{"op":"gt"}]}]}}`,
		`{"filter":{"and":[{"operator":"lt","or":[{"operator":"gt"}]}],"operator":"eq"}}`, ""},
	{"move renaming the recursion's own key", MigrationPlan{Steps: []MigrationStep{
		{Op: OpMove, Path: "(.children[])*.kids", To: "(.children[])*.children"}}},
		`{"kids":[{"kids":[{"name":"x"}]}]}`, `{"children":[{"children":[{"name":"x"}]}]}`, ""},
	{"convert string to integer", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "limit", Type: "integer"}}},
		`{"limit":"42"}`, `{"limit":42}`, ""},
	{"convert keeps numbers as written", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "price", Type: "number"}}},
		`{"price":"1.50"}`, `{"price":1.50}`, ""},
	{"convert lossy", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "items[].qty", Type: "integer"}}},
		`{"items":[{"qty":"1"},{"qty":"two"}]}`, "", "items[1].qty"},
	{"convert leading zero is not lossless", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "n", Type: "integer"}}},
		`{"n":"007"}`, "", "n"},
	{"convert number to integer", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "n", Type: "integer"}}},
		`{"n":5.0}`, `{"n":5}`, ""},
	{"convert fraction to integer", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "n", Type: "integer"}}},
		`{"n":5.5}`, "", "n"},
	{"convert string to boolean", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "b", Type: "boolean"}}},
		`{"b":"true"}`, `{"b":true}`, ""},
	{"convert yes to boolean", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "b", Type: "boolean"}}},
		`{"b":"yes"}`, "", "b"},
	{"convert to string", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "ids[]", Type: "string"}}},
		`{"ids":[12,true,"x",null]}`, `{"ids":["12","true","x",null]}`, ""},
	{"convert an object", MigrationPlan{Steps: []MigrationStep{{Op: OpConvert, Path: "v", Type: "string"}}},
		`{"v":{"a":1}}`, "", "v"},
	{"map_enum", MigrationPlan{Steps: []MigrationStep{{Op: OpMapEnum, Path: "state", Mapping: map[string]string{"open": "OPEN"}}}},
		`{"state":"open"}`, `{"state":"OPEN"}`, ""},
	{"add_if_absent", MigrationPlan{Steps: []MigrationStep{{Op: OpAddIfAbsent, Path: "dry", Value: json.RawMessage(`false`)}}},
		`{"q":"x"}`, `{"dry":false,"q":"x"}`, ""},
	{"add_if_absent keeps a sent value", MigrationPlan{Steps: []MigrationStep{{Op: OpAddIfAbsent, Path: "dry", Value: json.RawMessage(`false`)}}},
		`{"dry":true}`, `{"dry":true}`, ""},
	{"add_if_absent needs the parent", MigrationPlan{Steps: []MigrationStep{{Op: OpAddIfAbsent, Path: "opts.retries", Value: json.RawMessage(`3`)}}},
		`{"q":"x"}`, `{"q":"x"}`, ""},
	{"blocked when present", MigrationPlan{Blocked: []MigrationBlocker{{Path: "legacy", When: BlockWhenPresent, Reason: "removed"}}},
		`{"legacy":null}`, "", "legacy"},
	{"not blocked when absent", MigrationPlan{Blocked: []MigrationBlocker{{Path: "legacy", When: BlockWhenPresent, Reason: "removed"}}},
		`{"q":1}`, `{"q":1}`, ""},
	{"blocked when absent", MigrationPlan{Blocked: []MigrationBlocker{{Path: "rows[].id", When: BlockWhenAbsent, Reason: "required"}}},
		`{"rows":[{"id":1},{}]}`, "", "rows[1].id"},
	{"blocked value", MigrationPlan{Blocked: []MigrationBlocker{{Path: "state", When: BlockWhenValue, Values: []json.RawMessage{json.RawMessage(`"all"`)}}}},
		`{"state":"all"}`, "", "state"},
	{"blocked value compares canonically", MigrationPlan{Blocked: []MigrationBlocker{{Path: "n", When: BlockWhenValue, Values: []json.RawMessage{json.RawMessage(`1.0`)}}}},
		`{"n":1}`, "", "n"},
	{"value outside an enum", MigrationPlan{Blocked: []MigrationBlocker{{Path: "mode", When: BlockWhenNotIn, Values: []json.RawMessage{json.RawMessage(`"a"`)}}}},
		`{"mode":"b"}`, "", "mode"},
	{"blockers see the migrated payload", MigrationPlan{
		Steps:   []MigrationStep{{Op: OpMapEnum, Path: "s", Mapping: map[string]string{"open": "OPEN"}}},
		Blocked: []MigrationBlocker{{Path: "s", When: BlockWhenNotIn, Values: []json.RawMessage{json.RawMessage(`"OPEN"`)}}}},
		`{"s":"open"}`, `{"s":"OPEN"}`, ""},
	{"root array", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: "[].a", To: "[].b"}}},
		`[{"a":1},{"c":2}]`, `[{"b":1},{"c":2}]`, ""},
	{"escaped names", MigrationPlan{Steps: []MigrationStep{{Op: OpMove, Path: `a\.b`, To: `c\[d\]`}}},
		`{"a.b":1}`, `{"c[d]":1}`, ""},
}

func TestMigrationApply(t *testing.T) {
	for _, tc := range migrationApplyCases {
		t.Run(tc.name, func(t *testing.T) {
			payload := decodeTestJSON(t, tc.payload)
			got, err := tc.plan.Apply(payload)
			if tc.wantErr != "" {
				var me *MigrationError
				if !errors.As(err, &me) || me.Path != tc.wantErr || !errors.Is(err, ErrCannotMigrate) {
					t.Fatalf("Apply = %v, %v; want a MigrationError at %q", got, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q does not name the path", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if diff := cmp.Diff(tc.want, encodeTestJSON(t, got)); diff != "" {
				t.Errorf("migrated payload (-want +got):\n%s", diff)
			}
			if again := encodeTestJSON(t, payload); again != encodeTestJSON(t, decodeTestJSON(t, tc.payload)) {
				t.Errorf("Apply modified its input: %s", again)
			}
		})
	}
}

func TestMigrationApplyRejectsMalformedPlans(t *testing.T) {
	for name, plan := range map[string]MigrationPlan{
		"unknown op":             {Steps: []MigrationStep{{Op: "delete", Path: "a"}}},
		"move across parents":    {Steps: []MigrationStep{{Op: OpMove, Path: "a.b", To: "c.b"}}},
		"move into items":        {Steps: []MigrationStep{{Op: OpMove, Path: "a", To: "a[]"}}},
		"convert to object":      {Steps: []MigrationStep{{Op: OpConvert, Path: "a", Type: "object"}}},
		"add without a value":    {Steps: []MigrationStep{{Op: OpAddIfAbsent, Path: "a"}}},
		"add to the root":        {Steps: []MigrationStep{{Op: OpAddIfAbsent, Path: "", Value: json.RawMessage(`1`)}}},
		"bad path":               {Steps: []MigrationStep{{Op: OpConvert, Path: "a..b", Type: "string"}}},
		"unclosed repetition":    {Steps: []MigrationStep{{Op: OpConvert, Path: "a(.b", Type: "string"}}},
		"empty repetition":       {Steps: []MigrationStep{{Op: OpConvert, Path: "a()*", Type: "string"}}},
		"unknown blocker":        {Blocked: []MigrationBlocker{{Path: "a", When: "sometimes"}}},
		"blocker value not JSON": {Blocked: []MigrationBlocker{{Path: "a", When: BlockWhenValue, Values: []json.RawMessage{json.RawMessage(`{`)}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := plan.Apply(map[string]any{"a": "1"}); !errors.Is(err, guards.ErrInvalid) {
				t.Errorf("Apply = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestSchemaPathRoundTrip(t *testing.T) {
	for _, p := range []string{"", "a", "a.b", "a[]", "a[].b", "[]", "[].id", "a[][]", `a\.b.c\[\]`, `x\\`,
		"filter(.and[])*.op", "(.and[]|.or[])*.op", "a(.b|[])*", `a(.b\|c)*.d`} {
		toks, err := parseSchemaPath(p)
		if err != nil {
			t.Errorf("parseSchemaPath(%q): %v", p, err)
			continue
		}
		if got := formatSchemaPath(toks); got != p {
			t.Errorf("formatSchemaPath(parseSchemaPath(%q)) = %q", p, got)
		}
	}
	for _, p := range []string{".a", "a.", "a..b", "a[", "a]", "a*", "(a", "a()*", "a(.b)", `a\`, "((.a)*)*"} {
		if _, err := parseSchemaPath(p); !errors.Is(err, guards.ErrInvalid) {
			t.Errorf("parseSchemaPath(%q) = %v, want ErrInvalid", p, err)
		}
	}
	if got := JoinSchemaPath(JoinSchemaPath("", "a.b"), "c(1)"); got != `a\.b.c\(1\)` {
		t.Errorf("JoinSchemaPath escapes to %q", got)
	}
}

func TestMigrationPlanJSON(t *testing.T) {
	plan := MigrationPlan{
		Steps: []MigrationStep{
			{Op: OpMove, Path: "user_id", To: "userId", Reason: "renamed"},
			{Op: OpAddIfAbsent, Path: "dry", Value: json.RawMessage(`false`), Reason: "pinned"},
			{Op: OpConvert, Path: "limit", Type: "integer", Reason: "retyped"},
			{Op: OpMapEnum, Path: "state", Mapping: map[string]string{"open": "OPEN", "closed": "CLOSED"}, Reason: "respelled"},
		},
		Blocked: []MigrationBlocker{{Path: "state", When: BlockWhenValue, Values: []json.RawMessage{json.RawMessage(`"all"`)}, Reason: "removed"}},
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"steps":[{"op":"move","path":"user_id","to":"userId","reason":"renamed"},` +
		`{"op":"add_if_absent","path":"dry","value":false,"reason":"pinned"},` +
		`{"op":"convert","path":"limit","type":"integer","reason":"retyped"},` +
		`{"op":"map_enum","path":"state","mapping":{"closed":"CLOSED","open":"OPEN"},"reason":"respelled"}],` +
		`"blocked":[{"path":"state","when":"value","values":["all"],"reason":"removed"}]}`
	if string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}
	var back MigrationPlan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plan, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	got, err := back.Apply(decodeTestJSON(t, `{"user_id":"u","limit":"5","state":"closed"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := encodeTestJSON(t, got); s != `{"dry":false,"limit":5,"state":"CLOSED","userId":"u"}` {
		t.Errorf("applied = %s", s)
	}
}

// countLeaves counts the scalar values and empty containers of a payload.
func countLeaves(v any) int {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return 1
		}
		n := 0
		for _, e := range x {
			n += countLeaves(e)
		}
		return n
	case []any:
		if len(x) == 0 {
			return 1
		}
		n := 0
		for _, e := range x {
			n += countLeaves(e)
		}
		return n
	}
	return 1
}

func FuzzMigrationApply(f *testing.F) {
	plans := make([][]byte, 0, len(migrationApplyCases))
	for _, tc := range migrationApplyCases {
		b, err := json.Marshal(tc.plan)
		if err != nil {
			f.Fatal(err)
		}
		plans = append(plans, b)
		f.Add(b, []byte(tc.payload))
	}
	f.Fuzz(func(t *testing.T, planJSON, payloadJSON []byte) {
		var plan MigrationPlan
		if err := json.Unmarshal(planJSON, &plan); err != nil {
			return
		}
		payload, err := decodeJSONValue(payloadJSON)
		if err != nil {
			return
		}
		before := encodeTestJSON(t, payload)
		got, err := plan.Apply(payload)
		if after := encodeTestJSON(t, payload); after != before {
			t.Fatalf("Apply modified its input: %s -> %s", before, after)
		}
		if err != nil {
			if !errors.Is(err, ErrCannotMigrate) && !errors.Is(err, guards.ErrInvalid) {
				t.Fatalf("error %v is neither ErrCannotMigrate nor ErrInvalid", err)
			}
			return
		}
		out, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("migrated payload is not JSON: %v", err)
		}
		// Plans made by the planner never drop data: moves keep values,
		// conversions replace one value by one, pins only add.
		planner := false
		for _, p := range plans {
			planner = planner || bytes.Equal(p, planJSON)
		}
		if planner && countLeaves(got) < countLeaves(payload) {
			t.Fatalf("migration lost values: %s -> %s", before, out)
		}
	})
}
