package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
)

// Two pages of a tools/list, the first as the JSON-RPC response, the second
// bare: one observation of the server per page, and through serve a
// verdict for every tool of both.
func TestEmitMCPToolsPages(t *testing.T) {
	s := startServe(t, "")
	ctx := testCtx(t, cmdTimeout)
	file := filepath.Join(t.TempDir(), "tools.jsonl")
	pages := `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}}],"nextCursor":"p2"}}
{"tools":[{"name":"write_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}}]}
`
	if err := os.WriteFile(file, []byte(pages), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCtx(ctx, "", "emit", "--nats-url", s.natsURL, "--mcp-tools", file, "--server", "fs-mcp")
	if code != 0 || errOut != "published 2 events (0 duplicates)\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// The two pages as published, on the server's subject; the stream also
	// holds what the worker derived from them (one observation per tool,
	// and their quality checkpoints).
	var got []storedMsg
	for _, m := range streamMessages(t, ctx, js, events.Names{}, "TOOLSENTRY_TELEMETRY") {
		if m.published == "toolsentry.telemetry.schema.fs-mcp" {
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d messages on the server's subject, want 2", len(got))
	}
	for i, want := range []string{"read_file", "write_file"} {
		obs := got[i].event.SchemaObserved
		if got[i].published != "toolsentry.telemetry.schema.fs-mcp" || obs == nil || !obs.IsList() || len(obs.Tools) != 1 || obs.Tools[0].Name != want {
			t.Errorf("message %d on %s: %+v, want the page of %s", i, got[i].subject, obs, want)
		}
	}
	if got[0].event.SchemaObserved.NextCursor != "p2" {
		t.Errorf("the first page's nextCursor is %q", got[0].event.SchemaObserved.NextCursor)
	}
	verdicts, err := js.Stream(ctx, "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	names := events.Names{}
	for _, tool := range []string{"read_file", "write_file"} {
		subject, _ := names.Verdict(events.KindSchemaVerdict, string(guards.NoBaseline), "fs-mcp/"+tool) // the server's tools
		natstest.Eventually(t, 20*time.Second, "NO_BASELINE for "+tool, func() bool {
			_, err := verdicts.GetLastMsgForSubject(ctx, subject)
			return err == nil
		})
	}
}

func TestEmitMCPToolsRefusesOtherInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ce, err := os.ReadFile("testdata/emit/invocation.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body, want string
		code             int
	}{
		{"cloudevent.json", string(ce), "holds MCP tools/list results only", 1},
		{"empty.json", "\n", "no tools/list result", 1},
		{"error.json", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`, "JSON-RPC error response", 1},
		{"other.json", `{"jsonrpc":"2.0","id":1,"result":{"prompts":[]}}`, "result has no tools", 1},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--dry-run", "--server", "s", "--mcp-tools", write(tc.name, tc.body))
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}
	if _, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--mcp-tools", "testdata/emit/tools_list_rpc.json"); code != 2 || !strings.Contains(errOut, "--server") {
		t.Errorf("without --server: exit %d, stderr %q; want 2", code, errOut)
	}
	list, err := os.ReadFile("testdata/emit/tools_list_rpc.json")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), string(list), "emit", "--dry-run", "--server", "s", "--mcp-tools", "-")
	if code != 0 || !strings.HasPrefix(out, "stdin:1\ttoolsentry.telemetry.schema.s\t") {
		t.Errorf("--mcp-tools -: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--dry-run", "--server", "s", "--mcp-tools", "-", "-"); code != 2 {
		t.Errorf("--mcp-tools - and FILE -: exit %d, stderr %q; want 2", code, errOut)
	}
}
