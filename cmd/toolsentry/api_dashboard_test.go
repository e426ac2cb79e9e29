package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// dashboardFixture is a real serve fed, by `toolsentry emit` and POST
// /v1/events, with what the dashboard shows: crm/lookup renaming user_id
// to userId under billing-agent, which sent user_id (with a secret as its
// value); kb/search, another server's tool that does not drift; a
// composition below its requirement with observed runs at a checkpoint;
// and bad input carrying the secret, dead-lettered.
type dashboardFixture struct {
	serve *serveRun
	api   *apiClient
	js    jetstream.JetStream
}

// startDashboardFixture starts it; token, when not "", is serve's
// --http-token (and the API client's).
func startDashboardFixture(t *testing.T, token string) *dashboardFixture {
	t.Helper()
	unsetServeEnv(t)
	args := []string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}
	if token != "" {
		args = append(args, "--http-token", token)
	}
	f := &dashboardFixture{serve: startServeArgs(t, args...)}
	f.api = newAPIClient(t, f.serve.httpAddr)
	f.api.token = token
	nc, err := nats.Connect(f.serve.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f.js, _ = jetstream.New(nc)
	ctx := testCtx(t, 90*time.Second)

	schema := func(id, tool, version, field string) string {
		server, name, _ := strings.Cut(tool, "/")
		return cloudEvent(id, events.TypeSchemaObserved, `{"tool_id":"`+tool+`","server":"`+server+`","version":"`+version+
			`","tool":{"name":"`+name+`","inputSchema":{"type":"object","properties":{"`+field+`":{"type":"string"}}}}}`)
	}
	lines := []string{
		schema("o1", "crm/lookup", "1", "user_id"),
		schema("k1", "kb/search", "1", "query"),
		cloudEvent("i1", events.TypeInvocation, `{"tool_id":"crm/lookup","agent_id":"billing-agent","arguments":{"user_id":"`+secret+`"},"outcome":{"status":"ok"}}`),
		schema("o2", "crm/lookup", "2", "userId"),
		cloudEvent("c-a", events.TypeContract, `{"tool_id":"a","accuracy":0.95,"determinism":"DETERMINISTIC"}`),
		cloudEvent("c-b", events.TypeContract, `{"tool_id":"b","accuracy":0.9,"determinism":"DETERMINISTIC"}`),
		cloudEvent("w1", events.TypeWorkflow, `{"composition_id":"etl","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["a","b"]}}`),
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCtx(ctx, "", "emit", "--nats-url", f.serve.natsURL, file); code != 0 {
		t.Fatalf("emit: %d %s %s", code, out, errOut)
	}
	// 30 observed runs of etl, 24 successful: a checkpoint verdict that
	// compares them with the prediction.
	var runs []string
	for i := range 30 {
		ok := i%5 != 0
		runs = append(runs, ceJSON(fmt.Sprintf("run-%d", i), events.TypeWorkflowObserved, fmt.Sprintf(
			`{"composition_id":"etl","agent_id":"etl-runner","trace_id":"t%d","span_id":"s%d","structure":{"chain":["a","b"]},`+
				`"calls":[{"tool_id":"a","span_id":"a%d","status":"ok"},{"tool_id":"b","span_id":"b%d","status":"%s"}],"success":%t}`,
			i, i, i, i, map[bool]string{true: "ok", false: "error"}[ok], ok)))
	}
	code, b := f.api.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents-batch+json"},
		[]byte("["+strings.Join(runs, ",")+"]"), "EventBatchResult")
	if code != http.StatusOK || !strings.Contains(string(b), `"accepted":30`) {
		t.Fatalf("observed runs: %d %s", code, b)
	}
	// Bad input with the secret: arguments that are not an object, and a
	// truncated document.
	for _, body := range []string{
		cloudEvent("bad-1", events.TypeInvocation, `{"tool_id":"crm/lookup","agent_id":"billing-agent","arguments":"`+secret+`"}`),
		`{"specversion":"1.0","id":"x","data":{"arguments":{"k":"` + secret,
	} {
		if _, err := f.js.Publish(ctx, "toolsentry.telemetry.invocation.crm/lookup", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}

	poll(t, "the held drift and its directive", func() bool {
		var list apiToolList
		f.api.getJSON("/v1/tools", http.StatusOK, "", &list)
		return len(list.Tools) == 2 && list.Tools[0].Held && len(list.Tools[0].AffectedAgents) == 1
	})
	poll(t, "the composition's observed checkpoint verdict", func() bool {
		var page apiVerdictPage
		f.api.getJSON("/v1/verdicts?composition=etl", http.StatusOK, "", &page)
		for _, v := range page.Verdicts {
			if strings.Contains(string(v.Event), `"observed":{`) {
				return true
			}
		}
		return false
	})
	poll(t, "two dead letters", func() bool {
		var d apiDeadLetters
		f.api.getJSON("/v1/deadletters", http.StatusOK, "", &d)
		return d.Total == 2
	})
	return f
}

// TestDashboardPageData checks what each page reads from the API of a
// real serve, against the OpenAPI schemas, and that none of it repeats an
// argument's value.
func TestDashboardPageData(t *testing.T) {
	f := startDashboardFixture(t, "")
	c := f.api
	var bodies []string
	get := func(path, schema string, into any) {
		t.Helper()
		code, b := c.do(http.MethodGet, path, nil, nil, schema)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, b)
		}
		bodies = append(bodies, string(b))
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("fleet", func(t *testing.T) {
		var list apiToolList
		get("/v1/tools", "ToolList", &list)
		servers := map[string][]string{}
		for _, tl := range list.Tools {
			servers[tl.Server] = append(servers[tl.Server], tl.Name)
		}
		if !slices.Equal(servers["crm"], []string{"lookup"}) || !slices.Equal(servers["kb"], []string{"search"}) {
			t.Errorf("tools by server %v", servers)
		}
		crm, kb := list.Tools[0], list.Tools[1]
		if !crm.Held || crm.Baseline.Fingerprint == crm.Current.Fingerprint || !slices.Equal(crm.AffectedAgents, []string{"billing-agent"}) {
			t.Errorf("crm/lookup %+v", crm)
		}
		if kb.Held || kb.Baseline.Fingerprint != kb.Current.Fingerprint || len(kb.AffectedAgents) != 0 {
			t.Errorf("kb/search %+v", kb)
		}
	})

	t.Run("tool", func(t *testing.T) {
		var d struct {
			apiToolDetail
			Changes []struct {
				Kind, Path, To string
				Breaking       bool
				AffectedAgents []string `json:"affected_agents"`
			} `json:"changes"`
		}
		get("/v1/tools/crm/lookup", "ToolDetail", &d)
		if len(d.Versions) != 2 || d.Versions[0].Version != "1" || d.Versions[1].Version != "2" {
			t.Errorf("versions %+v", d.Versions)
		}
		i := slices.IndexFunc(d.Changes, func(ch struct {
			Kind, Path, To string
			Breaking       bool
			AffectedAgents []string `json:"affected_agents"`
		}) bool {
			return ch.Kind == "field_renamed"
		})
		if i < 0 || d.Changes[i].Path != "user_id" || d.Changes[i].To != "userId" || !d.Changes[i].Breaking ||
			!slices.Equal(d.Changes[i].AffectedAgents, []string{"billing-agent"}) {
			t.Errorf("changes %+v", d.Changes)
		}
		if len(d.Agents) != 1 || d.Agents[0].Directive == nil || d.Agents[0].Directive.Action != guards.ActionMigrate ||
			len(d.Agents[0].Directive.Migration.Steps) != 1 || d.Agents[0].Directive.Migration.Steps[0].To != "userId" {
			t.Errorf("agents %+v", d.Agents)
		}
		var page apiVerdictPage
		get("/v1/verdicts?limit=100&tool=crm/lookup", "VerdictPage", &page)
		var names []string
		for _, v := range page.Verdicts {
			names = append(names, v.Verdict)
		}
		if !slices.Contains(names, "DRIFT_ON_USED_FIELDS") || !slices.Contains(names, "NO_BASELINE") {
			t.Errorf("verdict history %v", names)
		}
	})

	t.Run("compositions", func(t *testing.T) {
		var list apiCompositionList
		get("/v1/compositions", "CompositionList", &list)
		if len(list.Compositions) != 1 {
			t.Fatalf("compositions %+v", list)
		}
		s := list.Compositions[0]
		if s.CompositionID != "etl" || !s.Declared || !slices.Equal(s.Tools, []string{"a", "b"}) || s.Requirement == nil || *s.Requirement != 0.9 ||
			s.Verdict == "" || s.ComposedQuality == nil || *s.ComposedQuality >= 0.9 || s.Observed == nil || s.Observed.Runs != 30 || s.Observed.Successes != 24 {
			t.Errorf("summary %+v", s)
		}
		var comp apiComposition
		get("/v1/compositions/etl", "Composition", &comp)
		if comp.Quality == nil || comp.Quality.MeetsRequirement == nil || *comp.Quality.MeetsRequirement || !strings.Contains(string(comp.Structure), `"chain"`) {
			t.Errorf("composition %+v", comp)
		}
		// The chart's points: the observed comparison of checkpoint verdicts.
		var page apiVerdictPage
		get("/v1/verdicts?order=asc&limit=500&composition=etl", "VerdictPage", &page)
		var points []workflow.ObservedQuality
		for _, v := range page.Verdicts {
			var ev struct {
				Data events.CompositionVerdict `json:"data"`
			}
			if err := json.Unmarshal(v.Event, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Data.Observed != nil {
				points = append(points, *ev.Data.Observed)
			}
		}
		if len(points) != 1 || points[0].Runs != 30 || points[0].Successes != 24 || points[0].SuccessRate != 0.8 ||
			points[0].SuccessRateLower >= 0.8 || points[0].SuccessRateUpper <= 0.8 {
			t.Errorf("observed points %+v", points)
		}
	})

	t.Run("agents", func(t *testing.T) {
		var list apiAgentList
		get("/v1/agents", "AgentList", &list)
		if len(list.Agents) != 1 {
			t.Fatalf("agents %+v", list.Agents)
		}
		ag := list.Agents[0]
		if ag.AgentID != "billing-agent" || len(ag.Tools) != 1 || ag.Tools[0].ToolID != "crm/lookup" || !slices.Equal(ag.Tools[0].Input, []string{"user_id"}) {
			t.Errorf("agent %+v", ag)
		}
		if len(ag.Directives) != 1 || ag.Directives[0].ToolID != "crm/lookup" || ag.Directives[0].Action != guards.ActionMigrate ||
			ag.Directives[0].Migration.Steps[0].Op != toolschema.OpMove || ag.Directives[0].Verdict.Name != "DRIFT_ON_USED_FIELDS" {
			t.Errorf("directives %+v", ag.Directives)
		}
		if len(list.CompositionDirectives) != 1 || list.CompositionDirectives[0].CompositionID != "etl" || list.CompositionDirectives[0].Action != guards.ActionHalt {
			t.Errorf("composition directives %+v", list.CompositionDirectives)
		}
	})

	t.Run("deadletters", func(t *testing.T) {
		var d apiDeadLetters
		get("/v1/deadletters", "DeadLetters", &d)
		var n uint64
		for _, c := range d.ByReason {
			n += c
		}
		if d.Total != 2 || n != 2 || len(d.Latest) != 2 || d.Latest[0].Sequence <= d.Latest[1].Sequence {
			t.Fatalf("dead letters %+v", d)
		}
		for _, dl := range d.Latest {
			if d.ByReason[dl.Reason] == 0 || dl.Error == "" || dl.OriginalStream != "TOOLSENTRY_TELEMETRY" ||
				dl.OriginalSubject != "toolsentry.telemetry.invocation.0.crm/lookup" || dl.PublishedSubject != "toolsentry.telemetry.invocation.crm/lookup" ||
				dl.OriginalSequence == 0 {
				t.Errorf("dead letter %+v (by reason %v)", dl, d.ByReason)
			}
		}
		get("/v1/deadletters?limit=1", "DeadLetters", &d)
		if len(d.Latest) != 1 || d.Total != 2 {
			t.Errorf("limit=1: %+v", d)
		}
		for _, bad := range []string{"limit=0", "limit=201", "limit=x", "reason=y"} {
			if code, b := c.do(http.MethodGet, "/v1/deadletters?"+bad, nil, nil, "Error"); code != http.StatusBadRequest {
				t.Errorf("%s: %d %s", bad, code, b)
			}
		}
	})

	t.Run("stream from a real serve", func(t *testing.T) {
		var page apiVerdictPage
		get("/v1/verdicts?limit=500", "VerdictPage", &page)
		s := openSSE(t, "http://"+f.serve.httpAddr+"/v1/verdicts/stream?since=1h", "", nil)
		var seqs []uint64
		for range page.Verdicts {
			ev := s.next(t, "verdict")
			bodies = append(bodies, ev.data)
			seqs = append(seqs, ev.verdict(t, c).Sequence)
		}
		for i, v := range page.Verdicts { // page: newest first
			if seqs[len(seqs)-1-i] != v.Sequence {
				t.Fatalf("stream sequences %v, page %+v", seqs, page.Verdicts)
			}
		}
	})

	for _, b := range bodies {
		if strings.Contains(b, secret) {
			t.Errorf("an API answer the dashboard reads repeats an argument's value: %s", b)
		}
	}
}

// sseEvent is one server-sent event, or a comment (event "comment").
type sseEvent struct {
	id, event, data string
}

func (e sseEvent) verdict(t *testing.T, c *apiClient) apiVerdict {
	t.Helper()
	var raw any
	if err := json.Unmarshal([]byte(e.data), &raw); err != nil {
		t.Fatalf("event data %q: %v", e.data, err)
	}
	if err := c.schemas("Verdict").Validate(raw); err != nil {
		t.Errorf("event data does not match Verdict: %v\n%s", err, e.data)
	}
	var v apiVerdict
	if err := json.Unmarshal([]byte(e.data), &v); err != nil {
		t.Fatal(err)
	}
	if strconv.FormatUint(v.Sequence, 10) != e.id {
		t.Errorf("event id %q, verdict sequence %d", e.id, v.Sequence)
	}
	return v
}

// sseClient reads a text/event-stream response.
type sseClient struct {
	resp   *http.Response
	events chan sseEvent
}

// openSSE opens url with the bearer token (when not "") and extra
// headers, checks the answer is an event stream, and reads its first
// block (the preamble, sent once the stream is followed).
func openSSE(t *testing.T, url, token string, header map[string]string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseClient{resp: resp, events: make(chan sseEvent, 64)}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{event: "comment", data: strings.TrimSpace(line[1:])}
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "id":
					ev.id = v
				case "event":
					ev.event = v
				case "data":
					ev.data += v
				case "retry":
				}
			}
		}
	}()
	s.next(t, "comment") // the preamble: the stream is followed from here on
	return s
}

