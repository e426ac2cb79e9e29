package main

// The HTTP API on serve's --http address, under /v1 (README "HTTP API";
// the OpenAPI document, openapi.json, is served at /v1/openapi.json):
//
//	GET  /v1/tools                    every tool: baseline and current version, held drift, affected agents
//	GET  /v1/tools/{id}               one tool: versions, the diff as a table, agents, directives, migrations
//	GET  /v1/verdicts                 verdicts from the verdict stream, filtered and paged (api_verdicts.go)
//	GET  /v1/verdicts/stream          the same as server-sent events, as they are published (api_stream.go)
//	GET  /v1/compositions             every composition, in short (api_dashboard.go)
//	GET  /v1/compositions/{id}        a composition: structure, composed quality against the requirement, latest verdict
//	GET  /v1/agents                   every agent: the tools it uses, its directives (api_dashboard.go)
//	GET  /v1/deadletters              dead letters: counts by reason, the latest ones' reasons (api_dashboard.go)
//	POST /v1/guard/composition        the composition directive in force for a workflow (the agent client's Workflow)
//	POST /v1/events                   CloudEvents over the HTTP binding into the telemetry stream (api_events.go)
//	GET  /v1/openapi.json             the OpenAPI 3.1 document
//
// Everything is read from the state buckets and streams that serve keeps;
// the API writes nothing but the telemetry that POST /v1/events publishes.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

//go:embed openapi.json
var openAPIDocument []byte

// apiError is the body of every error answer of the API.
type apiError struct {
	Error string `json:"error"`
}

// api serves the /v1 endpoints but /v1/guard and /v1/traces.
type api struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names events.Names
	// directives returns the view of every directive that POST /v1/guard
	// also answers from (guardHandler.viewFor).
	directives func(context.Context) (*agent.DirectiveView, error)
}

// apiRoutes are the patterns mountAPI registers (and the OpenAPI test
// checks the document against).
var apiRoutes = []string{
	"GET /v1/tools",
	"GET /v1/tools/{id...}",
	"GET /v1/verdicts",
	"GET /v1/compositions/{id...}",
	"POST /v1/guard/composition",
	"POST /v1/events",
	"GET /v1/openapi.json",
	"GET /v1/verdicts/stream",
	"GET /v1/compositions",
	"GET /v1/agents",
	"GET /v1/deadletters",
}

// mountAPI registers the API on mux. guard is serve's POST /v1/guard
// handler, whose directive view the composition guard shares.
func mountAPI(mux *http.ServeMux, nc *nats.Conn, prefix string, guard http.Handler) error {
	names, err := events.NewNames(prefix)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	a := &api{nc: nc, js: js, names: names}
	if g, ok := guard.(*guardHandler); ok {
		a.directives = g.viewFor
	} else {
		return errors.New("the composition guard needs serve's guard handler")
	}
	handlers := []http.HandlerFunc{a.listTools, a.getTool, a.listVerdicts, a.getComposition, a.compositionGuard, a.postEvents, serveOpenAPI,
		a.streamVerdicts, a.listCompositions, a.listAgents, a.listDeadLetters}
	for i, p := range apiRoutes {
		mux.HandleFunc(p, handlers[i])
	}
	return nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}

// bucket opens a state bucket; a bucket that does not exist yet (serve
// is still provisioning) is answered 503 by the caller.
func (a *api) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	kv, err := a.js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", name, err)
	}
	return kv, nil
}

// unavailable answers 503 with err.
func unavailable(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
}

// eachMatching calls f with every current value of kv whose key matches
// the KV filter (as eachValue does for every key).
func eachMatching(ctx context.Context, kv jetstream.KeyValue, filter string, f func(jetstream.KeyValueEntry)) error {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return nil
			}
			f(e)
		}
	}
}

// apiToolVersion is one version of a tool.
type apiToolVersion struct {
	Fingerprint string `json:"fingerprint"`
	Version     string `json:"version"`
	// Sequence is the telemetry stream sequence of the observation that
	// brought the version, EventID its CloudEvent id.
	Sequence uint64 `json:"sequence"`
	EventID  string `json:"event_id"`
	// Tool is the MCP Tool object (GET /v1/tools/{id} only).
	Tool json.RawMessage `json:"tool,omitempty"`
}

