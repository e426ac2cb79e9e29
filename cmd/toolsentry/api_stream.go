package main

// GET /v1/verdicts/stream: the verdict stream as server-sent events
// (text/event-stream), for the dashboard's live feed and any client that
// wants verdicts as they are published without NATS.
//
// It takes GET /v1/verdicts's filters (guard, verdict, tool, composition,
// agent) and starts with the verdicts published after the request; cursor
// (a stream sequence: the newest verdict a client already has), the
// Last-Event-ID header of a reconnecting EventSource, or since start it
// earlier. Each verdict is one event:
//
//	id: <stream sequence>
//	event: verdict
//	data: <the verdict as GET /v1/verdicts lists it, on one line>
//
// A comment line (": keep-alive") is sent when nothing came for a while,
// so that proxies keep the connection open; an "event: error" ends the
// stream when the verdict stream cannot be read any longer.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// sseKeepAlive is how long the stream stays silent before a keep-alive
// comment (shorter in tests).
var sseKeepAlive = 15 * time.Second

// parseStreamQuery is parseVerdictQuery without paging; the start is
// cursor, else Last-Event-ID, else since, else now.
func (a *api) parseStreamQuery(r *http.Request) (verdictQuery, error) {
	q := r.URL.Query()
	for _, name := range []string{"limit", "order"} {
		if q.Has(name) {
			return verdictQuery{}, fmt.Errorf("%s: the stream is not paged (GET /v1/verdicts is)", name)
		}
	}
	vq, err := a.parseVerdictQuery(r, time.Now())
	if err != nil {
		return vq, err
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" && vq.cursor == 0 {
		if vq.cursor, err = strconv.ParseUint(id, 10, 64); err != nil {
			return vq, fmt.Errorf("header Last-Event-ID %q: want the id of a verdict event (a stream sequence)", id)
		}
	}
	return vq, nil
}

func (a *api) streamVerdicts(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	vq, err := a.parseStreamQuery(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error()})
		return
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: vq.filters, DeliverPolicy: jetstream.DeliverNewPolicy}
	switch {
	case vq.cursor > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, vq.cursor+1
	case !vq.since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &vq.since
	}
	cons, err := a.js.OrderedConsumer(ctx, a.names.VerdictsStream(), cfg)
	if err != nil {
		unavailable(w, fmt.Errorf("reading %s: %w", a.names.VerdictsStream(), err))
		return
	}
	it, err := cons.Messages()
	if err != nil {
		unavailable(w, fmt.Errorf("reading %s: %w", a.names.VerdictsStream(), err))
		return
	}
	defer it.Stop()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	send := func() bool {
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		return err == nil && rc.Flush() == nil
	}
	buf.WriteString("retry: 3000\n: verdicts of " + a.names.VerdictsStream() + "\n\n")
	if !send() {
		return
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, sseKeepAlive)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return // the client went away
		case errors.Is(err, context.DeadlineExceeded):
			buf.WriteString(": keep-alive\n\n")
			if !send() {
				return
			}
			continue
		case err != nil:
			b, _ := json.Marshal(apiError{Error: fmt.Sprintf("reading %s: %v", a.names.VerdictsStream(), err)})
			fmt.Fprintf(&buf, "event: error\ndata: %s\n\n", b)
			send()
			return
		}
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		ok := true
		a.passVerdict(vq, msg, md, func(v apiVerdict) bool {
			b, err := json.Marshal(v)
			if err != nil {
				return true
			}
			fmt.Fprintf(&buf, "id: %d\nevent: verdict\ndata: %s\n\n", v.Sequence, b)
			ok = send()
			return ok
		})
		if !ok {
			return
		}
	}
}