// next returns the next event of the kind ("verdict", "error",
// "comment"), skipping comments when another kind is wanted.
func (s *sseClient) next(t *testing.T, kind string) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended, waiting for %s", kind)
			}
			if ev.event == kind {
				return ev
			}
			if ev.event != "comment" {
				t.Fatalf("got event %+v, want %s", ev, kind)
			}
		case <-timeout:
			t.Fatalf("no %s event in 20s", kind)
		}
	}
}

// schemaVerdictFor is a schema verdict about tool for agent.
func schemaVerdictFor(t *testing.T, n int, tool, agent string) events.Message {
	t.Helper()
	m, err := events.Names{}.NewSchemaVerdict(events.SchemaVerdict{
		Verdict: guards.SchemaMatch, Directive: "PROCEED: Schema matches baseline.",
		ManifestDigest: strings.Repeat("ab", 32), ToolID: tool, AgentID: agent, Version: "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64), CurrentFingerprint: "sha256:" + strings.Repeat("a", 64),
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`), Migration: json.RawMessage(`{"blocked":[],"steps":[]}`),
		GuardVersion: "test", InputEventID: fmt.Sprintf("sse-in-%d", n), InputSubject: "toolsentry.telemetry.invocation.x", InputSequence: uint64(n),
	}, verdictTime)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestVerdictStream: GET /v1/verdicts/stream sends the verdicts published
// after it was opened that pass its filters, each once, with its stream
// sequence as the event id; it resumes after a cursor or Last-Event-ID,
// keeps idle connections alive, refuses bad filters and needs the token.
func TestVerdictStream(t *testing.T) {
	old := sseKeepAlive
	sseKeepAlive = 300 * time.Millisecond
	t.Cleanup(func() { sseKeepAlive = old })
	srv := startProvisioned(t, "toolsentry")
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux := http.NewServeMux()
	if err := mountAPI(mux, nc, "toolsentry", newGuardHandler(ctx, nc, "toolsentry")); err != nil {
		t.Fatal(err)
	}
	const token = "s3cret"
	hs := httptest.NewServer(httpAuth{token: token}.wrap(mux))
	t.Cleanup(hs.Close) // after the streams' own cleanups, which end their requests
	c := newAPIClient(t, strings.TrimPrefix(hs.URL, "http://"))
	c.token = token
	chains := newVerdictChains(t, "")
	n := 0
	publish := func(m events.Message) uint64 {
		t.Helper()
		ack, err := srv.js.PublishMsg(testCtx(t, 10*time.Second), &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data}, jetstream.WithMsgID(m.ID))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	verdictFor := func(tool, agent string) events.Message { n++; return schemaVerdictFor(t, n, tool, agent) }

	// Authentication, and filters refused before the stream starts.
	code, _ := (&apiClient{t: t, base: hs.URL, http: http.DefaultClient, schemas: c.schemas}).do(http.MethodGet, "/v1/verdicts/stream", nil, nil, "Error")
	if code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
	for _, bad := range []string{"limit=5", "order=asc", "verdict=NOPE", "guard=x", "tool=a&composition=b", "cursor=0", "colour=red", "guard=composition&agent=a"} {
		if code, b := c.do(http.MethodGet, "/v1/verdicts/stream?"+bad, nil, nil, "Error"); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
	if code, b := c.do(http.MethodGet, "/v1/verdicts/stream", map[string]string{"Last-Event-ID": "abc"}, nil, "Error"); code != http.StatusBadRequest {
		t.Errorf("Last-Event-ID abc: %d %s", code, b)
	}

	// Published before the stream is opened: not sent without a start.
	before := publish(verdictFor("t1", "billing-7"))

	byTool := openSSE(t, hs.URL+"/v1/verdicts/stream?tool=t1", token, nil)
	byAgent := openSSE(t, hs.URL+"/v1/verdicts/stream?agent=other", token, nil)
	byGuard := openSSE(t, hs.URL+"/v1/verdicts/stream?guard=composition", token, nil)
	all := openSSE(t, hs.URL+"/v1/verdicts/stream", token, nil)
	fromStart := openSSE(t, hs.URL+"/v1/verdicts/stream?since=1h&tool=t1", token, nil)

	seqs := []uint64{
		publish(verdictFor("t2", "billing-7")), // 0: all only
		publish(chains.composition("c1")),      // 1: all, byGuard
		publish(verdictFor("t1", "other")),     // 2: all, byTool, byAgent
		publish(verdictFor("t1", "billing-7")), // 3: all, byTool
	}
	want := map[*sseClient][]uint64{
		byTool: {seqs[2], seqs[3]}, byAgent: {seqs[2]}, byGuard: {seqs[1]}, all: seqs,
		fromStart: {before, seqs[2], seqs[3]},
	}
	names := map[*sseClient]string{byTool: "tool=t1", byAgent: "agent=other", byGuard: "guard=composition", all: "no filter", fromStart: "since=1h&tool=t1"}
	for s, w := range want {
		for _, seq := range w {
			v := s.next(t, "verdict").verdict(t, c)
			if v.Sequence != seq {
				t.Fatalf("%s: verdict %d, want %d", names[s], v.Sequence, seq)
			}
		}
	}
	// Nothing else came in between: the next verdict each gets is the
	// next one that passes its filter.
	last := publish(verdictFor("t1", "other"))
	for _, s := range []*sseClient{byTool, byAgent, all, fromStart} {
		if v := s.next(t, "verdict").verdict(t, c); v.Sequence != last {
			t.Errorf("%s: verdict %d after the expected ones, want %d", names[s], v.Sequence, last)
		}
	}
	v := byTool.next(t, "comment")
	if v.data != "keep-alive" {
		t.Errorf("idle stream: %+v, want a keep-alive comment", v)
	}

	// Resuming: after a cursor, or after the Last-Event-ID of a
	// reconnecting EventSource, in stream order.
	for name, s := range map[string]*sseClient{
		"cursor":        openSSE(t, hs.URL+"/v1/verdicts/stream?tool=t1&cursor="+strconv.FormatUint(seqs[2], 10), token, nil),
		"Last-Event-ID": openSSE(t, hs.URL+"/v1/verdicts/stream?tool=t1", token, map[string]string{"Last-Event-ID": strconv.FormatUint(seqs[2], 10)}),
	} {
		for _, seq := range []uint64{seqs[3], last} {
			if v := s.next(t, "verdict").verdict(t, c); v.Sequence != seq {
				t.Errorf("%s: verdict %d, want %d", name, v.Sequence, seq)
			}
		}
	}

	// Closing the NATS connection ends the stream with an error event.
	nc.Close()
	if ev := all.next(t, "error"); !strings.Contains(ev.data, `"error":"reading TOOLSENTRY_VERDICTS`) {
		t.Errorf("error event %+v", ev)
	}
}