func apiVersionOf(v core.ToolVersion, withTool bool) apiToolVersion {
	out := apiToolVersion{Fingerprint: v.Fingerprint, Version: v.Version, Sequence: v.Seq, EventID: v.EventID}
	if withTool {
		out.Tool = v.Tool
	}
	return out
}

// apiTool is a tool in GET /v1/tools.
type apiTool struct {
	// ID is the qualified id (events.QualifiedToolID): "<server>/<tool>",
	// or the bare name of a tool observed without a server.
	ID       string         `json:"id"`
	Server   string         `json:"server"`
	Name     string         `json:"name"`
	Baseline apiToolVersion `json:"baseline"`
	Current  apiToolVersion `json:"current"`
	// Held is true while a drift on used fields holds the baseline, until
	// an operator accepts the current version.
	Held bool `json:"held"`
	// AffectedAgents are the agents whose directive about the tool says
	// MIGRATE or HALT (and is not superseded), sorted.
	AffectedAgents []string `json:"affected_agents"`
	// LastObservedSequence is the telemetry stream sequence of the last
	// schema observation applied (as `baseline list` shows it);
	// LastObservedTime when the stream stored it, absent once the
	// stream no longer holds it.
	LastObservedSequence uint64     `json:"last_observed_sequence"`
	LastObservedTime     *time.Time `json:"last_observed_time,omitempty"`
}

// toolState is what the API reads of the tools: the baseline records,
// the last observation per tool and the schema directives by tool.
type toolState struct {
	records    []core.BaselineRecord
	observed   map[string]uint64
	directives map[string][]events.Directive // by tool; agents' and tool-wide
}

