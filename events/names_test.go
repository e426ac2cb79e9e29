package events

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNames(t *testing.T) {
	custom, err := NewNames("acme-ts")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		names Names
		want  []string
	}{
		{Names{}, []string{"toolsentry", "TOOLSENTRY_TELEMETRY", "TOOLSENTRY_VERDICTS", "TOOLSENTRY_DLQ",
			"toolsentry-baselines", "toolsentry-usage", "toolsentry-quality", "toolsentry-workflows", "toolsentry-directives",
			"toolsentry.telemetry.>", "toolsentry.verdicts.>", "toolsentry.dlq.>"}},
		{custom, []string{"acme-ts", "ACME_TS_TELEMETRY", "ACME_TS_VERDICTS", "ACME_TS_DLQ",
			"acme-ts-baselines", "acme-ts-usage", "acme-ts-quality", "acme-ts-workflows", "acme-ts-directives",
			"acme-ts.telemetry.>", "acme-ts.verdicts.>", "acme-ts.dlq.>"}},
	}
	for _, tc := range tests {
		n := tc.names
		got := []string{n.Prefix(), n.TelemetryStream(), n.VerdictsStream(), n.DeadLetterStream(),
			n.BaselinesBucket(), n.UsageBucket(), n.QualityBucket(), n.WorkflowsBucket(), n.DirectivesBucket(),
			n.TelemetrySubjects(), n.VerdictsSubjects(), n.DeadLetterSubjects()}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("names of %q (-want +got):\n%s", n.Prefix(), diff)
		}
	}
	for _, bad := range []string{"", "Toolsentry", "a.b", "a b", "1abc", "a*", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if _, err := NewNames(bad); err == nil {
			t.Errorf("NewNames(%q) succeeded", bad)
		}
	}
}

func TestSubjects(t *testing.T) {
	n := Names{}
	tests := []struct {
		build func() (string, error)
		want  string
		addr  Address
	}{
		{func() (string, error) { return n.Telemetry(KindInvocation, "crm.lookup") }, "toolsentry.telemetry.invocation.crm=2Elookup",
			Address{Class: ClassTelemetry, Kind: KindInvocation, Key: "crm.lookup"}},
		{func() (string, error) { return n.Telemetry(KindSchemaObserved, "crm") }, "toolsentry.telemetry.schema.crm",
			Address{Class: ClassTelemetry, Kind: KindSchemaObserved, Key: "crm"}},
		{func() (string, error) { return n.Telemetry(KindContract, "a b") }, "toolsentry.telemetry.contract.a=20b",
			Address{Class: ClassTelemetry, Kind: KindContract, Key: "a b"}},
		{func() (string, error) { return n.Telemetry(KindWorkflow, "etl") }, "toolsentry.telemetry.workflow.etl",
			Address{Class: ClassTelemetry, Kind: KindWorkflow, Key: "etl"}},
		{func() (string, error) { return n.StoredTelemetry(KindInvocation, 0, "crm.lookup") }, "toolsentry.telemetry.invocation.0.crm=2Elookup",
			Address{Class: ClassTelemetry, Kind: KindInvocation, Stored: true, Partition: 0, Key: "crm.lookup"}},
		{func() (string, error) { return n.StoredTelemetry(KindContract, 17, "a b") }, "toolsentry.telemetry.contract.17.a=20b",
			Address{Class: ClassTelemetry, Kind: KindContract, Stored: true, Partition: 17, Key: "a b"}},
		{func() (string, error) { return n.Verdict(KindSchemaVerdict, "DRIFT_ON_USED_FIELDS", "crm.lookup") }, "toolsentry.verdicts.schema.drift_on_used_fields.crm=2Elookup",
			Address{Class: ClassVerdicts, Kind: KindSchemaVerdict, Verdict: "DRIFT_ON_USED_FIELDS", Key: "crm.lookup"}},
		{func() (string, error) { return n.Verdict(KindCompositionVerdict, "COMPOSITION_DEGRADED", "etl") }, "toolsentry.verdicts.composition.composition_degraded.etl",
			Address{Class: ClassVerdicts, Kind: KindCompositionVerdict, Verdict: "COMPOSITION_DEGRADED", Key: "etl"}},
		{func() (string, error) { return n.DeadLetter(ReasonSchemaInvalid) }, "toolsentry.dlq.schema_invalid",
			Address{Class: ClassDeadLetter, Reason: ReasonSchemaInvalid}},
	}
	for _, tc := range tests {
		got, err := tc.build()
		if err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
		addr, err := ParseSubject(got)
		if err != nil {
			t.Fatalf("ParseSubject(%q): %v", got, err)
		}
		if diff := cmp.Diff(tc.addr, addr); diff != "" {
			t.Errorf("ParseSubject(%q) (-want +got):\n%s", got, diff)
		}
	}
}

func TestSubjectBuildersRefuse(t *testing.T) {
	n := Names{}
	for name, build := range map[string]func() (string, error){
		"verdict kind as telemetry":  func() (string, error) { return n.Telemetry(KindSchemaVerdict, "a") },
		"unknown kind":               func() (string, error) { return n.Telemetry(KindUnknown, "a") },
		"telemetry kind as verdict":  func() (string, error) { return n.Verdict(KindInvocation, "X", "a") },
		"lower-case verdict":         func() (string, error) { return n.Verdict(KindSchemaVerdict, "no_baseline", "a") },
		"verdict with a dot":         func() (string, error) { return n.Verdict(KindSchemaVerdict, "A.B", "a") },
		"empty key":                  func() (string, error) { return n.Telemetry(KindInvocation, "") },
		"unknown dead-letter reason": func() (string, error) { return n.DeadLetter("oops") },
		"filter of telemetry kind":   func() (string, error) { return n.VerdictFilter(KindContract, "", "") },
		"negative partition":         func() (string, error) { return n.StoredTelemetry(KindInvocation, -1, "a") },
		"partition too large":        func() (string, error) { return n.StoredTelemetry(KindInvocation, MaxStoredPartition+1, "a") },
		"stored verdict kind":        func() (string, error) { return n.StoredTelemetry(KindSchemaVerdict, 0, "a") },
	} {
		if s, err := build(); err == nil {
			t.Errorf("%s: got %q", name, s)
		}
	}
}

