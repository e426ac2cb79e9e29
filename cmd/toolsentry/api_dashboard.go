package main

// The API's list views that the dashboard (dashboard.go) reads besides
// the tools, the verdicts and a composition:
//
//	GET /v1/compositions   every composition: tools, requirement, last verdict, observed runs
//	GET /v1/agents         every agent: the tools it uses and its directives; tool-wide and composition directives
//	GET /v1/deadletters    the dead letters: counts by reason and the latest ones' reasons (never their bodies)
//
// Like the rest of the API they read the state buckets and streams that
// serve keeps, and write nothing.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

// apiCompositionSummary is a composition in GET /v1/compositions.
type apiCompositionSummary struct {
	CompositionID string   `json:"composition_id"`
	Declared      bool     `json:"declared"`
	Tools         []string `json:"tools"`
	Requirement   *float64 `json:"requirement"`
	Pending       string   `json:"pending,omitempty"`
	// Verdict and ComposedQuality are the last verdict's ("" and null
	// before any).
	Verdict         string             `json:"verdict"`
	ComposedQuality *float64           `json:"composed_quality"`
	Observed        *core.ObservedRuns `json:"observed"`
}

// apiCompositionList is the body of GET /v1/compositions.
type apiCompositionList struct {
	Compositions []apiCompositionSummary `json:"compositions"`
}

func (a *api) listCompositions(w http.ResponseWriter, r *http.Request) {
	kv, err := a.bucket(r.Context(), a.names.WorkflowsBucket())
	if err != nil {
		unavailable(w, err)
		return
	}
	out := apiCompositionList{Compositions: []apiCompositionSummary{}}
	err = eachValue(r.Context(), kv, func(e jetstream.KeyValueEntry) {
		var rec core.WorkflowRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.CompositionID == "" {
			return
		}
		c := apiCompositionSummary{CompositionID: rec.CompositionID, Declared: len(rec.Workflow) > 0, Tools: rec.Tools,
			Pending: rec.Pending, Observed: rec.Observed}
		if c.Tools == nil {
			c.Tools = []string{}
		}
		if c.Declared {
			var decl struct {
				Requirement *float64 `json:"workflow_quality_requirement"`
			}
			if json.Unmarshal(rec.Workflow, &decl) == nil {
				c.Requirement = decl.Requirement
			}
		}
		if rec.Last != nil {
			q := rec.Last.ComposedQuality
			c.Verdict, c.ComposedQuality = string(rec.Last.Verdict), &q
		}
		out.Compositions = append(out.Compositions, c)
	})
	if err != nil {
		unavailable(w, err)
		return
	}
	sort.Slice(out.Compositions, func(i, j int) bool {
		return out.Compositions[i].CompositionID < out.Compositions[j].CompositionID
	})
	writeJSON(w, http.StatusOK, out)
}

// apiAgentTool is a tool an agent uses: the paths it sends and reads.
type apiAgentTool struct {
	ToolID string   `json:"tool_id"`
	Input  []string `json:"input"`
	Output []string `json:"output"`
}

// apiAgent is an agent in GET /v1/agents.
type apiAgent struct {
	AgentID string `json:"agent_id"`
	// Tools are the tools it is known to use, by id.
	Tools []apiAgentTool `json:"tools"`
	// Directives are its own schema directives, by tool id; a tool-wide
	// directive applies where it has none of its own.
	Directives []events.Directive `json:"directives"`
}

// apiAgentList is the body of GET /v1/agents.
type apiAgentList struct {
	Agents []apiAgent `json:"agents"`
	// ToolDirectives are the tool-wide schema directives, by tool id;
	// CompositionDirectives the directives of compositions, which apply
	// to every agent that runs them.
	ToolDirectives        []events.Directive `json:"tool_directives"`
	CompositionDirectives []events.Directive `json:"composition_directives"`
}

