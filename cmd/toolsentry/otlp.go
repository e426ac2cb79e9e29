package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/events/otlp"
	"github.com/toolsentry/toolsentry/publisher"
)

// otlpTracesPath is where serve's --http address receives OTLP/HTTP traces.
const otlpTracesPath = "/v1/traces"

// The google.rpc.Code values of the Status in an error response.
const (
	rpcInvalidArgument int32 = 3
	rpcUnavailable     int32 = 14
)

// maxOTLPBody bounds one export request, after decompression.
const maxOTLPBody = 16 << 20

// otlpPublishTimeout bounds how long an export waits for its events'
// acknowledgements before it answers 503 (the exporter retries).
const otlpPublishTimeout = 10 * time.Second

// otlpReceiver is serve's /v1/traces: the OTLP/HTTP handler publishing with
// its own publisher on nc. The pattern "POST /v1/traces" makes the mux
// answer 405 to other methods.
func otlpReceiver(ctx context.Context, nc *nats.Conn, conn *connFlags) (pattern string, h http.Handler) {
	pattern = http.MethodPost + " " + otlpTracesPath
	names, err := conn.names()
	if err == nil {
		var pub *publisher.Publisher
		if pub, err = publisher.New(nc, publisher.Options{}); err == nil {
			return pattern, newOTLPHandler(ctx, pub, names)
		}
	}
	return pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeOTLPStatus(w, otlpEncoding(r), http.StatusServiceUnavailable, rpcUnavailable, "the OTLP receiver is not available: "+err.Error())
	})
}

// newOTLPHandler returns the OTLP/HTTP traces receiver: an
// ExportTraceServiceRequest in protobuf (Content-Type
// application/x-protobuf) or OTLP/JSON (application/json), optionally
// gzip-compressed (Content-Encoding: gzip), is translated by events/otlp and
// its events are published to the telemetry stream with their ids; the
// handler answers only after every publish is acknowledged. Answers, as the
// OTLP specification says:
//
//	200  ExportTraceServiceResponse, in the request's encoding; partial_success
//	     with rejected_spans and a message naming them when spans were malformed
//	400  the body cannot be decoded (a google.rpc.Status says why)
//	413  the body exceeds 16 MiB
//	415  another Content-Type or Content-Encoding
//	503  the events were not acknowledged: retryable, and the ids make a retry safe
//
// ctx gives the logger; the handler keeps only the logger.
func newOTLPHandler(ctx context.Context, pub *publisher.Publisher, names events.Names) http.Handler {
	log := zerolog.Ctx(ctx).With().Str("receiver", "otlp").Logger()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enc := otlpEncoding(r)
		if enc == "" {
			writeOTLPStatus(w, "proto", http.StatusUnsupportedMediaType, rpcInvalidArgument,
				fmt.Sprintf("Content-Type %q: want application/x-protobuf or application/json", r.Header.Get("Content-Type")))
			return
		}
		var body io.Reader = r.Body
		switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeOTLPStatus(w, enc, http.StatusBadRequest, rpcInvalidArgument, "gzip: "+err.Error())
				return
			}
			defer zr.Close()
			body = zr
		default:
			writeOTLPStatus(w, enc, http.StatusUnsupportedMediaType, rpcInvalidArgument, fmt.Sprintf("Content-Encoding %q: want gzip or none", ce))
			return
		}
		data, err := io.ReadAll(io.LimitReader(body, maxOTLPBody+1))
		switch {
		case err != nil:
			writeOTLPStatus(w, enc, http.StatusBadRequest, rpcInvalidArgument, "reading the body: "+err.Error())
			return
		case len(data) > maxOTLPBody:
			writeOTLPStatus(w, enc, http.StatusRequestEntityTooLarge, rpcInvalidArgument, fmt.Sprintf("the body exceeds %d bytes", maxOTLPBody))
			return
		}
		var req *coltracepb.ExportTraceServiceRequest
		if enc == "json" {
			req, err = otlp.ParseJSON(data)
		} else {
			req, err = otlp.ParseProtobuf(data)
		}
		if err != nil {
			writeOTLPStatus(w, enc, http.StatusBadRequest, rpcInvalidArgument, err.Error())
			return
		}
		res := otlp.Translate(req, otlp.Options{Names: names})
		pctx, cancel := context.WithTimeout(r.Context(), otlpPublishTimeout)
		defer cancel()
		stored, err := publishMessages(pctx, pub, res.Messages)
		if err != nil {
			log.Warn().Err(err).Int("events", len(res.Messages)).Msg("OTLP export not stored; the exporter will retry")
			writeOTLPStatus(w, enc, http.StatusServiceUnavailable, rpcUnavailable, "storing the events: "+err.Error())
			return
		}
		resp := &coltracepb.ExportTraceServiceResponse{}
		if len(res.Rejected) > 0 {
			resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{
				RejectedSpans: int64(len(res.Rejected)),
				ErrorMessage:  rejectedMessage(res.Rejected),
			}
			log.Info().Int("rejected_spans", len(res.Rejected)).Str("first", res.Rejected[0].Error()).Msg("OTLP export with malformed GenAI spans")
		}
		log.Debug().Int("spans", res.Spans).Int("events", len(res.Messages)).Int("new", stored).Msg("OTLP export stored")
		writeOTLP(w, enc, http.StatusOK, resp)
	})
}