func TestVerdictFilter(t *testing.T) {
	n := Names{}
	for _, tc := range []struct {
		kind         Kind
		verdict, key string
		want         string
	}{
		{KindSchemaVerdict, "", "", "toolsentry.verdicts.schema.*.*"},
		{KindSchemaVerdict, "DRIFT_ON_USED_FIELDS", "", "toolsentry.verdicts.schema.drift_on_used_fields.*"},
		{KindCompositionVerdict, "", "etl.v2", "toolsentry.verdicts.composition.*.etl=2Ev2"},
	} {
		got, err := n.VerdictFilter(tc.kind, tc.verdict, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("VerdictFilter(%s, %q, %q) = %q, %v; want %q", tc.kind, tc.verdict, tc.key, got, err, tc.want)
		}
	}
}

func TestParseSubjectRefuses(t *testing.T) {
	for _, s := range []string{
		"", "toolsentry", "toolsentry.", "other.telemetry.invocation.a", "toolsentry.telemetry.invocation",
		"toolsentry.telemetry.invocation.a.b", "toolsentry.telemetry.verdict.a", "toolsentry.telemetry.invocation.",
		"toolsentry.verdicts.schema.x", "toolsentry.verdicts.tool.x.a", "toolsentry.verdicts.schema.X.a",
		"toolsentry.verdicts.schema..a", "toolsentry.dlq", "toolsentry.dlq.oops", "toolsentry.dlq.schema_invalid.x",
		"toolsentry.state.a", "toolsentry.telemetry.invocation.a=2e",
		"toolsentry.telemetry.invocation.01.a", "toolsentry.telemetry.invocation.-1.a", "toolsentry.telemetry.invocation.10000.a",
		"toolsentry.telemetry.invocation..a", "toolsentry.telemetry.invocation.1.a.b", "toolsentry.telemetry.invocation.1.",
		"toolsentry.telemetry.bogus.1.a",
	} {
		if addr, err := ParseSubject(s); !errors.Is(err, ErrBadSubject) {
			t.Errorf("ParseSubject(%q) = %+v, %v; want ErrBadSubject", s, addr, err)
		}
	}
}

func TestPublished(t *testing.T) {
	n := Names{}
	for in, want := range map[string]string{
		"toolsentry.telemetry.invocation.3.crm=2Elookup": "toolsentry.telemetry.invocation.crm=2Elookup",
		"toolsentry.telemetry.invocation.crm=2Elookup":   "toolsentry.telemetry.invocation.crm=2Elookup",
		"toolsentry.dlq.schema_invalid":                  "toolsentry.dlq.schema_invalid",
	} {
		if got, err := n.Published(in); err != nil || got != want {
			t.Errorf("Published(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := n.Published("toolsentry.telemetry.invocation.x.a"); !errors.Is(err, ErrBadSubject) {
		t.Errorf("Published of a bad subject = %q, %v; want ErrBadSubject", got, err)
	}
}

func TestStoredTelemetryFilters(t *testing.T) {
	n, _ := NewNames("acme")
	got, err := n.StoredTelemetryFilters(KindInvocation, "crm.lookup")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"acme.telemetry.invocation.*.crm=2Elookup", "acme.telemetry.invocation.crm=2Elookup"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("filters (-want +got):\n%s", diff)
	}
	if _, err := n.StoredTelemetryFilters(KindSchemaVerdict, "a"); !errors.Is(err, ErrBadSubject) {
		t.Errorf("filters of a verdict kind: %v, want ErrBadSubject", err)
	}
}

func TestTelemetryKinds(t *testing.T) {
	var got []string
	for _, k := range TelemetryKinds() {
		if k.Class() != ClassTelemetry {
			t.Errorf("%s: class %d", k, k.Class())
		}
		got = append(got, k.Token())
	}
	want := []string{"schema", "invocation", "contract", "workflow", "quality", "observed",
		"baseline_accepted", "baseline_reset", "agent_migrated", "agent_forgotten"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("telemetry kind tokens (-want +got):\n%s", diff)
	}
}

func TestKinds(t *testing.T) {
	for k := KindSchemaObserved; k <= KindCompositionVerdict; k++ {
		if KindOfType(k.Type()) != k {
			t.Errorf("KindOfType(%q) != %s", k.Type(), k)
		}
		if "io.toolsentry."+k.Schema() != k.Type() {
			t.Errorf("%s: schema %q does not match type %q", k, k.Schema(), k.Type())
		}
	}
	for k := KindUnknown; k <= KindCompositionVerdict; k++ {
		b, err := k.MarshalText()
		var back Kind
		if err != nil || back.UnmarshalText(b) != nil || back != k {
			t.Errorf("text round trip of %s: %q %v %s", k, b, err, back)
		}
	}
	var k Kind
	if k.UnmarshalText([]byte("nope")) == nil {
		t.Error("UnmarshalText accepted an unknown name")
	}
	if KindOfType("") != KindUnknown || Kind(200).String() != "unknown" || Kind(200).Type() != "" {
		t.Error("unknown kinds")
	}
}
