package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolsentry/toolsentry/events"
)

// apiSchemas compiles the OpenAPI document's component schemas.
func apiSchemas(t *testing.T) func(name string) *jsonschema.Schema {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	raw, _ := json.Marshal(map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": doc.Components.Schemas})
	raw = bytes.ReplaceAll(raw, []byte(`"#/components/schemas/`), []byte(`"#/$defs/`))
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://openapi.json", v); err != nil {
		t.Fatal(err)
	}
	return func(name string) *jsonschema.Schema {
		s, err := c.Compile("mem://openapi.json#/$defs/" + name)
		if err != nil {
			t.Fatalf("schema %s: %v", name, err)
		}
		return s
	}
}

// apiClient calls a running serve's API and checks every answer against
// the OpenAPI document's schema of its status.
type apiClient struct {
	t       *testing.T
	base    string
	token   string
	http    *http.Client
	schemas func(string) *jsonschema.Schema
}

func newAPIClient(t *testing.T, httpAddr string) *apiClient {
	return &apiClient{t: t, base: "http://" + httpAddr, http: &http.Client{Timeout: 20 * time.Second}, schemas: apiSchemas(t)}
}

// do sends a request and returns the status and body; schema, when not
// "", is the component the body must validate against.
func (c *apiClient) do(method, path string, header map[string]string, body []byte, schema string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if schema != "" {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			c.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, b)
		}
		if err := c.schemas(schema).Validate(v); err != nil {
			c.t.Errorf("%s %s: %d: the body does not match %s: %v\n%s", method, path, resp.StatusCode, schema, err, b)
		}
	}
	return resp.StatusCode, b
}

func (c *apiClient) getJSON(path string, wantCode int, schema string, into any) {
	c.t.Helper()
	code, b := c.do(http.MethodGet, path, nil, nil, schema)
	if code != wantCode {
		c.t.Fatalf("GET %s: %d, want %d: %s", path, code, wantCode, b)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			c.t.Fatal(err)
		}
	}
}

func ceJSON(id, typ, data string) string {
	return `{"specversion":"1.0","id":"` + id + `","source":"api-test","type":"` + typ + `","data":` + data + `}`
}

const apiToolV1 = `{"tool_id":"crm/lookup","version":"1","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}}}}}`
const apiToolV2 = `{"tool_id":"crm/lookup","version":"2","tool":{"name":"lookup","inputSchema":{"type":"object","properties":{"userId":{"type":"string"}}}}}`

