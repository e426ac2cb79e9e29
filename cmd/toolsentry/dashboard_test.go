package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/events"
)

// chromiumBinary finds headless Chromium: the Debian package chromium
// (which .ci/run installs when it is missing), or another build of it.
func chromiumBinary() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// element returns the first element matching re in dom, or fails.
func element(t *testing.T, dom, what string, re *regexp.Regexp) string {
	t.Helper()
	m := re.FindString(dom)
	if m == "" {
		t.Fatalf("no %s in the page:\n%s", what, dom)
	}
	return m
}

// TestDashboardInBrowser drives the dashboard in headless Chromium (over
// the DevTools protocol) against a real serve with a token. Without the
// token the page asks for it; the token typed into its field, the Fleet
// page shows the drifted tool held, with the agent and its migration; a
// click on the tool opens its page, whose diff table shows the rename
// with the agent it affects, and the migration. The live feed shows a
// verdict published while it is open; the composition, agents and
// dead-letter pages show their data; no page shows an argument's value.
func TestDashboardInBrowser(t *testing.T) {
	chrome := chromiumBinary()
	if chrome == "" {
		t.Skip("chromium not found: install the Debian package chromium (.ci/run does) to run the dashboard's browser test")
	}
	const token = "dash-t0ken"
	f := startDashboardFixture(t, token)
	b := startBrowser(t, chrome)
	base := "http://" + f.serve.httpAddr + "/"
	var pages []string
	page := func() string {
		html := b.evalString("document.documentElement.outerHTML")
		pages = append(pages, html)
		return html
	}

	b.navigate(base)
	element(t, b.waitFor("the request for a token", "#auth-error"), "the request for a token", regexp.MustCompile(`API token`))
	b.typeText("#token", token)
	b.click("the token's button", "#token-form button")

	// Fleet: the held tool among the servers' tools.
	summary := b.waitFor("the fleet summary", "#fleet-summary")
	if !strings.Contains(summary, "2 tools on 2 servers; 1 held drifts.") {
		t.Errorf("summary %s", summary)
	}
	dom := page()
	element(t, dom, "the crm server", regexp.MustCompile(`<h2>crm</h2>`))
	element(t, dom, "the kb server", regexp.MustCompile(`<h2>kb</h2>`))
	element(t, dom, "kb/search, not held", regexp.MustCompile(`<tr class="tool" data-tool="kb/search">`))
	row := b.waitFor("the held crm/lookup row", `tr.tool.held[data-tool="crm/lookup"]`)
	for _, want := range []string{`<span class="badge held">held</span>`, "billing-agent", `<span class="badge MIGRATE">MIGRATE</span>`, "move user_id → userId"} {
		if !strings.Contains(row, want) {
			t.Errorf("the crm/lookup row lacks %q:\n%s", want, row)
		}
	}
	if got := b.evalString("sessionStorage.getItem('toolsentry.token')"); got != token {
		t.Errorf("the token in sessionStorage: %q", got)
	}

	// Open the tool from its row.
	b.click("the tool's link", `tr.tool.held[data-tool="crm/lookup"] a.tool-link`)
	rename := b.waitFor("the rename in the diff table", `tr.change[data-kind="field_renamed"]`)
	for _, want := range []string{"<td>input</td>", "<code>user_id</code>", "user_id → userId", `<span class="badge breaking">breaking</span>`, "<td>billing-agent</td>"} {
		if !strings.Contains(rename, want) {
			t.Errorf("the rename row lacks %q:\n%s", want, rename)
		}
	}
	if hash := b.evalString("location.hash"); hash != "#/tool/crm%2Flookup" {
		t.Errorf("the tool page's address: %q", hash)
	}
	agent := b.waitFor("the agent's row", `tr.agent[data-agent="billing-agent"]`)
	for _, want := range []string{"<code>user_id</code>", `<span class="badge MIGRATE">MIGRATE</span>`, `<li class="step"`, "move user_id → userId"} {
		if !strings.Contains(agent, want) {
			t.Errorf("the agent row lacks %q:\n%s", want, agent)
		}
	}
	dom = page()
	element(t, dom, "the drift in the verdict history", regexp.MustCompile(`<span class="badge verdict">DRIFT_ON_USED_FIELDS</span>`))
	element(t, dom, "two versions", regexp.MustCompile(`(?s)<h2>Versions</h2><table><thead>.*?<tbody><tr>.*?</tr><tr>.*?</tr></tbody>`))

	// The live feed, filtered to kb/search: its verdict so far, then one
	// published while the page is open, over the verdict stream.
	b.eval(`location.hash = '#/feed?tool=kb/search'`)
	b.waitFor("the feed's stream", `#feed-status`)
	for deadline := time.Now().Add(20 * time.Second); b.evalString("document.getElementById('feed-status').textContent") != "live"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the feed's stream is not live: %s", b.evalString("document.getElementById('feed-status').textContent"))
		}
	}
	if n := string(b.eval("document.querySelectorAll('table.feed tr.verdict').length")); n != "1" {
		t.Fatalf("%s verdicts of kb/search in the feed, want 1 (NO_BASELINE)", n)
	}
	code, body := f.api.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents+json"},
		[]byte(ceJSON("k2", events.TypeSchemaObserved, `{"tool_id":"kb/search","server":"kb","version":"2","tool":{"name":"search","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}}`)), "")
	if code != http.StatusAccepted {
		t.Fatalf("publishing kb/search v2: %d %s", code, body)
	}
	live := b.waitFor("the new verdict, live", `table.feed tbody tr.verdict:first-child:not(:last-child)`)
	if !strings.Contains(live, "kb/search") || strings.Contains(live, "NO_BASELINE") {
		t.Errorf("the live verdict %s", live)
	}
	page()

	b.eval(`location.hash = '#/composition/etl'`)
	b.waitFor("the observed-success chart", "svg.chart circle.point")
	dom = page()
	element(t, dom, "the structure", regexp.MustCompile(`<ul class="tree structure"><li>chain<ul class="tree"><li><code>a</code></li><li><code>b</code></li></ul></li></ul>`))
	element(t, dom, "the quality below the requirement", regexp.MustCompile(`<span class="badge bad">below it</span>`))
	element(t, dom, "the chart's point", regexp.MustCompile(`<circle class="point"[^>]*><title>[^<]*24/30 = 80\.0%`))

	b.click("the Agents tab", `nav a[data-page="agents"]`)
	b.waitFor("billing-agent", `h2[data-agent="billing-agent"]`)
	element(t, page(), "billing-agent's directive", regexp.MustCompile(`<h2 data-agent="billing-agent">billing-agent</h2>.*?<tr class="directive">.*?MIGRATE.*?move user_id → userId`))

	b.click("the Dead letters tab", `nav a[data-page="deadletters"]`)
	element(t, b.waitFor("the dead-letter count", "#dlq-total"), "the count", regexp.MustCompile(`2 dead letters`))
	dom = page()
	element(t, dom, "a reason's count", regexp.MustCompile(`<tr class="reason" data-reason="schema_invalid"><td><code>schema_invalid</code></td><td>1</td></tr>`))
	element(t, dom, "a dead letter's error", regexp.MustCompile(`<tr class="deadletter">.*?at /arguments: got string, want object`))

	for _, p := range pages {
		if strings.Contains(p, secret) {
			t.Errorf("a page shows an argument's value:\n%s", p)
		}
	}
}

