package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// storedMsg is one message of the telemetry stream, decoded.
type storedMsg struct {
	subject   string // as stored: <prefix>.telemetry.<kind>.<partition>.<key>
	published string // as published (events.Names.Published)
	msgID     string
	data      []byte
	event     events.Event
}

// streamMessages reads every message of a stream, in order, and decodes it.
func streamMessages(t *testing.T, ctx context.Context, js jetstream.JetStream, names events.Names, stream string) []storedMsg {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		ev, err := names.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("message %d on %s does not decode: %v", seq, m.Subject, err)
		}
		published, err := names.Published(m.Subject)
		if err != nil {
			t.Fatalf("message %d on %s: %v", seq, m.Subject, err)
		}
		out = append(out, storedMsg{subject: m.Subject, published: published, msgID: m.Header.Get(jetstream.MsgIDHeader), data: m.Data, event: ev})
	}
	return out
}

func TestEmitInputForms(t *testing.T) {
	toolsList, err := os.ReadFile("testdata/diff/tools_list_v1.json")
	if err != nil {
		t.Fatal(err)
	}
	type want struct{ subject, id string } // id "" : generated
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  []want
	}{
		{
			name: "one CloudEvent, pretty-printed",
			args: []string{"testdata/emit/invocation.json"},
			want: []want{{"toolsentry.telemetry.invocation.crm=2Elookup", "inv-1"}},
		},
		{
			name: "JSON Lines",
			args: []string{"testdata/emit/events.jsonl"},
			want: []want{
				{"toolsentry.telemetry.schema.crm=2Elookup", "obs-1"},
				{"toolsentry.telemetry.contract.crm=2Elookup", "con-1"},
				{"toolsentry.telemetry.workflow.checkout", "wf-1"},
			},
		},
		{
			name: "JSON array",
			args: []string{"testdata/emit/array.json"},
			want: []want{
				{"toolsentry.telemetry.invocation.crm=2Elookup", "inv-a"},
				{"toolsentry.telemetry.invocation.billing=2Echarge", "inv-b"},
			},
		},
		{
			name: "tools/list JSON-RPC response with --server",
			args: []string{"--server", "crm-mcp", "testdata/emit/tools_list_rpc.json"},
			want: []want{{"toolsentry.telemetry.schema.crm-mcp", ""}},
		},
		{
			name:  "tools/list result on stdin, flags after the file",
			stdin: string(toolsList),
			args:  []string{"-", "--server", "fs.local", "--source", "ci/probe"},
			want:  []want{{"toolsentry.telemetry.schema.fs=2Elocal", ""}},
		},
		{
			name: "CloudEvents with --server name that server's tools",
			args: []string{"--server", "crm-mcp", "testdata/emit/invocation.json", "testdata/emit/events.jsonl"},
			want: []want{
				{"toolsentry.telemetry.invocation.crm-mcp/crm=2Elookup", "inv-1"},
				{"toolsentry.telemetry.schema.crm-mcp/crm=2Elookup", "obs-1"},
				{"toolsentry.telemetry.contract.crm-mcp/crm=2Elookup", "con-1"},
				{"toolsentry.telemetry.workflow.checkout", "wf-1"},
			},
		},
		{
			name: "several files, mixed",
			args: []string{"testdata/emit/invocation.json", "testdata/emit/array.json"},
			want: []want{
				{"toolsentry.telemetry.invocation.crm=2Elookup", "inv-1"},
				{"toolsentry.telemetry.invocation.crm=2Elookup", "inv-a"},
				{"toolsentry.telemetry.invocation.billing=2Echarge", "inv-b"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startProvisioned(t, "")
			ctx := testCtx(t, cmdTimeout)
			_, errOut, code := runCtx(ctx, tc.stdin, append([]string{"emit", "--nats-url", srv.url}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if want := "published " + plural(len(tc.want), "event", "events") + " (0 duplicates)\n"; errOut != want {
				t.Errorf("stderr %q, want %q", errOut, want)
			}
			got := streamMessages(t, ctx, srv.js, events.Names{}, "TOOLSENTRY_TELEMETRY")
			if len(got) != len(tc.want) {
				t.Fatalf("%d messages in the stream, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.published != w.subject {
					t.Errorf("message %d published on %s, want %s", i, g.published, w.subject)
				}
				if g.msgID == "" || g.msgID != g.event.ID {
					t.Errorf("message %d: Nats-Msg-Id %q, CloudEvent id %q: want them equal", i, g.msgID, g.event.ID)
				}
				if w.id != "" && g.event.ID != w.id {
					t.Errorf("message %d: id %q, want %q", i, g.event.ID, w.id)
				}
				if w.id == "" { // a generated schema observation of the whole list
					obs := g.event.SchemaObserved
					if obs == nil || !obs.IsList() || len(obs.Tools) != 2 || obs.Tools[0].Name != "read_file" {
						t.Errorf("message %d: want a list observation of read_file and write_file, got %+v", i, obs)
					}
					wantSource := "toolsentry-emit"
					if slices.Contains(tc.args, "--source") {
						wantSource = "ci/probe"
					}
					if g.event.Source != wantSource || g.event.Time.IsZero() {
						t.Errorf("message %d: source %q time %v; want %q and a time", i, g.event.Source, g.event.Time, wantSource)
					}
				}
			}
		})
	}
}

func TestEmitGeneratesNewIDsPerObservation(t *testing.T) {
	r := &emitReader{names: events.Names{}, server: "s", source: "x", now: time.Now}
	raw, err := os.ReadFile("testdata/emit/tools_list_rpc.json")
	if err != nil {
		t.Fatal(err)
	}
	r.read("a", raw)
	r.read("b", raw)
	if len(r.problems) != 0 || len(r.events) != 2 || r.events[0].msg.ID == r.events[1].msg.ID {
		t.Errorf("two observations of one list: problems %v, %d events, ids equal: want 2 events with distinct ids", r.problems, len(r.events))
	}
}

func TestEmitTwiceStoresOnce(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	for i, want := range []string{"published 3 events (0 duplicates)\n", "published 3 events (3 duplicates)\n"} {
		_, errOut, code := runCtx(ctx, "", "emit", "--nats-url", srv.url, "testdata/emit/events.jsonl")
		if code != 0 || errOut != want {
			t.Errorf("run %d: exit %d, stderr %q; want 0, %q", i+1, code, errOut, want)
		}
	}
	if got := streamMessages(t, ctx, srv.js, events.Names{}, "TOOLSENTRY_TELEMETRY"); len(got) != 3 {
		t.Errorf("%d messages stored, want 3", len(got))
	}
}

func TestEmitRefusesInvalidInputAndPublishesNothing(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	_, errOut, code := runCtx(ctx, "", "emit", "--nats-url", srv.url, "testdata/emit/events.jsonl", "testdata/emit/bad.jsonl")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "testdata/emit/bad.jsonl:3: ") || !strings.Contains(lines[0], "agent_id") ||
		!strings.HasPrefix(lines[1], "testdata/emit/bad.jsonl:4: not JSON") ||
		!strings.Contains(lines[2], "nothing published: 2 invalid documents (--keep-going publishes the 6 valid ones)") {
		t.Errorf("stderr:\n%s\nwant bad.jsonl:3 (missing agent_id), bad.jsonl:4 (not JSON) and nothing published", errOut)
	}
	if got := streamMessages(t, ctx, srv.js, events.Names{}, "TOOLSENTRY_TELEMETRY"); len(got) != 0 {
		t.Errorf("%d messages published, want none", len(got))
	}
}

func TestEmitKeepGoing(t *testing.T) {
	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	_, errOut, code := runCtx(ctx, "", "emit", "--keep-going", "--nats-url", srv.url, "testdata/emit/bad.jsonl")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (some input was invalid); stderr: %s", code, errOut)
	}
	for _, want := range []string{"bad.jsonl:3: ", "bad.jsonl:4: ", "published 3 events (0 duplicates)", "skipped 2 invalid documents"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	var ids []string
	for _, m := range streamMessages(t, ctx, srv.js, events.Names{}, "TOOLSENTRY_TELEMETRY") {
		ids = append(ids, m.msgID)
	}
	if want := []string{"ok-1", "ok-2", "ok-5"}; !slices.Equal(ids, want) {
		t.Errorf("published %v, want %v", ids, want)
	}
}

// TestEmitNeverPublishesArgumentValues: the values of an invocation's
// arguments stay on this machine; their paths and types are published.
func TestEmitNeverPublishesArgumentValues(t *testing.T) {
	const secret = "sk-live-PRIVATE-4242"
	pretty, err := os.ReadFile("testdata/emit/invocation.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pretty), secret) {
		t.Fatal("testdata/emit/invocation.json should hold the secret")
	}
	data := `{"agent_id":"a","tool_id":"crm.lookup","arguments":{"password":"` + secret + `","n":[1,"` + secret + `"]}}`
	b64 := `{"specversion":"1.0","id":"inv-b64","source":"s","type":"io.toolsentry.tool.invocation.v1","data_base64":"` +
		base64.StdEncoding.EncodeToString([]byte(data)) + `"}`

	srv := startProvisioned(t, "")
	ctx := testCtx(t, cmdTimeout)
	_, errOut, code := runCtx(ctx, b64, "emit", "--nats-url", srv.url, "testdata/emit/invocation.json", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := streamMessages(t, ctx, srv.js, events.Names{}, "TOOLSENTRY_TELEMETRY")
	if len(got) != 2 {
		t.Fatalf("%d messages, want 2", len(got))
	}
	wantPaths := [][]string{{"api_key", "options", "options.limit", "options.token", "user_id"}, {"n", "n[]", "password"}}
	for i, m := range got {
		for _, leak := range []string{secret, "PRIVATE", "u-123", "arguments"} {
			if strings.Contains(string(m.data), leak) {
				t.Errorf("stored message %d holds %q:\n%s", i, leak, m.data)
			}
		}
		if !strings.Contains(string(m.data), `"argument_types"`) {
			t.Errorf("stored message %d has no argument_types:\n%s", i, m.data)
		}
		if paths := m.event.Invocation.ArgumentTypes.Paths(); !slices.Equal(paths, wantPaths[i]) {
			t.Errorf("message %d argument paths %v, want %v", i, paths, wantPaths[i])
		}
	}
}

func TestEmitUsesThePrefix(t *testing.T) {
	srv := startProvisioned(t, "acme")
	ctx := testCtx(t, cmdTimeout)
	_, errOut, code := runCtx(ctx, "", "emit", "--prefix", "acme", "--nats-url", srv.url, "testdata/emit/invocation.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	names, _ := events.NewNames("acme")
	got := streamMessages(t, ctx, srv.js, names, "ACME_TELEMETRY")
	if len(got) != 1 || got[0].published != "acme.telemetry.invocation.crm=2Elookup" || got[0].subject != "acme.telemetry.invocation.0.crm=2Elookup" {
		t.Errorf("got %+v, want one message on acme.telemetry.invocation.crm=2Elookup", got)
	}
}

func TestEmitDryRunNeedsNoServer(t *testing.T) {
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--dry-run", "--nats-url", freeURL(t), "testdata/emit/events.jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "testdata/emit/events.jsonl:1\ttoolsentry.telemetry.schema.crm=2Elookup\tobs-1\n" +
		"testdata/emit/events.jsonl:2\ttoolsentry.telemetry.contract.crm=2Elookup\tcon-1\n" +
		"testdata/emit/events.jsonl:4\ttoolsentry.telemetry.workflow.checkout\twf-1\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

// TestEmitReaderLocatesProblems: documents are split and problems located
// without a server.
func TestEmitReaderLocatesProblems(t *testing.T) {
	const inv = `{"specversion":"1.0","id":"i","source":"s","type":"io.toolsentry.tool.invocation.v1","data":{"agent_id":"a","tool_id":"t"}}`
	cases := []struct {
		name     string
		input    string
		server   string
		events   int
		problems []string // "LINE: substring"
	}{
		{"empty", "  \n\n", "", 0, nil},
		{"byte order mark", "\xEF\xBB\xBF" + inv, "", 1, nil},
		{"concatenated on one line", inv + inv, "", 2, nil},
		{"truncated line, then a good one", `{"specversion": "1.0"` + "\n" + inv + "\n", "", 1, []string{"x:1: not JSON", "(at line 2)"}},
		{"garbage after a value", inv + " trailing\n" + inv, "", 2, []string{"x:1: not JSON"}},
		{"not an object", "42\n\"s\"\nnull\n", "", 0, []string{"x:1: a JSON number", "x:2: a JSON string", "x:3: a JSON null"}},
		{"array elements keep their lines", "[\n" + inv + ",\n\n  42\n]", "", 1, []string{"x:4: array element 1: a JSON number"}},
		{"broken array", "[\n" + inv + ",\n}\n" + inv, "", 1, []string{"x:1: not JSON", "(at line 3)"}},
		{"neither event nor list", `{"hello": 1}`, "", 0, []string{`x:1: neither a CloudEvent`}},
		{"JSON-RPC error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`, "", 0, []string{"x:1: a JSON-RPC error response"}},
		{"tools/list without --server", `{"tools": []}`, "", 0, []string{"x:1: an MCP tools/list result needs --server"}},
		{"tools/list with --server", `{"tools": []}`, "srv", 1, nil},
		{"one tool of another server than --server", `{"specversion":"1.0","id":"o","source":"s","type":"io.toolsentry.tool.schema.observed.v1","data":{"tool_id":"t","version":"1","server":"jira","tool":{"name":"t","inputSchema":{"type":"object"}}}}`, "github", 0, []string{`x:1: the observation's server "jira" is not --server "github"`}},
		{"--server qualifies the subject attribute too", `{"specversion":"1.0","id":"i","source":"s","subject":"t","type":"io.toolsentry.tool.invocation.v1","data":{"agent_id":"a","tool_id":"t"}}`, "github", 1, nil},
		{"--server makes an id too long", `{"specversion":"1.0","id":"i","source":"s","type":"io.toolsentry.tool.invocation.v1","data":{"agent_id":"a","tool_id":"` + strings.Repeat("t", 128) + `"}}`, "github", 0, []string{"x:1: ", "tool_id"}},
		{"tools/list with a bad tool", `{"tools": [{"name": "x"}]}`, "srv", 0, []string{"x:1: tools/list result: data does not match its schema"}},
		{"verdict", `{"specversion":"1.0","id":"v","source":"s","type":"io.toolsentry.verdict.schema.v1","data":{}}`, "", 0, []string{"x:1: type \"io.toolsentry.verdict.schema.v1\" is a verdict"}},
		{"unknown type", `{"specversion":"1.0","id":"v","source":"s","type":"com.example.x","data":{}}`, "", 0, []string{"x:1: unknown event type"}},
		{"subject attribute disagrees", `{"specversion":"1.0","id":"i","source":"s","subject":"other","type":"io.toolsentry.tool.invocation.v1","data":{"agent_id":"a","tool_id":"t"}}`, "", 0, []string{"x:1: event does not match its subject"}},
		{"no key", `{"specversion":"1.0","id":"i","source":"s","type":"io.toolsentry.tool.contract.v1","data":{"accuracy":1,"determinism":"DETERMINISTIC"}}`, "", 0, []string{"x:1: data does not match its schema", "tool_id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &emitReader{names: events.Names{}, server: tc.server, source: "s", now: time.Now}
			r.read("x", []byte(tc.input))
			var got []string
			for _, p := range r.problems {
				got = append(got, p.String())
			}
			if len(r.events) != tc.events {
				t.Errorf("%d events, want %d (problems %q)", len(r.events), tc.events, got)
			}
			if tc.problems == nil && len(got) > 0 {
				t.Errorf("problems %q, want none", got)
			}
			all := strings.Join(got, "\n")
			for _, want := range tc.problems {
				if !strings.Contains(all, want) {
					t.Errorf("problems %q lack %q", got, want)
				}
			}
		})
	}
}

func TestEmitUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"emit", "-", "-"},
		{"emit", "--source", ""},
		{"emit", "--server", strings.Repeat("x", 600)},
		{"emit", "--bogus"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %s", args, code, errOut)
		}
	}
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "testdata/emit/no-such-file.json")
	if code != 1 || !strings.Contains(errOut, "no-such-file.json") {
		t.Errorf("missing file: exit %d, stderr %q; want 1 naming the file", code, errOut)
	}
}

// TestLineCounterIsLineAt: the incremental line counter gives lineAt's
// line for offsets in any order, past the end included.
func TestLineCounterIsLineAt(t *testing.T) {
	data := []byte("{}\n\n{\"a\":\n1}\n[\n]\nx")
	c := &lineCounter{data: data}
	for _, off := range []int{0, 1, 3, 4, 5, 4, 2, 9, len(data), len(data) + 5, 0, 13} {
		if got, want := c.at(off), lineAt(data, off); got != want {
			t.Errorf("at(%d) = %d, lineAt says %d", off, got, want)
		}
	}
}

// checkJSONMembers: jsonMembers gives what json.Unmarshal into a map of raw
// messages gives, for any JSON document.
func checkJSONMembers(t *testing.T, doc []byte) {
	t.Helper()
	if !json.Valid(doc) {
		return
	}
	var want map[string]json.RawMessage
	err := json.Unmarshal(doc, &want)
	got, ok := jsonMembers(doc)
	if ok != (err == nil && want != nil) {
		t.Fatalf("%s: jsonMembers says object %v, json.Unmarshal %v (%v)", doc, ok, want, err)
	}
	names := map[string]bool{}
	for _, m := range got {
		names[string(m.name)] = true
	}
	if len(names) != len(want) {
		t.Fatalf("%s: members %q, json.Unmarshal %q", doc, got, want)
	}
	for name, v := range want {
		if g := got.get(name); g == nil || !bytes.Equal(g, v) {
			t.Fatalf("%s: member %q is %q, json.Unmarshal says %q", doc, name, g, v)
		}
		if s, ok := jsonString(v); ok {
			var ws string
			if err := json.Unmarshal(v, &ws); err != nil || ws != s {
				t.Fatalf("jsonString(%s) = %q, json.Unmarshal %q (%v)", v, s, ws, err)
			}
		}
	}
}

var jsonMembersCases = []string{
	`{}`, ` { } `, `null`, `[]`, `"s"`, `1`, `true`, `{"a":1}`, `{"a":1,"a":2}`, "{\n \"a\" : [1, {\"b\":\"}\"}] ,\t\"c\":null}",
	`{"k\"ey":"v\\","x":-1.5e+3,"y":true,"z":false,"e":{},"f":[]}`, `{"type":"t\u0065","\u0074ype":"x"}`, "{\"\xff\":\"\xfe\"}",
	`{"specversion":"1.0","data":{"tool_id":"a","tools":null}}`, `{"a":"[","b":"{","c":"]"}`,
}

func TestJSONMembers(t *testing.T) {
	for _, doc := range jsonMembersCases {
		checkJSONMembers(t, []byte(doc))
	}
	// Random documents of the pieces where a scanner could lose its place.
	r := rand.New(rand.NewPCG(22, 1))
	pieces := []string{`"a"`, `"type"`, `"\""`, `"\\"`, `"}"`, `"]"`, `"\u0041"`, "\"\xff\"", `0`, `-1.5e3`, `true`, `null`, `{}`, `[]`}
	var value func(depth int) string
	value = func(depth int) string {
		if depth > 3 || r.IntN(3) == 0 {
			return pieces[r.IntN(len(pieces))]
		}
		var b strings.Builder
		n := r.IntN(4)
		if r.IntN(2) == 0 {
			b.WriteString("[")
			for i := range n {
				if i > 0 {
					b.WriteString(" ,")
				}
				b.WriteString(value(depth + 1))
			}
			b.WriteString("]")
			return b.String()
		}
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",\n")
			}
			b.WriteString(pieces[r.IntN(7)] + " : " + value(depth+1))
		}
		b.WriteString("}")
		return b.String()
	}
	for range 3000 {
		checkJSONMembers(t, []byte(value(0)))
	}
}

func FuzzJSONMembers(f *testing.F) {
	for _, doc := range jsonMembersCases {
		f.Add([]byte(doc))
	}
	f.Fuzz(checkJSONMembers)
}

// TestEmitSaysWhenNoStreamTakesIt: a telemetry stream that does not take
// the kind (provisioned by a serve that does not know it: here one that
// takes schema observations only) refuses the publish, and emit says why
// instead of a bare "no response from stream".
func TestEmitSaysWhenNoStreamTakesIt(t *testing.T) {
	_, url := natstest.RunServer(t)
	ctx := testCtx(t, cmdTimeout)
	js := natstest.JetStream(t, url)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TOOLSENTRY_TELEMETRY", Subjects: []string{"toolsentry.telemetry.schema.*"}}); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCtx(ctx, "", "emit", "--nats-url", url, "testdata/emit/invocation.json")
	if code != 1 || !strings.Contains(errOut, `no stream takes the subject: TOOLSENTRY_TELEMETRY does not exist or does not take kind "invocation"`) {
		t.Errorf("exit %d, stderr %q; want 1 and why no stream took it", code, errOut)
	}
}