// poll retries cond until it holds or 20 s pass.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestAPIEndToEnd drives the API of a real serve: telemetry in by the
// three HTTP modes (with a bad event in the batch dead-lettered), then the
// tools, the verdicts and their paging, a composition and its guard.
func TestAPIEndToEnd(t *testing.T) {
	s := startServe(t, "")
	c := newAPIClient(t, s.httpAddr)
	structured := map[string]string{"Content-Type": "application/cloudevents+json"}

	// Structured: the first version of the tool.
	code, b := c.do(http.MethodPost, "/v1/events", structured, []byte(ceJSON("o1", events.TypeSchemaObserved, apiToolV1)), "EventResult")
	if code != http.StatusAccepted || !strings.Contains(string(b), `"status":"accepted"`) || !strings.Contains(string(b), `"subject":"toolsentry.telemetry.schema.crm/lookup"`) {
		t.Fatalf("structured: %d %s", code, b)
	}
	// The same id again: a duplicate, nothing stored twice.
	if code, b = c.do(http.MethodPost, "/v1/events", structured, []byte(ceJSON("o1", events.TypeSchemaObserved, apiToolV1)), "EventResult"); code != http.StatusAccepted || !strings.Contains(string(b), `"status":"duplicate"`) {
		t.Fatalf("duplicate: %d %s", code, b)
	}
	// Binary: an agent's invocation, attributes in ce- headers.
	code, b = c.do(http.MethodPost, "/v1/events", map[string]string{
		"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Id": "i1", "Ce-Source": "agents/billing", "Ce-Type": events.TypeInvocation,
	}, []byte(`{"tool_id":"crm/lookup","agent_id":"billing-agent","arguments":{"user_id":"u-42"}}`), "EventResult")
	if code != http.StatusAccepted || !strings.Contains(string(b), `"status":"accepted"`) {
		t.Fatalf("binary: %d %s", code, b)
	}
	// Batched: the silent rename, an observation without its tool, and a
	// number (not an object: a spec violation of structured mode): one answer each, the bad ones dead-lettered with their reason.
	batch := "[" + ceJSON("o2", events.TypeSchemaObserved, apiToolV2) + "," +
		ceJSON("bad-1", events.TypeSchemaObserved, `{"tool_id":"crm/lookup","version":"3"}`) + ",42]"
	code, b = c.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, []byte(batch), "EventBatchResult")
	var br apiEventBatchResult
	if err := json.Unmarshal(b, &br); err != nil || code != http.StatusOK {
		t.Fatalf("batch: %d %s", code, b)
	}
	if br.Accepted != 1 || br.DeadLettered != 2 || len(br.Results) != 3 ||
		br.Results[0].Status != eventAccepted || br.Results[1].Reason != events.ReasonSchemaInvalid || br.Results[1].ID != "bad-1" ||
		br.Results[2].Reason != events.ReasonSpecViolation {
		t.Fatalf("batch results: %s", b)
	}
	// A single bad event: 400 with its reason.
	code, b = c.do(http.MethodPost, "/v1/events", structured, []byte(`{"specversion":"1.0","id":"x"}`), "EventResult")
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"status":"dead_lettered"`) || !strings.Contains(string(b), `"reason":"spec_violation"`) {
		t.Fatalf("bad single event: %d %s", code, b)
	}
	// A binary event without its source: dead-lettered with its ce- headers.
	code, b = c.do(http.MethodPost, "/v1/events", map[string]string{
		"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Id": "i-bad", "Ce-Type": events.TypeInvocation,
	}, []byte(`{"tool_id":"crm/lookup","agent_id":"billing-agent","arguments":{}}`), "EventResult")
	if code != http.StatusBadRequest || !strings.Contains(string(b), `"reason":"spec_violation"`) || !strings.Contains(string(b), `"id":"i-bad"`) {
		t.Fatalf("bad binary event: %d %s", code, b)
	}
	if code, b = c.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "text/plain"}, []byte("hi"), "Error"); code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d %s", code, b)
	}
	if code, b = c.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, []byte(`{"not":"an array"}`), "Error"); code != http.StatusBadRequest {
		t.Fatalf("batch not an array: %d %s", code, b)
	}

	// The worker dead-letters the three bad events with the reasons the
	// API answered, as it does NATS input.
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dlq, err := js.Stream(ctx, "TOOLSENTRY_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "4 dead letters", func() bool { i, _ := dlq.Info(ctx); return i != nil && i.State.Msgs == 4 })
	var reasons []string
	binaryKept := false
	for seq := uint64(1); seq <= 4; seq++ {
		m, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, m.Header.Get(events.HeaderDLQReason))
		if m.Header.Get("ce-id") == "i-bad" && m.Header.Get("ce-type") == events.TypeInvocation {
			binaryKept = true
		}
	}
	sort.Strings(reasons)
	if want := []string{"schema_invalid", "spec_violation", "spec_violation", "spec_violation"}; !slices.Equal(reasons, want) {
		t.Errorf("dead-letter reasons %v, want %v", reasons, want)
	}
	if !binaryKept {
		t.Error("the bad binary event's dead letter lost its ce- headers")
	}

	// Tools: the rename holds the baseline; billing-agent is affected.
	var list apiToolList
	poll(t, "the held drift and its directive", func() bool {
		c.getJSON("/v1/tools", http.StatusOK, "ToolList", &list)
		return len(list.Tools) == 1 && list.Tools[0].Held && len(list.Tools[0].AffectedAgents) == 1
	})
	tool := list.Tools[0]
	if tool.ID != "crm/lookup" || tool.Server != "crm" || tool.Name != "lookup" || tool.AffectedAgents[0] != "billing-agent" ||
		tool.Baseline.Version != "1" || tool.Current.Version != "2" || tool.LastObservedTime == nil || tool.LastObservedSequence == 0 {
		t.Errorf("tool %+v", tool)
	}
	var detail struct {
		apiToolDetail
		Changes []struct {
			Kind           string   `json:"kind"`
			Path           string   `json:"path"`
			To             string   `json:"to"`
			Breaking       bool     `json:"breaking"`
			AffectedAgents []string `json:"affected_agents"`
		} `json:"changes"`
	}
	c.getJSON("/v1/tools/crm/lookup", http.StatusOK, "ToolDetail", &detail)
	if len(detail.Versions) != 2 || len(detail.Changes) == 0 {
		t.Fatalf("detail %+v", detail)
	}
	renamed := false
	for _, ch := range detail.Changes {
		if ch.Kind == "field_renamed" && ch.Path == "user_id" && ch.To == "userId" && ch.Breaking && slices.Equal(ch.AffectedAgents, []string{"billing-agent"}) {
			renamed = true
		}
	}
	if !renamed {
		t.Errorf("no rename of user_id affecting billing-agent in %+v", detail.Changes)
	}
	if len(detail.Agents) != 1 || detail.Agents[0].AgentID != "billing-agent" || detail.Agents[0].Directive == nil ||
		detail.Agents[0].Directive.Action != "MIGRATE" || len(detail.Agents[0].Directive.Migration.Steps) == 0 ||
		!slices.Equal(detail.Agents[0].Input, []string{"user_id"}) {
		t.Errorf("agents %+v", detail.Agents)
	}
	var e apiError
	c.getJSON("/v1/tools/crm/nope", http.StatusNotFound, "Error", &e)
	c.getJSON("/v1/tools/"+strings.Repeat("x", events.MaxKeyLen+1), http.StatusBadRequest, "Error", &e)

	// Verdicts: newest first, paged by cursor; oldest first; filters.
	var page apiVerdictPage
	c.getJSON("/v1/verdicts?tool=crm/lookup&limit=1", http.StatusOK, "VerdictPage", &page)
	if len(page.Verdicts) != 1 || page.Verdicts[0].Verdict != "DRIFT_ON_USED_FIELDS" || page.Verdicts[0].AgentID != "billing-agent" ||
		page.Verdicts[0].Action != "MIGRATE" || page.Verdicts[0].Summary == "" || page.NextCursor == nil {
		t.Fatalf("first page %+v", page)
	}
	var next apiVerdictPage
	c.getJSON("/v1/verdicts?tool=crm/lookup&limit=1&cursor="+strconv.FormatUint(*page.NextCursor, 10), http.StatusOK, "VerdictPage", &next)
	if len(next.Verdicts) != 1 || next.Verdicts[0].Verdict != "NO_BASELINE" || next.NextCursor != nil {
		t.Fatalf("second page %+v", next)
	}
	var asc apiVerdictPage
	c.getJSON("/v1/verdicts?order=asc&guard=schema", http.StatusOK, "VerdictPage", &asc)
	if len(asc.Verdicts) != 2 || asc.Verdicts[0].Verdict != "NO_BASELINE" || asc.Verdicts[1].Sequence <= asc.Verdicts[0].Sequence || asc.Order != "asc" {
		t.Fatalf("asc %+v", asc)
	}
	var byAgent apiVerdictPage
	c.getJSON("/v1/verdicts?agent=billing-agent&verdict=drift_on_used_fields&since=1h", http.StatusOK, "VerdictPage", &byAgent)
	if len(byAgent.Verdicts) != 1 {
		t.Errorf("agent filter %+v", byAgent)
	}
	c.getJSON("/v1/verdicts?since=2000-01-01T00:00:00Z&tool=other", http.StatusOK, "VerdictPage", &byAgent)
	if len(byAgent.Verdicts) != 0 {
		t.Errorf("other tool %+v", byAgent)
	}
	for _, bad := range []string{"limit=0", "limit=501", "guard=x", "order=sideways", "cursor=abc", "verdict=NOPE", "since=yesterday", "tool=a&composition=b", "colour=red", "guard=composition&agent=a"} {
		c.getJSON("/v1/verdicts?"+bad, http.StatusBadRequest, "Error", &e)
		if e.Error == "" || strings.Contains(e.Error, "usage:") {
			t.Errorf("%s: error %q", bad, e.Error)
		}
	}

	// A composition below its requirement, and its guard for agents.
	var evs []string
	for _, tc := range []struct{ id, acc string }{{"a", "0.95"}, {"b", "0.5"}} {
		evs = append(evs, ceJSON("c-"+tc.id, events.TypeContract, `{"tool_id":"`+tc.id+`","accuracy":`+tc.acc+`,"determinism":"DETERMINISTIC"}`))
	}
	evs = append(evs, ceJSON("w1", events.TypeWorkflow, `{"composition_id":"etl","workflow_quality_requirement":0.9,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["a","b"]}}`))
	code, b = c.do(http.MethodPost, "/v1/events", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, []byte("["+strings.Join(evs, ",")+"]"), "EventBatchResult")
	if code != http.StatusOK || !strings.Contains(string(b), `"accepted":3`) {
		t.Fatalf("composition batch: %d %s", code, b)
	}
	var comp apiComposition
	poll(t, "the composition verdict", func() bool {
		code, b := c.do(http.MethodGet, "/v1/compositions/etl", nil, nil, "")
		return code == http.StatusOK && json.Unmarshal(b, &comp) == nil && comp.LatestVerdict != nil
	})
	c.getJSON("/v1/compositions/etl", http.StatusOK, "Composition", &comp)
	if !comp.Declared || comp.Requirement == nil || *comp.Requirement != 0.9 || !slices.Equal(comp.Tools, []string{"a", "b"}) ||
		comp.Quality == nil || comp.Quality.Composed > 0.48 || comp.Quality.MeetsRequirement == nil || *comp.Quality.MeetsRequirement ||
		!strings.Contains(string(comp.Structure), `"chain"`) || comp.LatestVerdict.Guard != "composition" {
		t.Errorf("composition %+v quality %+v", comp, comp.Quality)
	}
	c.getJSON("/v1/compositions/nope", http.StatusNotFound, "Error", &e)
	var halt compositionGuardResponse
	poll(t, "the composition directive", func() bool {
		code, b := c.do(http.MethodPost, "/v1/guard/composition", nil, []byte(`{"agent_id":"etl-runner","composition_id":"etl"}`), "")
		return code == http.StatusConflict && json.Unmarshal(b, &halt) == nil
	})
	code, b = c.do(http.MethodPost, "/v1/guard/composition", nil, []byte(`{"agent_id":"etl-runner","composition_id":"etl"}`), "CompositionGuardResponse")
	if code != http.StatusConflict || halt.Action != "HALT" || halt.Verdict == "" || halt.InForce == nil || !strings.HasPrefix(halt.Directive, "HALT") {
		t.Errorf("composition guard: %d %+v", code, halt)
	}
	if code, b = c.do(http.MethodPost, "/v1/guard/composition", nil, []byte(`{"composition_id":"nope"}`), "Error"); code != http.StatusNotFound {
		t.Errorf("unknown composition guard: %d %s", code, b)
	}
	if code, b = c.do(http.MethodPost, "/v1/guard/composition", nil, []byte(`{"workflow":"etl"}`), "Error"); code != http.StatusBadRequest {
		t.Errorf("bad composition guard request: %d %s", code, b)
	}
}

// TestAPIOpenAPIMatchesRoutes checks the OpenAPI document against the
// handlers: every path and method it lists is routed, every routed /v1
// path is in it, and its own schemas compile.
func TestAPIOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	schemas := apiSchemas(t)
	for _, name := range []string{"ToolList", "ToolDetail", "VerdictPage", "Composition", "CompositionGuardResponse", "EventResult", "EventBatchResult", "Error"} {
		schemas(name)
	}
	srv := startProvisioned(t, "toolsentry")
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux := http.NewServeMux()
	guard := newGuardHandler(ctx, nc, "toolsentry")
	mux.Handle("/v1/guard", guard)
	mux.Handle(otlpReceiver(ctx, nc, &connFlags{prefix: "toolsentry"}))
	if err := mountAPI(mux, nc, "toolsentry", guard); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			m := strings.ToUpper(method)
			documented[m+" "+path] = true
			url := param.ReplaceAllString(path, "x/y") // ids may hold '/'
			r, _ := http.NewRequest(m, url, nil)
			if _, pattern := mux.Handler(r); pattern == "" || !strings.HasPrefix(pattern, m+" ") {
				t.Errorf("%s %s is documented but not routed (pattern %q)", m, path, pattern)
			}
		}
	}
	for _, route := range apiRoutes {
		path := strings.ReplaceAll(route, "...}", "}")
		if !documented[path] {
			t.Errorf("route %s is not in openapi.json", route)
		}
	}
	// The others on the port that the document leaves to their own help
	// texts are not /v1 API routes of mountAPI.
	if len(apiRoutes) != len(documented) {
		t.Errorf("%d routes, %d documented operations", len(apiRoutes), len(documented))
	}
}

// TestAPIAuthToken: with a token, the API and the guard need it; the
// probes and metrics do not.
func TestAPIAuthToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--http-token-file", tokenFile, "--log-format", "json")
	c := newAPIClient(t, r.httpAddr)
	var e apiError
	c.getJSON("/v1/tools", http.StatusUnauthorized, "Error", &e)
	code, _ := c.do(http.MethodPost, "/v1/guard", nil, []byte(`{}`), "")
	if code != http.StatusUnauthorized {
		t.Errorf("/v1/guard without the token: %d", code)
	}
	for _, open := range []string{"/livez", "/readyz", "/metrics"} {
		if code, _ := c.do(http.MethodGet, open, nil, nil, ""); code != http.StatusOK {
			t.Errorf("%s: %d without the token", open, code)
		}
	}
	c.token = "wrong"
	c.getJSON("/v1/tools", http.StatusUnauthorized, "Error", &e)
	c.token = "s3cret"
	c.getJSON("/v1/tools", http.StatusOK, "ToolList", nil)
	c.getJSON("/v1/openapi.json", http.StatusOK, "", nil)
}

// TestAPIAuthClientCertificates: with --http-client-ca, HTTPS and a
// client certificate of that CA.
func TestAPIAuthClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--http-tls-cert", pki.serverCert, "--http-tls-key", pki.serverKey, "--http-client-ca", pki.caFile, "--log-format", "json")
	caPEM, err := os.ReadFile(pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := func(withCert bool) *apiClient {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if withCert {
			cert, err := tls.LoadX509KeyPair(pki.clientCert, pki.clientKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c := newAPIClient(t, r.httpAddr)
		c.base = "https://" + r.httpAddr
		c.http.Transport = &http.Transport{TLSClientConfig: cfg}
		return c
	}
	var e apiError
	anon := client(false)
	anon.getJSON("/v1/tools", http.StatusUnauthorized, "Error", &e)
	anon.getJSON("/livez", http.StatusOK, "", nil)
	client(true).getJSON("/v1/tools", http.StatusOK, "ToolList", nil)
	plain := newAPIClient(t, r.httpAddr)
	req, _ := http.NewRequest(http.MethodGet, plain.base+"/livez", nil)
	if resp, err := plain.http.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered on a TLS port")
		}
	}
}

// TestServeRefusesInsecureHTTP: a non-loopback --http needs a token or
// client certificates, or --http-insecure.
func TestServeRefusesInsecureHTTP(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"},
		stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	if !errors.Is(err, errHTTPInsecure) || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--http-insecure") {
		t.Fatalf("serve on 0.0.0.0 without auth: %v", err)
	}
	for _, args := range [][]string{
		{"--http-token", "a", "--http-token-file", "f"},
		{"--http-tls-cert", "c"},
		{"--http-client-ca", "ca.pem"},
	} {
		err := run(context.Background(), append([]string{"serve", "--data-dir", t.TempDir()}, args...), stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9700": true, "[::1]:9700": true, "localhost:1": true, ":9700": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v", addr, got)
		}
	}
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "0.0.0.0:0", "--http-insecure", "--log-format", "json")
	_, port, _ := strings.Cut(r.httpAddr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(r.httpAddr, ":")
	}
	c := newAPIClient(t, "127.0.0.1:"+port)
	c.getJSON("/v1/tools", http.StatusOK, "ToolList", nil)
}

// TestAPIVerdictPaging pages through more verdicts than one scan window
// holds, both ways, among verdicts of another key: every verdict of the
// tool once, in order.
func TestAPIVerdictPaging(t *testing.T) {
	srv := startProvisioned(t, "toolsentry")
	chains := newVerdictChains(t, "")
	var msgs []events.Message
	const tools = 700
	for i := range tools {
		msgs = append(msgs, chains.schema("t1"))
		if i%10 == 0 {
			msgs = append(msgs, chains.composition("c1"))
		}
	}
	publishVerdicts(t, srv.js, msgs...)
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
	hs := httptest.NewServer(mux)
	defer hs.Close()
	c := newAPIClient(t, strings.TrimPrefix(hs.URL, "http://"))
	for _, order := range []string{"desc", "asc"} {
		var seqs []uint64
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > tools {
				t.Fatalf("%s: no end of pages", order)
			}
			var p apiVerdictPage
			c.getJSON("/v1/verdicts?tool=t1&limit=97&order="+order+cursor, http.StatusOK, "VerdictPage", &p)
			for _, v := range p.Verdicts {
				if v.Key != "t1" || v.AgentID != "billing-7" {
					t.Fatalf("%s: verdict %+v", order, v)
				}
				seqs = append(seqs, v.Sequence)
			}
			if p.NextCursor == nil {
				break
			}
			cursor = "&cursor=" + strconv.FormatUint(*p.NextCursor, 10)
		}
		if len(seqs) != tools {
			t.Errorf("%s: %d verdicts, want %d", order, len(seqs), tools)
		}
		sorted := slices.IsSortedFunc(seqs, func(a, b uint64) int {
			if order == "desc" {
				a, b = b, a
			}
			return int(int64(a) - int64(b))
		})
		if !sorted || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
			t.Errorf("%s: sequences out of order or repeated", order)
		}
	}
	var p apiVerdictPage
	c.getJSON("/v1/verdicts?composition=c1&limit=500", http.StatusOK, "VerdictPage", &p)
	if len(p.Verdicts) != tools/10 || p.NextCursor != nil {
		t.Errorf("compositions: %d, next %v", len(p.Verdicts), p.NextCursor)
	}
	c.getJSON("/v1/verdicts?agent=nobody", http.StatusOK, "VerdictPage", &p)
	if len(p.Verdicts) != 0 || p.NextCursor != nil {
		t.Errorf("agent nobody: %+v", p)
	}
}