// TestDashboardAssets: the page and its files are served from the binary,
// open without the token (they hold no data) while the API stays closed,
// with a policy that loads nothing from elsewhere.
func TestDashboardAssets(t *testing.T) {
	mux := http.NewServeMux()
	mountDashboard(mux)
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, apiToolList{}) })
	hs := httptest.NewServer(httpAuth{token: "s3cret"}.wrap(mux))
	defer hs.Close()
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return resp.StatusCode, resp.Header, b.String()
	}
	code, h, body := get("/")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, `<script src="/ui/app.js"`) ||
		!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("/: %d %v %s", code, h, body)
	}
	for path, ctype := range map[string]string{"/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		code, h, body := get(path)
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || len(body) < 500 {
			t.Errorf("%s: %d %s, %d bytes", path, code, h.Get("Content-Type"), len(body))
		}
		// Offline: nothing is loaded from another origin (the SVG
		// namespace is a name, not a request).
		for _, u := range regexp.MustCompile(`https?://[^\s'"`+"`"+`)]+`).FindAllString(body, -1) {
			if u != "http://www.w3.org/2000/svg" {
				t.Errorf("%s refers to %s", path, u)
			}
		}
	}
	for _, path := range []string{"/ui/", "/ui/nope.js", "/nope"} {
		if code, _, _ := get(path); code != http.StatusNotFound && code != http.StatusUnauthorized {
			t.Errorf("%s: %d", path, code)
		}
	}
	if code, _, _ := get("/v1/tools"); code != http.StatusUnauthorized {
		t.Errorf("/v1/tools without the token: %d", code)
	}
	if code, _, _ := get("/ui/../v1/tools"); code != http.StatusUnauthorized {
		t.Errorf("/ui/../v1/tools without the token: %d", code)
	}
}