// otlpEncoding is "proto" or "json" by the request's Content-Type, or ""
// for another type.
func otlpEncoding(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	switch mt {
	case "application/x-protobuf":
		return "proto"
	case "application/json":
		return "json"
	}
	return ""
}

// publishMessages publishes every message with its id and waits for all
// acknowledgements; it returns how many the stream stored anew.
func publishMessages(ctx context.Context, pub *publisher.Publisher, msgs []events.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	b := pub.NewBatch()
	for _, m := range msgs {
		if err := b.Publish(ctx, m.Subject, m.ID, nats.Header(m.Header), m.Data); err != nil {
			break // Wait reports it with the others
		}
	}
	res, err := b.Wait(ctx)
	return res.Stored, err
}

// rejectedMessage names the rejected spans (the first few) for
// partial_success.error_message.
func rejectedMessage(rejected []*otlp.SpanError) string {
	const shown = 5
	parts := make([]string, 0, shown+1)
	for i, r := range rejected {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(rejected)-shown))
			break
		}
		parts = append(parts, r.Error())
	}
	return fmt.Sprintf("%d GenAI spans not translated: %s", len(rejected), strings.Join(parts, "; "))
}

func writeOTLPStatus(w http.ResponseWriter, enc string, httpStatus int, code int32, msg string) {
	writeOTLP(w, enc, httpStatus, &statuspb.Status{Code: code, Message: msg})
}

func writeOTLP(w http.ResponseWriter, enc string, httpStatus int, m proto.Message) {
	var body []byte
	var err error
	if enc == "json" {
		w.Header().Set("Content-Type", "application/json")
		body, err = protojson.Marshal(m)
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
		body, err = proto.Marshal(m)
	}
	if err != nil { // our own messages always marshal
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}

// readOTLP is emit --otlp: a trace file (the collector file exporter's
// OTLP/JSON lines, or the Go SDK stdout exporter's spans) translated into
// events; a file in neither format is one problem, each malformed GenAI
// span another.
func (r *emitReader) readOTLP(name string, data []byte) {
	req, _, err := otlp.ReadFile(data)
	if err != nil {
		r.problems = append(r.problems, emitProblem{name, err})
		return
	}
	res := otlp.Translate(req, otlp.Options{Names: r.names, Source: r.source})
	for _, rej := range res.Rejected {
		r.problems = append(r.problems, emitProblem{name, rej})
	}
	for _, m := range res.Messages {
		r.events = append(r.events, emitEvent{where: name, msg: m})
	}
}
