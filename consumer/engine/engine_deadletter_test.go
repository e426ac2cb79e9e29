package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
)

// TestDeadLetterMsg holds the one dead-letter builder to the headers of the
// dead-letter contract (events.ParseDeadLetter reads them): the original
// headers but NATS control headers, the original Nats-Msg-Id kept aside, and
// the dead-letter headers over any forged ones, on one line each.
func TestDeadLetterMsg(t *testing.T) {
	stored := time.Date(2026, 11, 29, 10, 0, 0, 5, time.FixedZone("CET", 3600))
	m := &Message{
		Subject: "toolsentry.telemetry.invocation.0.crm=2Elookup", Stream: "TOOLSENTRY_TELEMETRY", StreamSeq: 42,
		Timestamp: stored, Attempt: 3, Data: []byte(`{"not":"an event"}`),
		Header: nats.Header{
			"ce-id": {"e-1"}, "Nats-Msg-Id": {"e-1"}, "Nats-Expected-Stream": {"TOOLSENTRY_TELEMETRY"},
			HeaderDeadLetterReason: {"forged"},
		},
	}
	cause := fmt.Errorf("not a CloudEvent: line one\nline two")
	dm := (&Engine{}).deadLetterMsg(m, "not_cloudevent", cause)
	if dm.Subject != DefaultDeadLetterPrefix+".not_cloudevent" || string(dm.Data) != string(m.Data) {
		t.Errorf("subject %q data %s", dm.Subject, dm.Data)
	}
	want := nats.Header{
		"ce-id":                {"e-1"},
		HeaderDeadLetterReason: {"not_cloudevent"},
		HeaderDeadLetterError:  {"not a CloudEvent: line one line two"},
		HeaderOriginalSubject:  {m.Subject},
		HeaderOriginalSequence: {"42"},
		HeaderOriginalStream:   {"TOOLSENTRY_TELEMETRY"},
		HeaderOriginalTime:     {"2026-11-29T09:00:00.000000005Z"},
		HeaderOriginalMsgID:    {"e-1"},
		HeaderNumDelivered:     {"3"},
	}
	if diff := cmp.Diff(want, dm.Header); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if DeadLetterMsgID("TOOLSENTRY_TELEMETRY", 42) != "dlq-TOOLSENTRY_TELEMETRY-42" || DeadLetterMsgID("TOOLSENTRY_TELEMETRY", 43) == DeadLetterMsgID("TOOLSENTRY_TELEMETRY", 42) {
		t.Error("the dead-letter id is not dlq-<stream>-<sequence>")
	}
	if got := (&Engine{}).deadLetterMsg(m, "Not A Token", errors.New("x")).Subject; got != DefaultDeadLetterPrefix+"."+ReasonPermanent {
		t.Errorf("subject of a reason that is no token: %q", got)
	}
}

func TestHeaderSafeKeepsCharactersWhole(t *testing.T) {
	long := strings.Repeat("a", maxErrorHeader-1) + "é and more"
	got := headerSafe(long)
	if !utf8.ValidString(got) || len(got) != maxErrorHeader-1 {
		t.Errorf("cut of %d bytes at a two-byte character: %d bytes, valid UTF-8 %v; want %d, valid", len(long), len(got), utf8.ValidString(got), maxErrorHeader-1)
	}
	if got := headerSafe("bad\r\nline\x00tab\tend\xff"); got != "bad  line tab end " {
		t.Errorf("headerSafe = %q, want control characters and invalid bytes as spaces", got)
	}
}
