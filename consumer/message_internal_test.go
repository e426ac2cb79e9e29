package consumer

import "testing"

func TestKindToken(t *testing.T) {
	for subject, want := range map[string]string{
		"toolsentry.telemetry.invocation.crm=2Elookup":   "invocation",
		"toolsentry.telemetry.invocation.3.crm=2Elookup": "invocation", // as stored
		"toolsentry.telemetry.schema.0.crm":              "schema",
		"toolsentry.telemetry.schema.12":                 "schema", // a key of digits
		"a.b":                                            "a",
		"7.b":                                            "7",
		"single":                                         "",
	} {
		if got := kindToken(subject); got != want {
			t.Errorf("kindToken(%q) = %q, want %q", subject, got, want)
		}
	}
}
