package main

// GET /v1/verdicts: the verdict stream, filtered and paged.
//
// Filters: guard (schema, composition), verdict (any case), tool (schema
// verdicts about one tool), composition (composition verdicts about one
// composition) and since (a duration back from now or an RFC 3339 time)
// become subject filters on the stream
// (toolsentry.verdicts.<guard>.<verdict>.<key>) and start positions; agent
// (schema verdicts about one agent) is applied here, on the decoded
// verdicts.
//
// Paging: order=desc (the default) lists the newest first, order=asc the
// oldest first. A page holds at most limit verdicts (default 50, at most
// 500); next_cursor, when set, is the stream sequence of its last verdict:
// pass it as cursor to get the next page (verdicts older than it in desc
// order, newer in asc order). The cursor is a stream sequence, so a page
// stays stable while new verdicts arrive.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
)

// Page sizes of GET /v1/verdicts.
const (
	defaultVerdictLimit = 50
	maxVerdictLimit     = 500
)

// apiVerdict is a verdict as the API lists it: where it is in the stream,
// what the subject says, and the CloudEvent as it was published (its data
// passed through as is).
type apiVerdict struct {
	Sequence uint64    `json:"sequence"`
	Subject  string    `json:"subject"`
	Time     time.Time `json:"time"` // when the stream stored it
	Guard    string    `json:"guard"`
	Verdict  string    `json:"verdict"`
	// Key is the tool id (schema verdicts) or the composition id.
	Key     string `json:"key"`
	AgentID string `json:"agent_id,omitempty"`
	// Action (PROCEED, MIGRATE, HALT) and Summary are the verdict's own,
	// absent on verdicts published before they had them.
	Action  string          `json:"action,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Event   json.RawMessage `json:"event"`
}

// apiVerdictPage is the body of GET /v1/verdicts.
type apiVerdictPage struct {
	Verdicts   []apiVerdict `json:"verdicts"`
	Order      string       `json:"order"`
	NextCursor *uint64      `json:"next_cursor"`
}

// verdictOf shapes a decoded verdict message.
func (a *api) verdictOf(ev events.Event, subject string, seq uint64, stored time.Time, header map[string][]string, data []byte) (apiVerdict, error) {
	addr, err := a.names.ParseSubject(subject)
	if err != nil {
		return apiVerdict{}, err
	}
	v := apiVerdict{Sequence: seq, Subject: subject, Time: stored.UTC(), Guard: addr.Kind.Token(), Verdict: addr.Verdict, Key: addr.Key}
	switch {
	case ev.SchemaVerdict != nil:
		v.AgentID, v.Action, v.Summary = ev.SchemaVerdict.AgentID, string(ev.SchemaVerdict.Action), ev.SchemaVerdict.Summary
	case ev.CompositionVerdict != nil:
		v.Action, v.Summary = string(ev.CompositionVerdict.Action), ev.CompositionVerdict.Summary
	}
	var b bytes.Buffer
	if err := json.Compact(&b, data); err == nil && bytes.Contains(b.Bytes(), []byte(`"specversion"`)) && isStructured(header) {
		v.Event = b.Bytes()
		return v, nil
	}
	m, err := a.names.Encode(ev) // a binary-mode verdict, in structured mode
	if err != nil {
		return apiVerdict{}, fmt.Errorf("re-encoding verdict %s: %w", ev.ID, err)
	}
	v.Event = m.Data
	return v, nil
}

// verdictQuery is a parsed GET /v1/verdicts query.
type verdictQuery struct {
	filters []string
	agent   string
	since   time.Time
	cursor  uint64
	limit   int
	asc     bool
}

// apiMessage is an error's text without the usage marker, and with flag
// names as query parameters.
func apiMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	return strings.ReplaceAll(msg, "--", "")
}

func (a *api) parseVerdictQuery(r *http.Request, now time.Time) (verdictQuery, error) {
	q := r.URL.Query()
	for name := range q {
		switch name {
		case "guard", "verdict", "tool", "composition", "agent", "since", "cursor", "limit", "order":
		default:
			return verdictQuery{}, fmt.Errorf("unknown parameter %q: want guard, verdict, tool, composition, agent, since, cursor, limit or order", name)
		}
	}
	vq := verdictQuery{agent: q.Get("agent"), limit: defaultVerdictLimit}
	guard, tool, comp := q.Get("guard"), q.Get("tool"), q.Get("composition")
	switch {
	case tool != "" && comp != "":
		return vq, errors.New("tool and composition exclude each other")
	case tool != "" && guard == "":
		guard = "schema"
	case comp != "" && guard == "":
		guard = "composition"
	case tool != "" && guard != "schema", comp != "" && guard != "composition":
		return vq, errors.New("tool goes with guard schema, composition with guard composition")
	}
	verdict := strings.ToUpper(q.Get("verdict"))
	kinds, err := watchKinds(guard, verdict, vq.agent)
	if err != nil {
		return vq, errors.New(apiMessage(err))
	}
	for _, k := range kinds {
		f, err := a.names.VerdictFilter(k, verdict, tool+comp)
		if err != nil {
			return vq, err
		}
		vq.filters = append(vq.filters, f)
	}
	if s := q.Get("since"); s != "" {
		if vq.since, err = parseSince(s, now); err != nil {
			return vq, errors.New(apiMessage(err))
		}
	}
	if s := q.Get("cursor"); s != "" {
		if vq.cursor, err = strconv.ParseUint(s, 10, 64); err != nil || vq.cursor == 0 {
			return vq, fmt.Errorf("cursor %q: want a stream sequence (next_cursor of the previous page)", s)
		}
	}
	if s := q.Get("limit"); s != "" {
		if vq.limit, err = strconv.Atoi(s); err != nil || vq.limit < 1 || vq.limit > maxVerdictLimit {
			return vq, fmt.Errorf("limit %q: want 1 to %d", s, maxVerdictLimit)
		}
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		vq.asc = true
	default:
		return vq, fmt.Errorf("order %q: want desc (newest first) or asc", q.Get("order"))
	}
	return vq, nil
}

func (a *api) listVerdicts(w http.ResponseWriter, r *http.Request) {
	vq, err := a.parseVerdictQuery(r, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	page, err := a.verdictPage(r.Context(), vq)
	if err != nil {
		unavailable(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// verdictPage reads one page of verdicts.
func (a *api) verdictPage(ctx context.Context, vq verdictQuery) (apiVerdictPage, error) {
	page := apiVerdictPage{Verdicts: []apiVerdict{}, Order: "desc"}
	if vq.asc {
		page.Order = "asc"
	}
	s, err := a.js.Stream(ctx, a.names.VerdictsStream())
	if err != nil {
		return page, fmt.Errorf("stream %s: %w", a.names.VerdictsStream(), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return page, err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		return page, nil
	}
	if vq.asc {
		from := max(first, vq.cursor+1)
		more := false
		err := a.scanVerdicts(ctx, vq, from, last, func(v apiVerdict) bool {
			if len(page.Verdicts) == vq.limit {
				more = true
				return false
			}
			page.Verdicts = append(page.Verdicts, v)
			return true
		})
		if err != nil {
			return page, err
		}
		if more {
			next := page.Verdicts[len(page.Verdicts)-1].Sequence
			page.NextCursor = &next
		}
		return page, nil
	}
	// Newest first: scan windows back from the upper end, each twice the
	// last, until a page is full or the stream's (or since's) start.
	upper := last
	if vq.cursor > 0 {
		if vq.cursor <= first {
			return page, nil
		}
		upper = min(last, vq.cursor-1)
	}
	window := uint64(max(4*vq.limit, 256))
	for upper >= first {
		lo := first
		if upper-first+1 > window {
			lo = upper - window + 1
		}
		var found []apiVerdict
		older := false // a verdict before since: nothing older counts
		err := a.scanVerdicts(ctx, vq, lo, upper, func(v apiVerdict) bool {
			found = append(found, v)
			return true
		})
		if err != nil {
			return page, err
		}
		for i := len(found) - 1; i >= 0; i-- {
			if len(page.Verdicts) == vq.limit {
				next := page.Verdicts[len(page.Verdicts)-1].Sequence
				page.NextCursor = &next
				return page, nil
			}
			page.Verdicts = append(page.Verdicts, found[i])
		}
		if !vq.since.IsZero() && lo > first {
			// Is the window's start already before since? Then so is all
			// that is older.
			if m, err := s.GetMsg(ctx, lo); err == nil && m.Time.Before(vq.since) {
				older = true
			}
		}
		if lo == first || older {
			break
		}
		upper = lo - 1
		window *= 2
	}
	return page, nil // nothing older: no next page
}

// scanVerdicts calls f, in stream order, with each verdict from sequence
// from to upper that passes the filters, until f returns false.
func (a *api) scanVerdicts(ctx context.Context, vq verdictQuery, from, upper uint64, f func(apiVerdict) bool) error {
	if from > upper {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: vq.filters, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from}
	if !vq.since.IsZero() && vq.asc && vq.cursor == 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &vq.since
	}
	cons, err := a.js.OrderedConsumer(ctx, a.names.VerdictsStream(), cfg)
	if err != nil {
		return fmt.Errorf("reading %s: %w", a.names.VerdictsStream(), err)
	}
	ci := cons.CachedInfo()
	if ci == nil {
		if ci, err = cons.Info(ctx); err != nil {
			return err
		}
	}
	if ci.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return fmt.Errorf("reading %s: %w", a.names.VerdictsStream(), err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		seq := md.Sequence.Stream
		if seq > upper {
			return nil
		}
		if ok := a.passVerdict(vq, msg, md, f); !ok {
			return nil
		}
		if md.NumPending == 0 || seq == upper {
			return nil
		}
	}
}

// passVerdict hands msg to f if it is a verdict that passes the agent and
// since filters; it reports whether to go on.
func (a *api) passVerdict(vq verdictQuery, msg jetstream.Msg, md *jetstream.MsgMetadata, f func(apiVerdict) bool) bool {
	if !vq.since.IsZero() && md.Timestamp.Before(vq.since) {
		return true
	}
	ev, err := a.names.Decode(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		return true // not a verdict: skipped, as watch does
	}
	if vq.agent != "" && (ev.SchemaVerdict == nil || ev.SchemaVerdict.AgentID != vq.agent) {
		return true
	}
	v, err := a.verdictOf(ev, msg.Subject(), md.Sequence.Stream, md.Timestamp, msg.Headers(), msg.Data())
	if err != nil {
		return true
	}
	return f(v)
}
