package main

// POST /v1/events: CloudEvents over the HTTP protocol binding, into the
// telemetry stream, for producers that do not speak NATS.
//
//	structured  Content-Type: application/cloudevents+json, the event as the body
//	binary      the attributes in ce-* headers, the data as the body
//	batched     Content-Type: application/cloudevents-batch+json, a JSON array of
//	            structured events
//
// Each event is checked as the workers check NATS input (events.Decode on
// the subject of its type and key, as emit derives it) and, if valid,
// published re-encoded (an invocation's argument values replaced by their
// types) with Nats-Msg-Id = its id, so a retried POST publishes nothing
// twice. An invalid event is not refused and forgotten: it is published
// as it came, without a Nats-Msg-Id, so that the worker dead-letters it to
// TOOLSENTRY_DLQ with the standard reason, exactly like a bad event
// published on NATS; the answer names the reason already.
//
// A single event is answered 202 (accepted or duplicate) or 400 (its
// reason; dead-lettered); a batch 200 with one result per event, in order.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// Limits of POST /v1/events.
const (
	maxEventsBody  = 4 << 20
	maxBatchEvents = 1000
)

// The media types of the HTTP binding's modes.
const (
	mediaCloudEvent      = "application/cloudevents+json"
	mediaCloudEventBatch = "application/cloudevents-batch+json"
)

// The statuses of an event's result.
const (
	eventAccepted     = "accepted"      // stored in the telemetry stream
	eventDuplicate    = "duplicate"     // the stream held an event of this id already
	eventDeadLettered = "dead_lettered" // invalid: published for the worker to dead-letter
)

