package events_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func TestNewToolsListObserved(t *testing.T) {
	names, _ := events.NewNames("")
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	meta := events.Meta{ID: "obs-1", Source: "mcp-proxy", Time: at}
	result := json.RawMessage(`{"tools":[{"name":"lookup","inputSchema":{"type":"object","properties":{"user_id":{"type":"string"}}},"x-vendor":1}],"nextCursor":"c2"}`)
	msg, obs, err := names.NewToolsListObserved(meta, "crm.server", result)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "toolsentry.telemetry.schema.crm=2Eserver" || msg.ID != "obs-1" {
		t.Errorf("subject %s id %s", msg.Subject, msg.ID)
	}
	ev, err := names.Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Source != "mcp-proxy" || !ev.Time.Equal(at) || ev.SchemaObserved.Server != "crm.server" || ev.SchemaObserved.NextCursor != "c2" {
		t.Errorf("decoded %+v %+v", ev, ev.SchemaObserved)
	}
	if len(obs.Tools) != 1 || obs.Tools[0].Name != "lookup" || obs.Tools[0].Other["x-vendor"] == nil {
		t.Errorf("observation %+v", obs)
	}

	// The fingerprint is the tool's canonical fingerprint (extra members
	// included): key order does not change it, a renamed field does.
	fp, err := events.ToolFingerprint(obs.Tools[0])
	if err != nil {
		t.Fatal(err)
	}
	defs, err := toolschema.ParseToolDocument([]byte(`{"x-vendor":1,"inputSchema":{"properties":{"user_id":{"type":"string"}},"type":"object"},"name":"lookup"}`))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := toolschema.Fingerprint(defs[0])
	if fp != want {
		t.Errorf("ToolFingerprint %s, the guards' fingerprint of the same tool %s", fp, want)
	}
	_, renamed, err := names.NewToolsListObserved(meta, "crm.server", json.RawMessage(`{"tools":[{"name":"lookup","inputSchema":{"type":"object","properties":{"userId":{"type":"string"}}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if fp2, _ := events.ToolFingerprint(renamed.Tools[0]); fp2 == fp {
		t.Error("a renamed field kept the fingerprint")
	}

	for name, bad := range map[string]string{
		"not an object":   `[1]`,
		"no tools":        `{"prompts":[]}`,
		"duplicate names": `{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","inputSchema":{"type":"object"}}]}`,
		"no input schema": `{"tools":[{"name":"a"}]}`,
		"not JSON":        `{"tools":[`,
	} {
		if _, _, err := names.NewToolsListObserved(meta, "s", json.RawMessage(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if _, ok := events.ReasonFor(err); !ok && !errors.Is(err, events.ErrBadEvent) {
			t.Errorf("%s: %v matches no sentinel", name, err)
		}
	}
	if _, _, err := names.NewToolsListObserved(meta, "", result); err == nil {
		t.Error("an empty server accepted")
	}
}
