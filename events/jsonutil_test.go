package events

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " backslash \ slash /`, "tab\tnew\nline\rcr", "\x00\x01\x1f\x7f", "<html>&", "café 😀", "\u2028\u2029"} {
		b := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Errorf("appendJSONString(%q) = %s, reads back %q, %v", s, b, back, err)
		}
		if strings.ContainsAny(string(b[1:len(b)-1]), "\n\r\t\x00") {
			t.Errorf("appendJSONString(%q) = %q holds a raw control character", s, b)
		}
	}
	if got := string(appendJSONString(nil, "a\xffb")); got != `"a\ufffdb"` {
		t.Errorf("invalid UTF-8: %s", got)
	}
}

// TestSequenceWrittenAsFraction: JSON Schema's integer admits 7.0 and 7e0;
// the decoder reads them as 7 and refuses what uint64 cannot hold.
func TestSequenceWrittenAsFraction(t *testing.T) {
	for lit, want := range map[string]uint64{"7": 7, "7.0": 7, "7e0": 7, "18446744073709551615": 1<<64 - 1} {
		data := `{"verdict":"NO_BASELINE","directive":"HALT","manifest_digest":"` + digest + `","tool_id":"t","version":"","baseline_fingerprint":"","current_fingerprint":"","changes":null,"affected":null,"migration":null,"guard_version":"1","input_event_id":"e","input_subject":"s","input_sequence":` + lit + `}`
		ev, err := Decode("toolsentry.verdicts.schema.no_baseline.t", nil, structured(`"id":"v","source":"toolsentry","type":"`+TypeSchemaVerdict+`"`, data))
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		if ev.SchemaVerdict.InputSequence != want {
			t.Errorf("input_sequence %s read as %d, want %d", lit, ev.SchemaVerdict.InputSequence, want)
		}
	}
}

func TestEncodeEscapesAttributes(t *testing.T) {
	meta := Meta{ID: `id "quoted" \ é`, Source: "agents/ü", Extensions: map[string]string{"note": `a "b" \ c ✓`}}
	msg, err := Names{}.NewContract(meta, Contract{ToolID: "t", Accuracy: 1, Determinism: "DETERMINISTIC"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != meta.ID || ev.Source != meta.Source || ev.Extensions["note"] != meta.Extensions["note"] {
		t.Errorf("attributes did not survive: %+v", ev)
	}
}
