package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
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

// dumpDOM loads url in headless Chromium, lets its scripts run (their
// API calls included) and returns the page's DOM as HTML.
func dumpDOM(t *testing.T, chrome, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=20000", "--dump-dom", url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, errOut.String())
	}
	return out.String()
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

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// a real serve with a token: without the token the page asks for it; with
// it, the Fleet page shows the drifted tool held, with the agent and its
// migration; the tool's own page, opened by the Fleet page's link, shows
// the rename in the diff table with the agent it affects, and the
// migration. The composition, agents and dead-letter pages show their
// data; no page shows an argument's value.
func TestDashboardInBrowser(t *testing.T) {
	chrome := chromiumBinary()
	if chrome == "" {
		t.Skip("chromium not found: install the Debian package chromium (.ci/run does) to run the dashboard's browser test")
	}
	const token = "dash-t0ken"
	f := startDashboardFixture(t, token)
	base := "http://" + f.serve.httpAddr + "/"
	var pages []string

	dom := dumpDOM(t, chrome, base+"#/fleet")
	element(t, dom, "the request for a token", regexp.MustCompile(`<p class="error" id="auth-error">[^<]*API token`))

	dom = dumpDOM(t, chrome, base+"#/fleet?token="+token)
	pages = append(pages, dom)
	element(t, dom, "the fleet summary", regexp.MustCompile(`<p id="fleet-summary">2 tools on 2 servers; 1 held drifts\.</p>`))
	element(t, dom, "the crm server", regexp.MustCompile(`<h2>crm</h2>`))
	element(t, dom, "the kb server", regexp.MustCompile(`<h2>kb</h2>`))
	row := element(t, dom, "the held crm/lookup row", regexp.MustCompile(`<tr class="tool held" data-tool="crm/lookup">.*?</tr>`))
	for _, want := range []string{`<span class="badge held">held</span>`, "billing-agent", `<span class="badge MIGRATE">MIGRATE</span>`, "move user_id → userId"} {
		if !strings.Contains(row, want) {
			t.Errorf("the crm/lookup row lacks %q:\n%s", want, row)
		}
	}
	element(t, dom, "kb/search, not held", regexp.MustCompile(`<tr class="tool" data-tool="kb/search">`))
	link := regexp.MustCompile(`href="(#/tool/[^"]+)"`).FindStringSubmatch(row)
	if link == nil {
		t.Fatalf("no link to the tool in its row:\n%s", row)
	}

	// Open the tool from the Fleet page's link.
	dom = dumpDOM(t, chrome, base+link[1]+"?token="+token)
	pages = append(pages, dom)
	element(t, dom, "the tool's title", regexp.MustCompile(`<h1>Tool <code>crm/lookup</code></h1>`))
	rename := element(t, dom, "the rename in the diff table", regexp.MustCompile(`<tr class="change" data-kind="field_renamed">.*?</tr>`))
	for _, want := range []string{"<td>input</td>", "<code>user_id</code>", "user_id → userId", `<span class="badge breaking">breaking</span>`, "<td>billing-agent</td>"} {
		if !strings.Contains(rename, want) {
			t.Errorf("the rename row lacks %q:\n%s", want, rename)
		}
	}
	agent := element(t, dom, "the agent's row", regexp.MustCompile(`<tr class="agent" data-agent="billing-agent">.*?</tr>`))
	for _, want := range []string{"<code>user_id</code>", `<span class="badge MIGRATE">MIGRATE</span>`, `<li class="step"`, "move user_id → userId"} {
		if !strings.Contains(agent, want) {
			t.Errorf("the agent row lacks %q:\n%s", want, agent)
		}
	}
	element(t, dom, "the drift in the verdict history", regexp.MustCompile(`<span class="badge verdict">DRIFT_ON_USED_FIELDS</span>`))
	element(t, dom, "two versions", regexp.MustCompile(`(?s)<h2>Versions</h2><table><thead>.*?<tbody><tr>.*?</tr><tr>.*?</tr></tbody>`))

	dom = dumpDOM(t, chrome, base+"#/composition/etl?token="+token)
	pages = append(pages, dom)
	element(t, dom, "the structure", regexp.MustCompile(`<ul class="tree structure"><li>chain<ul class="tree"><li><code>a</code></li><li><code>b</code></li></ul></li></ul>`))
	element(t, dom, "the quality below the requirement", regexp.MustCompile(`<span class="badge bad">below it</span>`))
	element(t, dom, "the observed-success chart's point", regexp.MustCompile(`<svg class="chart"[^>]*>.*<circle class="point"[^>]*><title>[^<]*24/30 = 80\.0%`))

	dom = dumpDOM(t, chrome, base+"#/agents?token="+token)
	pages = append(pages, dom)
	element(t, dom, "billing-agent's directive", regexp.MustCompile(`<h2 data-agent="billing-agent">billing-agent</h2>.*?<tr class="directive">.*?MIGRATE.*?move user_id → userId`))

	dom = dumpDOM(t, chrome, base+"#/deadletters?token="+token)
	pages = append(pages, dom)
	element(t, dom, "the dead-letter count", regexp.MustCompile(`<p id="dlq-total">2 dead letters`))
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