// readToolState reads the baselines, outcomes and directives buckets, or
// only tool's records when tool is not "".
func (a *api) readToolState(ctx context.Context, tool string) (toolState, error) {
	st := toolState{observed: map[string]uint64{}, directives: map[string][]events.Directive{}}
	baselines, err := a.bucket(ctx, a.names.BaselinesBucket())
	if err != nil {
		return st, err
	}
	if tool != "" {
		_, rec, err := getBaseline(ctx, baselines, tool)
		if err != nil {
			return st, err
		}
		st.records = append(st.records, rec)
	} else if err := eachValue(ctx, baselines, func(e jetstream.KeyValueEntry) {
		var rec core.BaselineRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.ToolID != "" {
			st.records = append(st.records, rec)
		}
	}); err != nil {
		return st, err
	}
	if outcomes, err := a.js.KeyValue(ctx, a.names.OutcomesBucket()); err == nil {
		read := func(e jetstream.KeyValueEntry) {
			var o core.OutcomeRecord
			if json.Unmarshal(e.Value(), &o) == nil {
				st.observed[o.ToolID] = o.ObservedSeq
			}
		}
		if tool != "" {
			key, _ := core.Key(tool) // getBaseline checked it
			if e, err := outcomes.Get(ctx, key); err == nil {
				read(e)
			}
		} else if err := eachValue(ctx, outcomes, read); err != nil {
			return st, err
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return st, fmt.Errorf("bucket %s: %w", a.names.OutcomesBucket(), err)
	}
	if kv, err := a.js.KeyValue(ctx, a.names.DirectivesBucket()); err == nil {
		filter := events.DirectiveSchema + ".>"
		if tool != "" {
			if filter, err = events.SchemaDirectiveFilter(tool); err != nil {
				return st, err
			}
		}
		read := func(e jetstream.KeyValueEntry) {
			var d events.Directive
			if json.Unmarshal(e.Value(), &d) == nil && d.Guard == events.DirectiveSchema {
				st.directives[d.ToolID] = append(st.directives[d.ToolID], d)
			}
		}
		if err := eachMatching(ctx, kv, filter, read); err != nil {
			return st, err
		}
		if tool != "" { // the tool-wide directive: its key is the filter's prefix
			key, _ := events.SchemaDirectiveKey(tool, "")
			if e, err := kv.Get(ctx, key); err == nil {
				read(e)
			}
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return st, fmt.Errorf("bucket %s: %w", a.names.DirectivesBucket(), err)
	}
	return st, nil
}

// summary is a record's line of GET /v1/tools; tel, the telemetry stream
// (nil when it cannot be read), dates the last observation.
func summary(ctx context.Context, st toolState, rec core.BaselineRecord, tel jetstream.Stream) apiTool {
	server, name := events.SplitToolID(rec.ToolID)
	t := apiTool{
		ID: rec.ToolID, Server: server, Name: name,
		Baseline: apiVersionOf(rec.Baseline, false), Current: apiVersionOf(rec.Current, false),
		Held: rec.Held, AffectedAgents: []string{},
		LastObservedSequence: max(rec.LastSeq, st.observed[rec.ToolID]),
	}
	for _, d := range st.directives[rec.ToolID] {
		if d.AgentID != "" && d.Action != guards.ActionProceed && d.SupersededBy == "" {
			t.AffectedAgents = append(t.AffectedAgents, d.AgentID)
		}
	}
	sort.Strings(t.AffectedAgents)
	if seq := t.LastObservedSequence; seq > 0 && tel != nil {
		if m, err := tel.GetMsg(ctx, seq); err == nil {
			when := m.Time.UTC()
			t.LastObservedTime = &when
		}
	}
	return t
}

// telemetry is the telemetry stream, or nil when it cannot be read.
func (a *api) telemetry(ctx context.Context) jetstream.Stream {
	s, err := a.js.Stream(ctx, a.names.TelemetryStream())
	if err != nil {
		return nil
	}
	return s
}

// apiToolList is the body of GET /v1/tools.
type apiToolList struct {
	Tools []apiTool `json:"tools"`
}

func (a *api) listTools(w http.ResponseWriter, r *http.Request) {
	st, err := a.readToolState(r.Context(), "")
	if err != nil {
		unavailable(w, err)
		return
	}
	out := apiToolList{Tools: make([]apiTool, 0, len(st.records))}
	tel := a.telemetry(r.Context())
	for _, rec := range st.records {
		out.Tools = append(out.Tools, summary(r.Context(), st, rec, tel))
	}
	sort.Slice(out.Tools, func(i, j int) bool { return out.Tools[i].ID < out.Tools[j].ID })
	writeJSON(w, http.StatusOK, out)
}

// apiChange is a row of a tool's diff: a toolschema.Change and the agents it
// affects.
type apiChange struct {
	toolschema.Change
	AffectedAgents []string `json:"affected_agents"`
}

// apiToolAgent is an agent of a tool: what it uses and the directive in
// force for it (its migration included).
type apiToolAgent struct {
	AgentID string `json:"agent_id"`
	// Input and Output are the paths it sends and reads (none known when
	// only a directive names the agent).
	Input  []string `json:"input"`
	Output []string `json:"output"`
	// Affected are the changed fields (surface keys) of the diff that the
	// agent uses.
	Affected  []string          `json:"affected"`
	Directive *events.Directive `json:"directive"`
}

// apiToolDetail is the body of GET /v1/tools/{id}.
type apiToolDetail struct {
	apiTool
	// Versions are the versions kept in the record, oldest first, with
	// their MCP Tool objects.
	Versions []apiToolVersion `json:"versions"`
	// Changes is the diff from the baseline to the current version (as
	// `toolsentry diff` computes it); empty when they are the same.
	Changes []apiChange `json:"changes"`
	// Agents are the agents known to use the tool or with a directive
	// about it, sorted by id.
	Agents []apiToolAgent `json:"agents"`
	// ToolDirective is the tool-wide directive (null when none).
	ToolDirective *events.Directive `json:"tool_directive"`
}

func (a *api) getTool(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	st, err := a.readToolState(ctx, id)
	switch {
	case errors.Is(err, errNoBaseline):
		writeJSON(w, http.StatusNotFound, apiError{Error: "no tool " + id + ": serve records a tool at its first schema observation"})
		return
	case errors.Is(err, errUsage):
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	case err != nil:
		unavailable(w, err)
		return
	}
	rec := st.records[0]
	usage, err := a.usageOf(ctx, id)
	if err != nil {
		unavailable(w, err)
		return
	}
	detail, err := toolDetail(rec, usage, st.directives[id])
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: fmt.Sprintf("diffing %s: %v", id, err)})
		return
	}
	detail.apiTool = summary(ctx, st, rec, a.telemetry(ctx))
	writeJSON(w, http.StatusOK, detail)
}

