package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy/mcptest"
)

// TestMCPProxyFirstCallAfterSilentUpgrade is issue 18 §5 end to end: the
// agent calls lookup_user with user_id in a first session; between two
// sessions the server is upgraded silently (lookup_user takes userId),
// and serve is down, so no verdict about the new version can exist. In the
// second session the proxy judges the new tools/list itself: the very
// first call reaches the server migrated. When serve comes back, its
// verdict about that listing is the proxy's: same verdict, action,
// migration and manifest digest.
func TestMCPProxyFirstCallAfterSilentUpgrade(t *testing.T) {
	_, url := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	serveArgs := []string{"--nats-url", url, "--http", "127.0.0.1:0", "--log-format", "json"}
	w := startServeArgs(t, serveArgs...)
	js := natstest.JetStream(t, url)
	names, _ := events.NewNames("")

	lookup := func(cs *mcp.ClientSession) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_user", Arguments: map[string]any{"user_id": "u-4711"}})
		if err != nil {
			t.Fatal(err)
		}
		return textOf(t, res)
	}

	// Session 1: the agent's usage of lookup_user is recorded.
	cs, stderr := connectThroughProxy(t, ctx, nil, "--nats-url", url, "--agent", "billing-bot")
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := lookup(cs); got != "found u-4711" {
		t.Fatalf("session 1: %q", got)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("session 1: %v\n%s", err, stderr)
	}
	usage, err := js.KeyValue(ctx, names.UsageBucket())
	if err != nil {
		t.Fatal(err)
	}
	const toolID = mcptest.Name + "/lookup_user"
	key, _ := events.KVKey(toolID, "billing-bot")
	natstest.Eventually(t, 20*time.Second, "billing-bot's usage of lookup_user recorded", func() bool {
		e, err := usage.Get(ctx, key)
		return err == nil && strings.Contains(string(e.Value()), `"user_id"`)
	})
	if err := w.stop(t); err != nil {
		t.Fatalf("serve: %v\n%s", err, w.logs)
	}

	// Session 2, against the upgraded server, with serve down.
	cs2, stderr2 := connectThroughProxyTo(t, ctx, "server-upgraded", nil, "--nats-url", url, "--agent", "billing-bot",
		"--apply-migrations", "--halt-on-drift", "--relist-after", "-1s", "--log-level", "info")
	if _, err := cs2.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := lookup(cs2); got != "found u-4711" {
		t.Fatalf("the first call of session 2: %q, want it to reach the server as userId\n%s", got, stderr2)
	}
	if err := cs2.Close(); err != nil {
		t.Fatalf("session 2: %v\n%s", err, stderr2)
	}
	var local struct {
		Tool           string                   `json:"tool"`
		Verdict        string                   `json:"verdict"`
		Action         guards.Action            `json:"action"`
		ManifestDigest string                   `json:"manifest_digest"`
		From           string                   `json:"from_fingerprint"`
		To             string                   `json:"to_fingerprint"`
		Migration      toolschema.MigrationPlan `json:"migration"`
	}
	sc := bufio.NewScanner(strings.NewReader(stderr2.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "judged here") && strings.Contains(sc.Text(), `"`+toolID+`"`) {
			if err := json.Unmarshal(sc.Bytes(), &local); err != nil {
				t.Fatal(err)
			}
		}
	}
	if local.Verdict != string(guards.DriftOnUsedFields) || local.Action != guards.ActionMigrate || len(local.Migration.Steps) != 1 {
		t.Fatalf("the proxy's own verdict: %+v\n%s", local, stderr2)
	}
	if strings.Contains(stderr2.String(), "u-4711") {
		t.Errorf("an argument value reached the proxy's log:\n%s", stderr2)
	}

	// serve comes back and judges the same listing: the same verdict.
	startServeArgs(t, serveArgs...)
	directives, err := js.KeyValue(ctx, names.DirectivesBucket())
	if err != nil {
		t.Fatal(err)
	}
	dkey, _ := events.SchemaDirectiveKey(toolID, "billing-bot")
	var served events.Directive
	natstest.Eventually(t, 30*time.Second, "serve's directive about the upgraded lookup_user", func() bool {
		e, err := directives.Get(ctx, dkey)
		if err != nil || json.Unmarshal(e.Value(), &served) != nil {
			return false
		}
		return served.ToFingerprint == local.To
	})
	if served.Verdict.Name != local.Verdict || served.Verdict.ManifestDigest != local.ManifestDigest || served.Action != local.Action ||
		served.FromFingerprint != local.From || !samePlan(t, served.Migration, local.Migration) {
		t.Errorf("serve's verdict differs from the proxy's:\n  serve %+v\n  proxy %+v", served, local)
	}
}

func samePlan(t *testing.T, a, b toolschema.MigrationPlan) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}
