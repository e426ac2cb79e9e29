package main

// POST /v1/guard on serve's --http address: the agent's Guard for agents in
// other languages. It answers with the same code as the Go client
// (agent.DirectiveView.Guard), from a local view of every directive.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/publisher/agent"
)

// maxGuardBody bounds a /v1/guard request body.
const maxGuardBody = 1 << 20

// guardRequest is the body of POST /v1/guard.
type guardRequest struct {
	AgentID string `json:"agent_id"`
	// ToolID is the tool's id; with Server, the tool's name on that
	// server: decodeGuardRequest qualifies it (events.QualifiedToolID),
	// so {"server": "github", "tool_id": "get_issue"} and {"tool_id":
	// "github/get_issue"} ask about the same tool.
	ToolID    string          `json:"tool_id"`
	Server    string          `json:"server,omitempty"`
	Arguments json.RawMessage `json:"arguments"`
	// SchemaFingerprint, optional, is the tool version the agent
	// integrated against (agent.GuardOptions.Fingerprint).
	SchemaFingerprint string `json:"schema_fingerprint,omitempty"`
}

// guardResponse is the answer of POST /v1/guard (200 and 409) and of
// `toolsentry guard --json`.
type guardResponse struct {
	// Arguments to send (200 only): as given, or migrated.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Action is PROCEED, MIGRATE or HALT.
	Action guards.Action `json:"action"`
	// Migrated is true when the arguments were rewritten.
	Migrated bool `json:"migrated"`
	// Directive is the directive text of the verdict in force ("" when
	// none), Verdict its name, ManifestDigest its digest.
	Directive      string `json:"directive"`
	Verdict        string `json:"verdict"`
	ManifestDigest string `json:"manifest_digest"`
	// Reason says why the action is what it is.
	Reason string `json:"reason"`
	// Fits is true when the payload (migrated, under MIGRATE) was checked
	// against the tool's current input schema, CurrentFingerprint, and
	// fits it.
	Fits               bool   `json:"fits"`
	CurrentFingerprint string `json:"current_fingerprint,omitempty"`
	// BlockedPath is the payload path a migration could not carry over
	// (409 only, when the directive is a MIGRATE).
	BlockedPath *string `json:"blocked_path,omitempty"`
	// InForce is the whole directive (null when none).
	InForce *events.Directive `json:"in_force"`
	// Staleness of the view that answered.
	Staleness struct {
		AgeSeconds float64 `json:"age_seconds"`
		Live       bool    `json:"live"`
	} `json:"staleness"`
}

// decodeGuardRequest reads and checks a request body: a JSON object with
// agent_id, tool_id and arguments (a JSON object), optionally server and
// schema_fingerprint, nothing else. The ToolID it returns is qualified
// with the server.
func decodeGuardRequest(body []byte) (guardRequest, error) {
	var req guardRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("the body is not a guard request ({\"agent_id\", \"tool_id\", \"arguments\"}): %v", err)
	}
	if dec.More() {
		return req, errors.New("the body holds more than one JSON value")
	}
	switch {
	case req.AgentID == "":
		return req, errors.New("agent_id is required")
	case req.ToolID == "":
		return req, errors.New("tool_id is required")
	case len(req.Arguments) == 0 || bytes.Equal(bytes.TrimSpace(req.Arguments), []byte("null")):
		return req, errors.New("arguments are required (a JSON object)")
	case bytes.TrimSpace(req.Arguments)[0] != '{':
		return req, errors.New("arguments must be a JSON object")
	}
	req.ToolID = events.QualifiedToolID(req.Server, req.ToolID)
	if _, err := events.SchemaDirectiveKey(req.ToolID, req.AgentID); err != nil {
		return req, fmt.Errorf("agent_id, server or tool_id: %v", err)
	}
	return req, nil
}

// decideGuard runs the client's Guard and shapes its answer: the response
// and whether it is a HALT. Any other error is returned.
func decideGuard(ctx context.Context, v *agent.DirectiveView, req guardRequest) (guardResponse, bool, error) {
	dec, err := v.Guard(ctx, req.AgentID, req.ToolID, req.Arguments, agent.GuardOptions{Fingerprint: req.SchemaFingerprint})
	var halt *agent.HaltError
	if err != nil && !errors.As(err, &halt) {
		return guardResponse{}, false, err
	}
	var resp guardResponse
	resp.Staleness.AgeSeconds = dec.Staleness.Age.Seconds()
	resp.Staleness.Live = dec.Staleness.Live
	resp.Action, resp.Reason, resp.Fits, resp.CurrentFingerprint = dec.Action, dec.Reason, dec.Fits, dec.CurrentFingerprint
	if d := dec.Directive; d != nil {
		resp.InForce = d
		resp.Directive, resp.Verdict, resp.ManifestDigest = d.Directive, d.Verdict.Name, d.Verdict.ManifestDigest
	}
	if halt != nil {
		resp.Action = guards.ActionHalt
		var merr *toolschema.MigrationError
		if errors.As(halt.Cause, &merr) {
			p := merr.Path
			resp.BlockedPath = &p
			resp.Reason = "this payload cannot be migrated at " + describePath(p) + ": " + blockerReason(halt.Directive, merr)
		}
		return resp, true, nil
	}
	resp.Arguments, resp.Migrated = dec.Arguments, dec.Migrated
	return resp, false, nil
}

func describePath(p string) string {
	if p == "" {
		return "the payload"
	}
	return p
}

// blockerReason is the reason of the plan's blocker that stopped the
// payload, or a value-free summary when a conversion failed (its error
// quotes the value, which stays out of responses).
func blockerReason(d events.Directive, merr *toolschema.MigrationError) string {
	for _, b := range d.Migration.Blocked {
		if b.Reason == merr.Reason {
			return b.Reason
		}
	}
	return "its value cannot be converted to the type the tool now wants"
}

// guardHandler serves POST /v1/guard. Its view of every directive opens on
// the first request (the bucket exists once the service has started) and
// follows the bucket until ctx ends.
type guardHandler struct {
	ctx   context.Context
	nc    *nats.Conn
	names events.Names

	mu   sync.Mutex
	view *agent.DirectiveView
}

// newGuardHandler returns the handler of POST /v1/guard for serve.
func newGuardHandler(ctx context.Context, nc *nats.Conn, prefix string) http.Handler {
	names, _ := events.NewNames(prefix) // serve checked the prefix
	return &guardHandler{ctx: ctx, nc: nc, names: names}
}

func (h *guardHandler) viewFor(ctx context.Context) (*agent.DirectiveView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.view != nil {
		return h.view, nil
	}
	js, err := jetstream.New(h.nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := agent.WatchDirectives(ctx, js, h.names, agent.ViewOptions{})
	if err != nil {
		return nil, err
	}
	h.view = v
	go func() {
		<-h.ctx.Done()
		v.Close()
	}()
	return v, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (h *guardHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST with {\"agent_id\", \"tool_id\", \"arguments\"}"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGuardBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("reading the body: %v", err)})
		return
	}
	req, err := decodeGuardRequest(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	v, err := h.viewFor(r.Context())
	if err != nil {
		zerolog.Ctx(h.ctx).Warn().Err(err).Msg("guard endpoint: directives not available")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "directives not available yet: " + err.Error()})
		return
	}
	resp, halted, err := decideGuard(r.Context(), v, req)
	switch {
	case errors.Is(err, agent.ErrBadPayload):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case halted:
		writeJSON(w, http.StatusConflict, resp)
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}