// usageOf reads the usage records of tool.
func (a *api) usageOf(ctx context.Context, tool string) ([]core.UsageRecord, error) {
	kv, err := a.js.KeyValue(ctx, a.names.UsageBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", a.names.UsageBucket(), err)
	}
	key, err := core.Key(tool)
	if err != nil {
		return nil, err
	}
	var out []core.UsageRecord
	err = eachMatching(ctx, kv, key+".*", func(e jetstream.KeyValueEntry) {
		var u core.UsageRecord
		if json.Unmarshal(e.Value(), &u) == nil && u.ToolID == tool {
			out = append(out, u)
		}
	})
	return out, err
}

// toolDefinition parses a stored tool version as the core does.
func toolDefinition(id string, v core.ToolVersion) (toolschema.ToolDefinition, error) {
	defs, err := toolschema.ParseToolDocument(v.Tool)
	if err != nil {
		return toolschema.ToolDefinition{}, err
	}
	if len(defs) != 1 {
		return toolschema.ToolDefinition{}, fmt.Errorf("a tool version holds %d tools", len(defs))
	}
	d := defs[0]
	d.ID, d.Version = id, v.Version
	return d, nil
}

// toolDetail is a tool's versions, its baseline-to-current diff with the
// agents each change affects, and its agents with their directives.
func toolDetail(rec core.BaselineRecord, usage []core.UsageRecord, directives []events.Directive) (apiToolDetail, error) {
	out := apiToolDetail{Versions: []apiToolVersion{}, Changes: []apiChange{}, Agents: []apiToolAgent{}}
	for _, v := range rec.Known {
		out.Versions = append(out.Versions, apiVersionOf(v, true))
	}
	if !slices.ContainsFunc(rec.Known, func(v core.ToolVersion) bool { return v.Fingerprint == rec.Current.Fingerprint }) {
		out.Versions = append(out.Versions, apiVersionOf(rec.Current, true))
	}
	agents := map[string]*apiToolAgent{}
	agent := func(id string) *apiToolAgent {
		if ag, ok := agents[id]; ok {
			return ag
		}
		ag := &apiToolAgent{AgentID: id, Input: []string{}, Output: []string{}, Affected: []string{}}
		agents[id] = ag
		return ag
	}
	for _, u := range usage {
		s := u.Surface()
		ag := agent(u.AgentID)
		ag.Input, ag.Output = s.Input, append([]string{}, s.Output...)
	}
	for i := range directives {
		d := directives[i]
		if d.AgentID == "" {
			out.ToolDirective = &d
			continue
		}
		agent(d.AgentID).Directive = &d
	}
	if rec.Baseline.Fingerprint != rec.Current.Fingerprint {
		oldT, err := toolDefinition(rec.ToolID, rec.Baseline)
		if err != nil {
			return out, fmt.Errorf("baseline: %w", err)
		}
		newT, err := toolDefinition(rec.ToolID, rec.Current)
		if err != nil {
			return out, fmt.Errorf("current version: %w", err)
		}
		drift, err := toolschema.NewDrift(oldT, newT, rec.Baseline.Fingerprint, rec.Current.Fingerprint)
		if err != nil {
			return out, err
		}
		rep, err := drift.Evaluate(toolschema.UsedSurface{})
		if err != nil {
			return out, err
		}
		affects := map[string][]string{} // surface key: agents
		for _, u := range usage {
			r, err := drift.Evaluate(u.Surface())
			if err != nil {
				return out, fmt.Errorf("agent %s: %w", u.AgentID, err)
			}
			agent(u.AgentID).Affected = append([]string{}, r.Affected...)
			for _, k := range r.Affected {
				affects[k] = append(affects[k], u.AgentID)
			}
		}
		for _, c := range rep.Changes {
			ags := affects[toolschema.SurfaceKey(c.Side, c.Path)]
			sort.Strings(ags)
			out.Changes = append(out.Changes, apiChange{Change: c, AffectedAgents: append([]string{}, ags...)})
		}
	}
	for _, ag := range agents {
		out.Agents = append(out.Agents, *ag)
	}
	sort.Slice(out.Agents, func(i, j int) bool { return out.Agents[i].AgentID < out.Agents[j].AgentID })
	return out, nil
}

