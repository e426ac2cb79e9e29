package events

import (
	"errors"
	"testing"
)

// TestParseSubjectAnyPrefixStoredForm checks that a verdict's input subject
// is understood in both forms: as published (4 tokens) and as the telemetry
// stream stores it after its subject transform (5 tokens, the partition
// token 4th), whatever the prefix. The directives' schema-observation rule
// (isObservation) depends on it.
func TestParseSubjectAnyPrefixStoredForm(t *testing.T) {
	for _, tc := range []struct {
		subject   string
		kind      Kind
		stored    bool
		partition int
		key       string
	}{
		{"toolsentry.telemetry.schema.crm=2Elookup", KindSchemaObserved, false, 0, "crm.lookup"},
		{"toolsentry.telemetry.schema.3.crm=2Elookup", KindSchemaObserved, true, 3, "crm.lookup"},
		{"acme-ts.telemetry.invocation.0.x", KindInvocation, true, 0, "x"},
	} {
		a, err := ParseSubjectAnyPrefix(tc.subject)
		if err != nil {
			t.Fatalf("%s: %v", tc.subject, err)
		}
		if a.Class != ClassTelemetry || a.Kind != tc.kind || a.Stored != tc.stored || a.Partition != tc.partition || a.Key != tc.key {
			t.Errorf("%s: got %+v", tc.subject, a)
		}
	}
	if !isObservation("toolsentry.telemetry.schema.3.crm=2Elookup") {
		t.Error("a stored schema subject is not an observation")
	}
	if isObservation("toolsentry.telemetry.invocation.3.crm=2Elookup") {
		t.Error("a stored invocation subject is an observation")
	}
	for _, bad := range []string{"toolsentry.telemetry.schema.01.k", "toolsentry.telemetry.schema.1.k.x", "nodots"} {
		if _, err := ParseSubjectAnyPrefix(bad); !errors.Is(err, ErrBadSubject) {
			t.Errorf("%q: err = %v, want ErrBadSubject", bad, err)
		}
	}
}
