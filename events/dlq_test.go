package events

import (
	"context"
	"errors"
	"fmt"
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

// TestParseDeadLetter reads the headers of a dead letter as the consumer
// engine writes them (consumer/engine's TestDeadLetterMsg builds the same).
func TestParseDeadLetter(t *testing.T) {
	stored := time.Date(2026, 11, 29, 10, 0, 0, 5, time.FixedZone("CET", 3600))
	h := map[string][]string{
		"ce-id":                {"e-1"},
		HeaderDLQReason:        {"not_cloudevent"},
		HeaderDLQError:         {"not a CloudEvent: line one line two"},
		HeaderOriginalSubject:  {invSubject},
		HeaderOriginalSequence: {"42"},
		HeaderOriginalStream:   {"TOOLSENTRY_TELEMETRY"},
		HeaderOriginalTime:     {"2026-11-29T09:00:00.000000005Z"},
		HeaderOriginalMsgID:    {"e-1"},
		HeaderNumDelivered:     {"3"},
	}
	dl, err := ParseDeadLetter(h)
	if err != nil {
		t.Fatal(err)
	}
	want := DeadLetter{Reason: ReasonNotCloudEvent, Error: "not a CloudEvent: line one line two", Stream: "TOOLSENTRY_TELEMETRY",
		Subject: invSubject, Sequence: 42, Time: stored.UTC(), MsgID: "e-1", Delivered: 3}
	if diff := cmp.Diff(want, dl); diff != "" {
		t.Errorf("ParseDeadLetter (-want +got):\n%s", diff)
	}
	for _, name := range []string{HeaderOriginalTime, HeaderOriginalMsgID, HeaderNumDelivered} {
		delete(h, name)
	}
	bare, err := ParseDeadLetter(h)
	if err != nil {
		t.Fatal(err)
	}
	if !bare.Time.IsZero() || bare.MsgID != "" || bare.Delivered != 0 {
		t.Errorf("without the optional headers: %+v", bare)
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
