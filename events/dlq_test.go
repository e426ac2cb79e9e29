package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards"
)

func TestReasonFor(t *testing.T) {
	tests := []struct {
		err  error
		want Reason
		ok   bool
	}{
		{fmt.Errorf("decoding: %w", ErrNotCloudEvent), ReasonNotCloudEvent, true},
		{ErrSpecViolation, ReasonSpecViolation, true},
		{ErrUnknownType, ReasonUnknownType, true},
		{fmt.Errorf("x: %w", ErrSchemaInvalid), ReasonSchemaInvalid, true},
		{ErrSubjectMismatch, ReasonSubjectMismatch, true},
		{ErrBadSubject, ReasonBadSubject, true},
		{fmt.Errorf("workflow: %w", guards.ErrInvalid), ReasonInvalidInput, true},
		{context.DeadlineExceeded, "", false},
		{errors.New("nats: timeout"), "", false},
		{nil, "", false},
	}
	for _, tc := range tests {
		got, ok := ReasonFor(tc.err)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ReasonFor(%v) = %q, %v; want %q, %v", tc.err, got, ok, tc.want, tc.ok)
		}
		if tc.ok && !got.Valid() {
			t.Errorf("%q is not Valid", got)
		}
	}
	for _, r := range []Reason{ReasonMaxDeliver, ReasonHandlerPanic, ReasonPermanent} {
		if !r.Valid() {
			t.Errorf("%q is not Valid", r)
		}
	}
	if Reason("x").Valid() || Reason("").Valid() {
		t.Error("Valid")
	}
}

// TestEveryDecodeErrorHasAReason: the consumer dead-letters every decode
// failure with a reason, never retries one.
func TestEveryDecodeErrorHasAReason(t *testing.T) {
	for _, tc := range errorCases() {
		_, err := Decode(tc.subject, tc.header, []byte(tc.body))
		if r, ok := ReasonFor(err); !ok || !r.Valid() {
			t.Errorf("%s: no reason for %v", tc.name, err)
		}
	}
}

func TestNewDeadLetter(t *testing.T) {
	stored := time.Date(2026, 11, 29, 10, 0, 0, 5, time.FixedZone("CET", 3600))
	orig := Original{
		Stream: "TOOLSENTRY_TELEMETRY", Subject: invSubject, Sequence: 42, Time: stored, Delivered: 3,
		Header: map[string][]string{
			"ce-id": {"e-1"}, "Nats-Msg-Id": {"e-1"}, "Nats-Expected-Stream": {"TOOLSENTRY_TELEMETRY"}, "nats-ttl": {"1s"},
			"Toolsentry-Dlq-Reason": {"forged"},
		},
		Data: []byte(`{"not":"an event"}`),
	}
	cause := fmt.Errorf("%w: line one\nline two\x00", ErrNotCloudEvent)
	msg, err := Names{}.NewDeadLetter(ReasonNotCloudEvent, cause, orig)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "toolsentry.dlq.not_cloudevent" || string(msg.Data) != string(orig.Data) || msg.ID != "dlq-TOOLSENTRY_TELEMETRY-42" {
		t.Errorf("subject %q id %q data %s", msg.Subject, msg.ID, msg.Data)
	}
	want := map[string][]string{
		"ce-id":                {"e-1"},
		HeaderMsgID:            {"dlq-TOOLSENTRY_TELEMETRY-42"},
		HeaderDLQReason:        {"not_cloudevent"},
		HeaderDLQError:         {"not a CloudEvent: line one line two"},
		HeaderOriginalSubject:  {invSubject},
		HeaderOriginalSequence: {"42"},
		HeaderOriginalStream:   {"TOOLSENTRY_TELEMETRY"},
		HeaderOriginalTime:     {"2026-11-29T09:00:00.000000005Z"},
		HeaderOriginalMsgID:    {"e-1"},
		HeaderNumDelivered:     {"3"},
	}
	if diff := cmp.Diff(want, msg.Header); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	dl, err := ParseDeadLetter(msg.Header)
	if err != nil {
		t.Fatal(err)
	}
	wantDL := DeadLetter{Reason: ReasonNotCloudEvent, Error: "not a CloudEvent: line one line two", Stream: "TOOLSENTRY_TELEMETRY",
		Subject: invSubject, Sequence: 42, Time: stored.UTC(), MsgID: "e-1", Delivered: 3}
	if diff := cmp.Diff(wantDL, dl); diff != "" {
		t.Errorf("ParseDeadLetter (-want +got):\n%s", diff)
	}
	orig.Sequence = 43
	if other, _ := (Names{}).NewDeadLetter(ReasonNotCloudEvent, cause, orig); other.ID == msg.ID {
		t.Error("another sequence, the same dead-letter id")
	}
	if _, err := (Names{}).NewDeadLetter("nope", nil, orig); !errors.Is(err, ErrBadSubject) {
		t.Errorf("unknown reason: %v", err)
	}
	bare, err := Names{}.NewDeadLetter(ReasonHandlerPanic, nil, Original{Stream: "S", Subject: "s", Sequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{HeaderOriginalTime, HeaderOriginalMsgID, HeaderNumDelivered} {
		if _, ok := bare.Header[h]; ok {
			t.Errorf("%s written without a value", h)
		}
	}
}

func TestDeadLetterErrorIsCapped(t *testing.T) {
	long := errors.New(strings.Repeat("é", MaxDLQErrorLen))
	msg, err := Names{}.NewDeadLetter(ReasonMaxDeliver, long, Original{Stream: "S", Subject: "s", Sequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := msg.Header[HeaderDLQError][0]
	if len(got) > MaxDLQErrorLen || !strings.HasSuffix(got, "é") {
		t.Errorf("error header of %d bytes, cut inside a character: %q", len(got), got[len(got)-4:])
	}
}

func TestParseDeadLetterRefuses(t *testing.T) {
	good := map[string][]string{HeaderDLQReason: {"bad_subject"}, HeaderOriginalSubject: {"s"}, HeaderOriginalStream: {"S"}, HeaderOriginalSequence: {"1"}}
	for name, mutate := range map[string]func(map[string][]string){
		"unknown reason":   func(h map[string][]string) { h[HeaderDLQReason] = []string{"x"} },
		"no subject":       func(h map[string][]string) { delete(h, HeaderOriginalSubject) },
		"no stream":        func(h map[string][]string) { delete(h, HeaderOriginalStream) },
		"bad sequence":     func(h map[string][]string) { h[HeaderOriginalSequence] = []string{"-1"} },
		"two reasons":      func(h map[string][]string) { h[HeaderDLQReason] = []string{"bad_subject", "bad_subject"} },
		"missing sequence": func(h map[string][]string) { delete(h, HeaderOriginalSequence) },
		"bad time":         func(h map[string][]string) { h[HeaderOriginalTime] = []string{"yesterday"} },
		"bad delivered":    func(h map[string][]string) { h[HeaderNumDelivered] = []string{"x"} },
	} {
		h := map[string][]string{}
		for k, v := range good {
			h[k] = v
		}
		mutate(h)
		if _, err := ParseDeadLetter(h); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParseDeadLetter(good); err != nil {
		t.Errorf("good headers: %v", err)
	}
}