func (a *api) listAgents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := apiAgentList{Agents: []apiAgent{}, ToolDirectives: []events.Directive{}, CompositionDirectives: []events.Directive{}}
	agents := map[string]*apiAgent{}
	agent := func(id string) *apiAgent {
		if ag, ok := agents[id]; ok {
			return ag
		}
		ag := &apiAgent{AgentID: id, Tools: []apiAgentTool{}, Directives: []events.Directive{}}
		agents[id] = ag
		return ag
	}
	if kv, err := a.js.KeyValue(ctx, a.names.UsageBucket()); err == nil {
		if err := eachValue(ctx, kv, func(e jetstream.KeyValueEntry) {
			var u core.UsageRecord
			if json.Unmarshal(e.Value(), &u) != nil || u.AgentID == "" || u.ToolID == "" {
				return
			}
			s := u.Surface()
			ag := agent(u.AgentID)
			ag.Tools = append(ag.Tools, apiAgentTool{ToolID: u.ToolID, Input: nonNil(s.Input), Output: nonNil(s.Output)})
		}); err != nil {
			unavailable(w, err)
			return
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		unavailable(w, fmt.Errorf("bucket %s: %w", a.names.UsageBucket(), err))
		return
	}
	if kv, err := a.js.KeyValue(ctx, a.names.DirectivesBucket()); err == nil {
		if err := eachValue(ctx, kv, func(e jetstream.KeyValueEntry) {
			var d events.Directive
			if json.Unmarshal(e.Value(), &d) != nil {
				return
			}
			switch {
			case d.Guard == events.DirectiveComposition:
				out.CompositionDirectives = append(out.CompositionDirectives, d)
			case d.Guard == events.DirectiveSchema && d.AgentID == "":
				out.ToolDirectives = append(out.ToolDirectives, d)
			case d.Guard == events.DirectiveSchema:
				ag := agent(d.AgentID)
				ag.Directives = append(ag.Directives, d)
			}
		}); err != nil {
			unavailable(w, err)
			return
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		unavailable(w, fmt.Errorf("bucket %s: %w", a.names.DirectivesBucket(), err))
		return
	}
	for _, ag := range agents {
		sort.Slice(ag.Tools, func(i, j int) bool { return ag.Tools[i].ToolID < ag.Tools[j].ToolID })
		sort.Slice(ag.Directives, func(i, j int) bool { return ag.Directives[i].ToolID < ag.Directives[j].ToolID })
		out.Agents = append(out.Agents, *ag)
	}
	sort.Slice(out.Agents, func(i, j int) bool { return out.Agents[i].AgentID < out.Agents[j].AgentID })
	sort.Slice(out.ToolDirectives, func(i, j int) bool { return out.ToolDirectives[i].ToolID < out.ToolDirectives[j].ToolID })
	sort.Slice(out.CompositionDirectives, func(i, j int) bool {
		return out.CompositionDirectives[i].CompositionID < out.CompositionDirectives[j].CompositionID
	})
	writeJSON(w, http.StatusOK, out)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Page size of GET /v1/deadletters.
const (
	defaultDeadLetterLimit = 20
	maxDeadLetterLimit     = 200
)

// apiDeadLetter is a dead letter as the API shows it: what its headers
// say (events.ParseDeadLetter). Its body, the original bytes, is never
// shown: it may hold an agent's argument values.
type apiDeadLetter struct {
	Sequence uint64    `json:"sequence"`
	Time     time.Time `json:"time"` // when the dead-letter stream stored it
	Reason   string    `json:"reason"`
	Error    string    `json:"error"`
	// OriginalSubject, OriginalStream and OriginalSequence say where the
	// input was consumed (the subject as stored, with the partition token:
	// <prefix>.telemetry.<kind>.<p>.<key>, or the 4-token form of an input
	// stored before the stream had its subject transform);
	// PublishedSubject is the subject it was published on, to publish a
	// corrected input on ("" when the original subject does not parse).
	// OriginalMsgID is its Nats-Msg-Id ("" when none).
	OriginalSubject  string `json:"original_subject"`
	PublishedSubject string `json:"published_subject,omitempty"`
	OriginalStream   string `json:"original_stream"`
	OriginalSequence uint64 `json:"original_sequence"`
	OriginalMsgID    string `json:"original_msg_id,omitempty"`
	Delivered        uint64 `json:"delivered,omitempty"`
}

// apiDeadLetters is the body of GET /v1/deadletters.
type apiDeadLetters struct {
	Total uint64 `json:"total"`
	// ByReason counts the dead letters the stream holds per reason.
	ByReason map[string]uint64 `json:"by_reason"`
	// Latest are the newest dead letters, newest first.
	Latest []apiDeadLetter `json:"latest"`
}

func (a *api) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit := defaultDeadLetterLimit
	for name := range r.URL.Query() {
		if name != "limit" {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("unknown parameter %q: want limit", name)})
			return
		}
	}
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDeadLetterLimit {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("limit %q: want 1 to %d", s, maxDeadLetterLimit)})
			return
		}
		limit = n
	}
	s, err := a.js.Stream(ctx, a.names.DeadLetterStream())
	if err != nil {
		unavailable(w, fmt.Errorf("stream %s: %w", a.names.DeadLetterStream(), err))
		return
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(a.names.DeadLetterSubjects()))
	if err != nil {
		unavailable(w, fmt.Errorf("stream %s: %w", a.names.DeadLetterStream(), err))
		return
	}
	out := apiDeadLetters{Total: info.State.Msgs, ByReason: map[string]uint64{}, Latest: []apiDeadLetter{}}
	for subject, n := range info.State.Subjects {
		out.ByReason[subject[strings.LastIndexByte(subject, '.')+1:]] += n
	}
	// Newest first, by sequence; a deleted sequence is skipped, and the
	// walk is bounded where many are.
	first, last := info.State.FirstSeq, info.State.LastSeq
	for seq, tries := last, 0; seq >= first && seq > 0 && len(out.Latest) < limit && tries < 4*limit+64; seq, tries = seq-1, tries+1 {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			unavailable(w, fmt.Errorf("reading dead letter %d: %w", seq, err))
			return
		}
		out.Latest = append(out.Latest, deadLetterOf(a.names, m))
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetterOf reads a dead letter's headers; one whose headers do not
// parse keeps the reason of its subject and says so as its error.
func deadLetterOf(names events.Names, m *jetstream.RawStreamMsg) apiDeadLetter {
	out := apiDeadLetter{Sequence: m.Sequence, Time: m.Time.UTC()}
	dl, err := events.ParseDeadLetter(m.Header)
	if err != nil {
		out.Reason = m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		out.Error = "unreadable dead-letter headers: " + err.Error()
		return out
	}
	out.Reason, out.Error = string(dl.Reason), dl.Error
	out.OriginalSubject, out.OriginalStream, out.OriginalSequence = dl.Subject, dl.Stream, dl.Sequence
	if pub, err := names.Published(dl.Subject); err == nil {
		out.PublishedSubject = pub
	}
	out.OriginalMsgID, out.Delivered = dl.MsgID, dl.Delivered
	return out
}