// apiComposition is the body of GET /v1/compositions/{id}.
type apiComposition struct {
	CompositionID string `json:"composition_id"`
	// Declared is false for a composition seen only in traces.
	Declared bool `json:"declared"`
	// Structure is the declared structure (null until declared), Tools the
	// tools it uses, Requirement the declared workflow quality requirement.
	Structure   json.RawMessage `json:"structure"`
	Tools       []string        `json:"tools"`
	Requirement *float64        `json:"requirement"`
	// DeclaredSequence is the telemetry sequence of the declaration applied.
	DeclaredSequence uint64 `json:"declared_sequence"`
	// Pending says why no verdict could be computed yet.
	Pending string `json:"pending,omitempty"`
	// Quality is the composed quality of the latest verdict, with its
	// bounds, set against the requirement (null before any verdict).
	Quality *apiQuality `json:"quality"`
	// Observed counts the runs seen in traces (null when none).
	Observed *core.ObservedRuns `json:"observed"`
	// LatestVerdict is the latest composition verdict in the verdict
	// stream (null when none): its stream sequence, time and CloudEvent.
	LatestVerdict *apiVerdict `json:"latest_verdict"`
}

// apiQuality is a composed quality against the requirement.
type apiQuality struct {
	Verdict  string   `json:"verdict"`
	Composed float64  `json:"composed"`
	Lower    *float64 `json:"lower"`
	Upper    *float64 `json:"upper"`
	// Confidence is CONFIRMED or INCONCLUSIVE ("" when the verdict says
	// neither).
	Confidence string `json:"confidence"`
	// MeetsRequirement compares the composed quality with the requirement
	// (null without one); LowerMeetsRequirement the lower bound (null
	// without one or without a bound).
	MeetsRequirement      *bool `json:"meets_requirement"`
	LowerMeetsRequirement *bool `json:"lower_meets_requirement"`
}

func (a *api) getComposition(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	key, err := core.Key(id)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("composition %q: %v", id, err)})
		return
	}
	kv, err := a.bucket(ctx, a.names.WorkflowsBucket())
	if err != nil {
		unavailable(w, err)
		return
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		writeJSON(w, http.StatusNotFound, apiError{Error: "no composition " + id + ": declare it with an io.toolsentry.workflow.declared.v1 event"})
		return
	}
	if err != nil {
		unavailable(w, err)
		return
	}
	var rec core.WorkflowRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: fmt.Sprintf("%s: key %s: not a workflow record: %v", kv.Bucket(), key, err)})
		return
	}
	out := apiComposition{CompositionID: id, Declared: len(rec.Workflow) > 0, Structure: json.RawMessage("null"), Tools: rec.Tools,
		DeclaredSequence: rec.DeclaredSeq, Pending: rec.Pending, Observed: rec.Observed}
	if out.Tools == nil {
		out.Tools = []string{}
	}
	if out.Declared {
		var decl struct {
			Requirement *float64        `json:"workflow_quality_requirement"`
			Structure   json.RawMessage `json:"structure"`
		}
		if json.Unmarshal(rec.Workflow, &decl) == nil {
			out.Requirement = decl.Requirement
			if len(decl.Structure) > 0 {
				out.Structure = decl.Structure
			}
		}
	}
	latest, cv, err := a.latestCompositionVerdict(ctx, id)
	if err != nil {
		unavailable(w, err)
		return
	}
	out.LatestVerdict = latest
	switch {
	case cv != nil:
		out.Quality = qualityOf(string(cv.Verdict), cv.ComposedQuality, cv.ComposedQualityLower, cv.ComposedQualityUpper, string(cv.Confidence), out.Requirement)
	case rec.Last != nil:
		out.Quality = qualityOf(string(rec.Last.Verdict), rec.Last.ComposedQuality, nil, nil, "", out.Requirement)
	}
	writeJSON(w, http.StatusOK, out)
}

