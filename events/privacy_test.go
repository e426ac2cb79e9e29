package events

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// secret is a recognisable value that an agent might send as an argument.
const secret = "sk-live-PRIVATE-4242"

// TestArgumentValuesAreNeverKept: a value sent in arguments appears
// nowhere in the decoded event: not when it is marshalled, not when it is
// printed with %#v, not in the re-encoded message; only paths and types.
func TestArgumentValuesAreNeverKept(t *testing.T) {
	args := `{"api_key":"` + secret + `","nested":{"token":"` + secret + `","list":["` + secret + `",{"deep":"` + secret + `"}]},"escaped":"\u0073k-live-PRIVATE-4242 ` + secret + `"}`
	data := `{"agent_id":"a","tool_id":"crm.lookup","arguments":` + args + `}`
	messages := map[string]struct {
		header map[string][]string
		body   []byte
	}{
		"structured":  {nil, structured(invAttrs, data)},
		"data_base64": {nil, []byte(`{"specversion":"1.0",` + invAttrs + `,"data_base64":"` + base64.StdEncoding.EncodeToString([]byte(data)) + `"}`)},
		"binary":      {binHeader(), []byte(data)},
	}
	for name, m := range messages {
		t.Run(name, func(t *testing.T) {
			ev, err := Decode(invSubject, m.header, m.body)
			if err != nil {
				t.Fatal(err)
			}
			marshalled, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := Names{}.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			for what, s := range map[string]string{
				"json.Marshal": string(marshalled),
				"%#v":          fmt.Sprintf("%#v %#v", ev, *ev.Invocation),
				"re-encoded":   string(msg.Data),
			} {
				if strings.Contains(s, secret) || strings.Contains(s, "PRIVATE") {
					t.Errorf("%s of the decoded event holds the argument value:\n%s", what, s)
				}
			}
			want := []string{"api_key", "escaped", "nested", "nested.list", "nested.list[]", "nested.list[].deep", "nested.token"}
			if got := ev.Invocation.ArgumentTypes.Paths(); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("paths %v, want %v", got, want)
			}
		})
	}
}

// TestFieldTypesOfKeepsNoValues: the producer side, FieldTypesOf, gives the
// same paths and types, and its output holds no value either.
func TestFieldTypesOfKeepsNoValues(t *testing.T) {
	f, err := FieldTypesOf([]byte(`{"password":"` + secret + `","n":[1,2.5,"` + secret + `"]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":"array","n[]":["number","integer","string"],"password":"string"}`; string(b) != want {
		t.Errorf("FieldTypesOf = %s, want %s", b, want)
	}
	for _, bad := range []string{`[]`, `"x"`, `{`, ``} {
		if _, err := FieldTypesOf([]byte(bad)); err == nil {
			t.Errorf("FieldTypesOf(%q) succeeded", bad)
		}
	}
}

func TestFields(t *testing.T) {
	inv := Invocation{ArgumentTypes: FieldTypes{"b": 0, "a.c": 0}, UsedFields: []string{"b", "z", "a"}}
	if got, want := strings.Join(inv.Fields(), ","), "a,a.c,b,z"; got != want {
		t.Errorf("Fields() = %s, want %s", got, want)
	}
}

// TestDecodedEventsDoNotPinTheBody: a decoded event keeps none of the
// message's memory alive (the parser's strings share one copy of the body,
// argument values included): 40 events decoded from 512 KiB bodies and
// kept hold far less than the 20 MiB of their bodies.
func TestDecodedEventsDoNotPinTheBody(t *testing.T) {
	const n, size = 40, 512 << 10
	filler := strings.Repeat("x", size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := make([]Event, 0, n)
	for i := 0; i < n; i++ {
		attrs := `"id":"e-` + strconv.Itoa(i) + `","source":"agents/billing","type":"io.toolsentry.tool.invocation.v1","subject":"crm.lookup","time":"2026-11-29T10:00:00Z","traceparent":"00-x"`
		body := structured(attrs, `{"agent_id":"agent-7","tool_id":"crm.lookup","tool_version":"2","trace_id":"t","arguments":{"blob":"`+filler+`"},"used_fields":["blob"],"outcome":{"status":"ok","error_type":"E"}}`)
		ev, err := Decode(invSubject, nil, body)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, ev)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > n*size/8 {
		t.Errorf("%d decoded events hold %d KiB: they pin their bodies", n, grown>>10)
	}
	runtime.KeepAlive(kept)
}
