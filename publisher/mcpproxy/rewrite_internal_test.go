package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
)

var rewriteCases = []struct{ name, in, want string }{
	{"arguments replaced in place",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"_meta":{"x":1}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"b":[1,2]},"_meta":{"x":1}}}`},
	{"spacing and order kept",
		`{ "params" : { "_meta" : { "arguments" : 0 } , "arguments" : { "a" : 1 } , "name" : "t" } , "id" : "x", "method":"tools/call", "jsonrpc":"2.0" }`,
		`{ "params" : { "_meta" : { "arguments" : 0 } , "arguments" : {"b":[1,2]} , "name" : "t" } , "id" : "x", "method":"tools/call", "jsonrpc":"2.0" }`},
	{"no arguments: added first",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"b":[1,2]},"name":"t"}}`},
	{"empty params",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{ }}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"b":[1,2]} }}`},
}

func TestWithArguments(t *testing.T) {
	for _, tc := range rewriteCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withArguments(json.RawMessage(tc.in), json.RawMessage("{\n  \"b\": [1, 2]\n}"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{`[1]`, `"x"`, `null`, `{"params":1}`} {
		if _, err := withArguments(json.RawMessage(`{"params":{}}`), json.RawMessage(bad)); bad != `{"params":1}` && err == nil {
			t.Errorf("arguments %s accepted", bad)
		}
		if bad == `{"params":1}` {
			if _, err := withArguments(json.RawMessage(bad), json.RawMessage(`{}`)); err == nil {
				t.Errorf("message %s accepted", bad)
			}
		}
	}
}

// FuzzWithArguments: whatever the request, a rewrite is one line of JSON
// equal to the request with params.arguments replaced, or an error.
func FuzzWithArguments(f *testing.F) {
	for _, tc := range rewriteCases {
		f.Add(tc.in, `{"k":"v"}`)
	}
	f.Fuzz(func(t *testing.T, in, args string) {
		if bytes.ContainsAny([]byte(in), "\r\n") {
			return // a stdio message is one line
		}
		out, err := withArguments(json.RawMessage(in), json.RawMessage(args))
		if err != nil {
			return
		}
		if bytes.ContainsAny(out, "\r\n") {
			t.Fatalf("not one line: %q", out)
		}
		var want, got map[string]any
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("rewrote a request that is not JSON: %q", in)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewrite is not JSON: %q from %q", out, in)
		}
		var a any
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			t.Fatal(err)
		}
		params, ok := want["params"].(map[string]any)
		if !ok {
			t.Fatalf("rewrote a request without params object: %q", in)
		}
		params["arguments"] = a
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%q with %q (-want +got):\n%s", in, args, diff)
		}
	})
}

func TestParseTraceparent(t *testing.T) {
	for tp, want := range map[string][2]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      {"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more": {"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":      {},
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":      {},
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":      {},
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":      {},
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x":     {},
		"": {},
	} {
		tr, sp := parseTraceparent(tp)
		if tr != want[0] || sp != want[1] {
			t.Errorf("%q: %q %q, want %q %q", tp, tr, sp, want[0], want[1])
		}
	}
}

// FuzzLines: any line from either side is forwarded unchanged when no hook
// is set, and never crashes the proxy.
func FuzzLines(f *testing.F) {
	for _, tc := range rewriteCases {
		f.Add([]byte(tc.in+"\n"), []byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}`+"\n"))
	}
	f.Add([]byte(`[{"jsonrpc":"2.0","id":"a","method":"tools/list"},{"method":"notifications/cancelled","params":{"requestId":"a"}}]`), []byte(`[{"id":"a","result":{}}]`))
	f.Add([]byte(`{"id":2,"method":"initialize","params":{"clientInfo":{"name":"x"}}}`), []byte(`{"id":2,"result":{"serverInfo":{"name":""}}}`))
	f.Fuzz(func(t *testing.T, client, server []byte) {
		names, _ := events.NewNames("")
		p, err := New(Config{Names: names, RelistAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		fwd, reply := p.fromClient(ctx, client)
		if reply != nil || !bytes.Equal(fwd, client) {
			t.Fatalf("client line %q forwarded as %q, reply %q", client, fwd, reply)
		}
		if !p.fromServer(ctx, server) && !bytes.Contains(server, []byte(p.ownPrefix)) {
			t.Fatalf("server line %q swallowed", server)
		}
	})
}