func qualityOf(verdict string, q float64, lower, upper *float64, confidence string, req *float64) *apiQuality {
	out := &apiQuality{Verdict: verdict, Composed: q, Lower: lower, Upper: upper, Confidence: confidence}
	if req != nil {
		meets := q >= *req
		out.MeetsRequirement = &meets
		if lower != nil {
			l := *lower >= *req
			out.LowerMeetsRequirement = &l
		}
	}
	return out
}

// latestCompositionVerdict reads the last composition verdict about id
// from the verdict stream (nil when there is none).
func (a *api) latestCompositionVerdict(ctx context.Context, id string) (*apiVerdict, *events.CompositionVerdict, error) {
	filter, err := a.names.VerdictFilter(events.KindCompositionVerdict, "", id)
	if err != nil {
		return nil, nil, err
	}
	s, err := a.js.Stream(ctx, a.names.VerdictsStream())
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", a.names.VerdictsStream(), err)
	}
	m, err := s.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the latest verdict of %s: %w", id, err)
	}
	ev, err := a.names.Decode(m.Subject, m.Header, m.Data)
	if err != nil || ev.CompositionVerdict == nil {
		return nil, nil, nil // not a verdict: GET /v1/verdicts reports such messages
	}
	v, err := a.verdictOf(ev, m.Subject, m.Sequence, m.Time, m.Header, m.Data)
	if err != nil {
		return nil, nil, err
	}
	return &v, ev.CompositionVerdict, nil
}

// compositionGuardRequest is the body of POST /v1/guard/composition.
type compositionGuardRequest struct {
	AgentID       string `json:"agent_id"`
	CompositionID string `json:"composition_id"`
}

// compositionGuardResponse is its answer: the directive in force, as the
// Go agent client's Workflow gives it.
type compositionGuardResponse struct {
	// Action is PROCEED or HALT (409).
	Action         guards.Action     `json:"action"`
	Directive      string            `json:"directive"`
	Verdict        string            `json:"verdict"`
	ManifestDigest string            `json:"manifest_digest"`
	Reason         string            `json:"reason"`
	InForce        *events.Directive `json:"in_force"`
	Staleness      struct {
		AgeSeconds float64 `json:"age_seconds"`
		Live       bool    `json:"live"`
	} `json:"staleness"`
}

func (a *api) compositionGuard(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGuardBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: fmt.Sprintf("reading the body: %v", err)})
		return
	}
	var req compositionGuardRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("the body is not a composition guard request ({\"agent_id\", \"composition_id\"}): %v", err)})
		return
	}
	if req.CompositionID == "" {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "composition_id is required"})
		return
	}
	if _, err := events.CompositionDirectiveKey(req.CompositionID); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("composition_id: %v", err)})
		return
	}
	v, err := a.directives(r.Context())
	if err != nil {
		unavailable(w, fmt.Errorf("directives not available yet: %w", err))
		return
	}
	d, err := v.Workflow(r.Context(), req.AgentID, req.CompositionID)
	var halt *agent.HaltError
	switch {
	case errors.Is(err, agent.ErrNoDirective):
		writeJSON(w, http.StatusNotFound, apiError{Error: err.Error() + ": no composition verdict yet"})
		return
	case err != nil && !errors.As(err, &halt):
		unavailable(w, err)
		return
	}
	var resp compositionGuardResponse
	st := v.Staleness()
	resp.Staleness.AgeSeconds, resp.Staleness.Live = st.Age.Seconds(), st.Live
	resp.Action, resp.InForce = d.Action, &d
	resp.Directive, resp.Verdict, resp.ManifestDigest, resp.Reason = d.Directive, d.Verdict.Name, d.Verdict.ManifestDigest, d.Reason
	if halt != nil {
		resp.Action = guards.ActionHalt
		writeJSON(w, http.StatusConflict, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