// apiEventResult is the answer about one event.
type apiEventResult struct {
	// Index is the event's position in a batch (0 for a single event).
	Index   int    `json:"index"`
	ID      string `json:"id,omitempty"`
	Subject string `json:"subject"`
	Status  string `json:"status"`
	// Sequence is the telemetry stream sequence the event was stored at.
	Sequence uint64 `json:"sequence,omitempty"`
	// Reason and Error say why an event is dead-lettered: the reason is
	// the one its dead letter carries (toolsentry.dlq.<reason>).
	Reason events.Reason `json:"reason,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// apiEventBatchResult is the answer to a batch.
type apiEventBatchResult struct {
	Results      []apiEventResult `json:"results"`
	Accepted     int              `json:"accepted"`
	Duplicates   int              `json:"duplicates"`
	DeadLettered int              `json:"dead_lettered"`
}

func (a *api) postEvents(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventsBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: fmt.Sprintf("reading the body (at most %d bytes): %v", maxEventsBody, err)})
		return
	}
	mt := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			mt = strings.ToLower(strings.TrimSpace(ct))
		}
	}
	binary := r.Header.Get("Ce-Specversion") != ""
	ctx := r.Context()
	switch {
	case mt == mediaCloudEventBatch:
		a.postBatch(ctx, w, body)
	case mt == mediaCloudEvent, !binary && (mt == "application/json" || mt == ""):
		// structured; a plain JSON body without ce- headers is taken as a
		// structured event too, as the NATS input takes it
		if refuseReserved(w, structuredHeader(), body) {
			return
		}
		res, err := a.ingest(ctx, 0, structuredHeader(), body)
		respondEvent(w, res, err)
	case binary:
		h := map[string][]string{}
		for name, vs := range r.Header {
			if len(name) > 3 && strings.EqualFold(name[:3], "ce-") {
				h[strings.ToLower(name)] = vs
			}
		}
		if vs := r.Header.Values("Content-Type"); len(vs) > 0 {
			h[events.HeaderContentType] = vs
		}
		if refuseReserved(w, h, body) {
			return
		}
		res, err := a.ingest(ctx, 0, h, body)
		respondEvent(w, res, err)
	default:
		writeJSON(w, http.StatusUnsupportedMediaType, apiError{Error: fmt.Sprintf("Content-Type %q: want %s (structured), %s (batched), or ce- headers (binary mode)", mt, mediaCloudEvent, mediaCloudEventBatch)})
	}
}

// refuseReserved answers 403 to an event of a type that the HTTP API
// does not take from its callers: an operator event (baseline accepted or
// reset, agent migrated or forgotten), which is the operator role's on
// NATS (toolsentry baseline, toolsentry agent), or a quality checkpoint,
// which only the workers publish. The API publishes with serve's own
// connection, which would lend them to any HTTP producer past the roles of
// deploy/nats/accounts.conf.
func refuseReserved(w http.ResponseWriter, header map[string][]string, body []byte) bool {
	typ, _ := eventTypeAndData(header, body)
	switch k := events.KindOfType(typ); {
	case k.Operator():
		writeJSON(w, http.StatusForbidden, apiError{Error: fmt.Sprintf("type %q is an operator event: publish it with toolsentry baseline or toolsentry agent as the operator user, not through the HTTP API", typ)})
	case k == events.KindQualityCheckpoint:
		writeJSON(w, http.StatusForbidden, apiError{Error: fmt.Sprintf("type %q is published by the workers themselves, not through the HTTP API", typ)})
	default:
		return false
	}
	return true
}

func structuredHeader() map[string][]string {
	return map[string][]string{events.HeaderContentType: {events.ContentTypeStructured}}
}

func respondEvent(w http.ResponseWriter, res apiEventResult, err error) {
	switch {
	case err != nil:
		unavailable(w, err)
	case res.Status == eventDeadLettered:
		writeJSON(w, http.StatusBadRequest, res)
	default:
		writeJSON(w, http.StatusAccepted, res)
	}
}

func (a *api) postBatch(ctx context.Context, w http.ResponseWriter, body []byte) {
	var batch []json.RawMessage
	if err := json.Unmarshal(body, &batch); err != nil || batch == nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "a batch is a JSON array of structured CloudEvents: " + describeJSONError(err, body)})
		return
	}
	if len(batch) > maxBatchEvents {
		writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Error: fmt.Sprintf("a batch holds at most %d events, this one %d", maxBatchEvents, len(batch))})
		return
	}
	for _, raw := range batch {
		if refuseReserved(w, structuredHeader(), raw) {
			return // nothing of the batch published
		}
	}
	out := apiEventBatchResult{Results: make([]apiEventResult, 0, len(batch))}
	for i, raw := range batch {
		res, err := a.ingest(ctx, i, structuredHeader(), raw)
		if err != nil {
			unavailable(w, fmt.Errorf("event %d: %w (the events before it were published)", i, err))
			return
		}
		switch res.Status {
		case eventAccepted:
			out.Accepted++
		case eventDuplicate:
			out.Duplicates++
		default:
			out.DeadLettered++
		}
		out.Results = append(out.Results, res)
	}
	writeJSON(w, http.StatusOK, out)
}

func describeJSONError(err error, body []byte) string {
	if err != nil {
		return err.Error()
	}
	return "got " + jsonKindOf(body)
}

// ingest checks one event and publishes it: re-encoded when valid, as it
// came when not (for the worker to dead-letter). The error is a failure
// to publish.
func (a *api) ingest(ctx context.Context, index int, header map[string][]string, body []byte) (apiEventResult, error) {
	typ, data := eventTypeAndData(header, body)
	subject := telemetrySubjectOf(a.names, typ, data)
	res := apiEventResult{Index: index, Subject: subject}
	ev, err := a.names.Decode(subject, header, body)
	var msg events.Message
	if err == nil {
		msg, err = a.names.Encode(ev)
	}
	if err != nil {
		reason, ok := events.ReasonFor(err)
		if !ok {
			reason = events.ReasonPermanent
		}
		res.Status, res.Reason, res.Error = eventDeadLettered, reason, err.Error()
		res.ID = peekID(header, body)
		ack, perr := a.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: nats.Header(cloneHeader(header)), Data: body})
		if perr != nil {
			return res, fmt.Errorf("publishing to %s: %w", a.names.TelemetryStream(), publisher.NoStream(subject, perr))
		}
		res.Sequence = ack.Sequence
		return res, nil
	}
	res.ID, res.Subject = msg.ID, msg.Subject
	ack, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: msg.Subject, Header: nats.Header(msg.Header), Data: msg.Data}, jetstream.WithMsgID(msg.ID))
	if err != nil {
		return res, fmt.Errorf("publishing to %s: %w", a.names.TelemetryStream(), publisher.NoStream(msg.Subject, err))
	}
	res.Status, res.Sequence = eventAccepted, ack.Sequence
	if ack.Duplicate {
		res.Status = eventDuplicate
	}
	return res, nil
}

// eventTypeAndData reads the type and data of an event, structured or
// binary, to name its subject; Decode checks them.
func eventTypeAndData(header map[string][]string, body []byte) (string, []byte) {
	for name, vs := range header {
		if strings.EqualFold(name, "ce-type") && len(vs) > 0 {
			return vs[0], body
		}
	}
	var head cePeek
	_ = json.Unmarshal(body, &head)
	return head.Type, head.dataBytes()
}

// peekID is an invalid event's id, if it has a string one.
func peekID(header map[string][]string, body []byte) string {
	for name, vs := range header {
		if strings.EqualFold(name, "ce-id") && len(vs) > 0 {
			return vs[0]
		}
	}
	var head struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(body), &head)
	return head.ID
}

func cloneHeader(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}
