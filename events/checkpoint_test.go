package events

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestQualityCheckpointRoundTrip(t *testing.T) {
	n := Names{}
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	p := QualityCheckpoint{ToolID: "crm.lookup", Calls: 200, Successes: 187, ThroughSequence: 9001,
		Fingerprint: "sha256:ab", InputSchema: json.RawMessage(`{"properties":{"q":{"type":"string"}},"type":"object"}`)}
	msg, err := n.NewQualityCheckpoint(p, at)
	if err != nil {
		t.Fatal(err)
	}
	if want := "toolsentry.telemetry.quality.crm=2Elookup"; msg.Subject != want {
		t.Errorf("subject %q, want %q", msg.Subject, want)
	}
	again, err := n.NewQualityCheckpoint(p, at)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != msg.ID || string(again.Data) != string(msg.Data) {
		t.Errorf("a republished checkpoint differs: %s vs %s", again.Data, msg.Data)
	}
	if other := CheckpointID("crm.lookup", 9002); other == msg.ID {
		t.Error("checkpoints through different sequences share an id")
	}
	ev, err := n.Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != KindQualityCheckpoint || ev.Key != "crm.lookup" || !reflect.DeepEqual(*ev.QualityCheckpoint, p) || !ev.Time.Equal(at) {
		t.Errorf("decoded %+v %+v", ev, ev.QualityCheckpoint)
	}
}

func TestQualityCheckpointRejects(t *testing.T) {
	for name, data := range map[string]string{
		"successes above calls":      `{"tool_id":"t","calls":3,"successes":4,"through_sequence":9}`,
		"fractional calls":           `{"tool_id":"t","calls":3.5,"successes":1,"through_sequence":9}`,
		"schema without fingerprint": `{"tool_id":"t","calls":0,"successes":0,"through_sequence":9,"input_schema":{}}`,
		"missing sequence":           `{"tool_id":"t","calls":3,"successes":1}`,
		"unknown field":              `{"tool_id":"t","calls":3,"successes":1,"through_sequence":9,"x":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			body := structured(`"id":"c1","source":"toolsentry","type":"`+TypeQualityCheckpoint+`"`, data)
			_, err := Decode("toolsentry.telemetry.quality.t", nil, body)
			if !errors.Is(err, ErrSchemaInvalid) {
				t.Fatalf("Decode: %v, want ErrSchemaInvalid", err)
			}
		})
	}
}
