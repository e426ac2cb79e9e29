package main

// The dashboard: a read-only web page at / on serve's --http port, built
// into the binary (web/, embedded with go:embed: plain HTML, CSS and
// JavaScript, no build step, nothing loaded from elsewhere, so it works
// offline).
//
// The page holds no data: its script calls the JSON API (GET /v1/tools,
// /v1/tools/{id}, /v1/verdicts, /v1/verdicts/stream, /v1/compositions,
// /v1/compositions/{id}, /v1/agents, /v1/deadletters) with the same
// authentication as any client. Its files are therefore served without
// authentication (openPath); with --http-token the page asks for the token
// and keeps it in the tab's sessionStorage (or takes it once from the
// address's fragment, #/?token=TOKEN, which the browser never sends), and
// sends it as Authorization: Bearer on every API call; with client
// certificates the browser presents its certificate. Pages, by fragment:
//
//	#/fleet            tools by server: baseline and current fingerprint, held drifts, affected agents, their migrations
//	#/tool/{id}        a tool: versions, the diff as a table, its agents and migrations, its verdict history
//	#/compositions     compositions; #/composition/{id}: structure, quality against the requirement, observed success
//	#/agents           agents and their directives
//	#/feed             the live verdict feed, filtered by guard, verdict, tool and agent
//	#/deadletters      dead letters: counts by reason, the latest ones' reasons
//
// Like the API it never shows an argument's value: the API carries none
// (verdicts and directives hold paths, types and schema values only, and
// a dead letter is shown by its headers, never its body).

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed web
var dashboardFiles embed.FS

// dashboardPrefix is the path the dashboard's assets are served under.
const dashboardPrefix = "/ui/"

// dashboardPath reports whether p is one of the dashboard's static paths,
// which hold no data and are served without authentication.
func dashboardPath(p string) bool {
	return p == "/" || strings.HasPrefix(p, dashboardPrefix)
}

// mountDashboard registers the dashboard on mux: the page at / and its
// assets under /ui/.
func mountDashboard(mux *http.ServeMux) {
	web, err := fs.Sub(dashboardFiles, "web")
	if err != nil {
		panic(err) // the embedded tree always has web/
	}
	index, err := fs.ReadFile(web, "index.html")
	if err != nil {
		panic(err)
	}
	assets := http.StripPrefix(strings.TrimSuffix(dashboardPrefix, "/"), http.FileServerFS(web))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		dashboardHeaders(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
	mux.Handle("GET "+dashboardPrefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dashboardHeaders(w)
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			http.NotFound(w, r)
			return
		}
		assets.ServeHTTP(w, r)
	}))
}

// dashboardHeaders keep the page to its own files: scripts and styles
// from this origin only, no framing, no sniffing.
func dashboardHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}
