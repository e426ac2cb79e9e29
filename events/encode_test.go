package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// TestEncodeRoundTrip: every decoded event encodes to a message that
// decodes to the same event, on the same subject.
func TestEncodeRoundTrip(t *testing.T) {
	for _, tc := range decodeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(tc.subject, tc.header, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := Names{}.Encode(ev)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if msg.Subject != tc.subject {
				t.Errorf("subject %q, want %q", msg.Subject, tc.subject)
			}
			if got := msg.Header[HeaderMsgID]; len(got) != 1 || got[0] != ev.ID || msg.ID != ev.ID {
				t.Errorf("Nats-Msg-Id %v, ID %q, want %q", got, msg.ID, ev.ID)
			}
			if got := msg.Header[HeaderContentType]; len(got) != 1 || got[0] != ContentTypeStructured {
				t.Errorf("Content-Type %v", got)
			}
			again, err := Decode(msg.Subject, msg.Header, msg.Data)
			if err != nil {
				t.Fatalf("Decode(Encode): %v\n%s", err, msg.Data)
			}
			if diff := diffEvent(ev, again); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodedEventsReadBySDK: what Encode writes is a valid CloudEvent for
// the cloudevents sdk-go too, with the same attributes and data.
func TestEncodedEventsReadBySDK(t *testing.T) {
	for _, tc := range decodeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(tc.subject, tc.header, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := Names{}.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			var sdk event.Event
			if err := json.Unmarshal(msg.Data, &sdk); err != nil {
				t.Fatalf("sdk-go cannot read %s: %v", msg.Data, err)
			}
			if err := sdk.Validate(); err != nil {
				t.Fatalf("sdk-go: invalid event: %v", err)
			}
			if sdk.ID() != ev.ID || sdk.Type() != ev.Type || sdk.Source() != ev.Source || sdk.Subject() != ev.Subject || !sdk.Time().Equal(ev.Time) {
				t.Errorf("sdk-go reads %s %s %s %s %v", sdk.ID(), sdk.Type(), sdk.Source(), sdk.Subject(), sdk.Time())
			}
			if sdk.DataContentType() != "application/json" || !json.Valid(sdk.Data()) {
				t.Errorf("sdk-go data %q (%s)", sdk.Data(), sdk.DataContentType())
			}
		})
	}
}

// TestDecodeSDKEvent: an event written by the cloudevents sdk-go decodes.
func TestDecodeSDKEvent(t *testing.T) {
	e := event.New()
	e.SetID("sdk-1")
	e.SetSource("https://agents.example/billing")
	e.SetType(TypeContract)
	e.SetTime(time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC))
	e.SetExtension("tenant", "acme")
	if err := e.SetData(event.ApplicationJSON, map[string]any{"tool_id": "crm.lookup", "accuracy": 0.9, "determinism": "DETERMINISTIC"}); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode("toolsentry.telemetry.contract.crm=2Elookup", nil, body)
	if err != nil {
		t.Fatalf("Decode(%s): %v", body, err)
	}
	want := Event{Kind: KindContract, Type: TypeContract, ID: "sdk-1", Source: "https://agents.example/billing",
		Time: time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC), Extensions: map[string]string{"tenant": "acme"}, Key: "crm.lookup",
		Contract: &Contract{ToolID: "crm.lookup", Accuracy: 0.9, Determinism: "DETERMINISTIC"}}
	if diff := diffEvent(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestConstructors(t *testing.T) {
	n := Names{}
	meta := Meta{ID: "e-1", Source: "agents/billing", Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.FixedZone("CET", 3600)), Extensions: map[string]string{"tenant": "acme"}}
	args, err := FieldTypesOf([]byte(`{"user_id":"u-1","options":{"limit":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		build   func() (Message, error)
		subject string
		check   func(t *testing.T, ev Event)
	}{
		{"invocation", func() (Message, error) {
			return n.NewInvocation(meta, Invocation{AgentID: "agent-7", ToolID: "crm.lookup", ArgumentTypes: args, Outcome: &Outcome{Status: "ok"}})
		}, "toolsentry.telemetry.invocation.crm=2Elookup", func(t *testing.T, ev Event) {
			want := FieldTypes{"user_id": toolschema.TypeString, "options": toolschema.TypeObject, "options.limit": toolschema.TypeInteger}
			if diff := cmp.Diff(want, ev.Invocation.ArgumentTypes); diff != "" {
				t.Errorf("ArgumentTypes (-want +got):\n%s", diff)
			}
		}},
		{"one tool", func() (Message, error) {
			return n.NewSchemaObserved(meta, SchemaObserved{ToolID: "crm.lookup", Version: "3", Tool: &MCPTool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)}})
		}, "toolsentry.telemetry.schema.crm=2Elookup", func(t *testing.T, ev Event) {
			if ev.SchemaObserved.Tool.Name != "lookup" || ev.SchemaObserved.IsList() {
				t.Errorf("got %+v", ev.SchemaObserved)
			}
		}},
		{"tools list", func() (Message, error) {
			return n.NewSchemaObserved(meta, SchemaObserved{Server: "crm server", Tools: []MCPTool{}})
		}, "toolsentry.telemetry.schema.crm=20server", func(t *testing.T, ev Event) {
			if !ev.SchemaObserved.IsList() || ev.SchemaObserved.Tools == nil {
				t.Errorf("got %+v", ev.SchemaObserved)
			}
		}},
		{"contract", func() (Message, error) {
			return n.NewContract(meta, Contract{ToolID: "a", Accuracy: 0.95, Determinism: guards.Deterministic})
		}, "toolsentry.telemetry.contract.a", func(t *testing.T, ev Event) {
			if got := ev.Contract.ToolQuality(); got != (guards.ToolQuality{ToolID: "a", Accuracy: 0.95, Determinism: guards.Deterministic}) {
				t.Errorf("ToolQuality %+v", got)
			}
		}},
		{"workflow", func() (Message, error) {
			return n.NewWorkflow(meta, []byte(workflowData))
		}, "toolsentry.telemetry.workflow.etl", func(t *testing.T, ev Event) {
			if ev.Workflow.CompositionID != "etl" {
				t.Errorf("got %+v", ev.Workflow)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != tc.subject || msg.ID != "e-1" {
				t.Errorf("subject %q id %q, want %q e-1", msg.Subject, msg.ID, tc.subject)
			}
			ev, err := Decode(msg.Subject, msg.Header, msg.Data)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Subject != ev.Key || ev.Source != "agents/billing" || !ev.Time.Equal(meta.Time) || ev.Extensions["tenant"] != "acme" {
				t.Errorf("attributes: %+v", ev)
			}
			tc.check(t, ev)
		})
	}
}

func schemaVerdict() SchemaVerdict {
	return SchemaVerdict{
		Verdict: guards.DriftOnUsedFields, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.", ManifestDigest: digest,
		ToolID: "crm.lookup", AgentID: "agent-7", Version: "2", BaselineFingerprint: "sha256:a", CurrentFingerprint: "sha256:b",
		Changes: json.RawMessage(`[{"path":"user_id"}]`), Affected: json.RawMessage(`["user_id"]`),
		GuardVersion: "0.1.0", InputEventID: "e-1", InputSubject: invSubject, InputSequence: 7,
	}
}

func TestVerdicts(t *testing.T) {
	n := Names{}
	input := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	sv := schemaVerdict()
	msg, err := n.NewSchemaVerdict(sv, input)
	if err != nil {
		t.Fatal(err)
	}
	if want := "toolsentry.verdicts.schema.drift_on_used_fields.crm=2Elookup"; msg.Subject != want {
		t.Errorf("subject %q, want %q", msg.Subject, want)
	}
	if want := VerdictID(KindSchemaVerdict, "e-1", "crm.lookup", "agent-7", digest); msg.ID != want || len(msg.ID) != 32 {
		t.Errorf("id %q, want %q (32 hex digits)", msg.ID, want)
	}
	again, err := n.NewSchemaVerdict(sv, input)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Data) != string(msg.Data) || again.ID != msg.ID {
		t.Errorf("the same verdict twice gave different messages:\n%s\n%s", msg.Data, again.Data)
	}
	ev, err := Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	wantSV := sv
	wantSV.Migration = nil
	want := Event{Kind: KindSchemaVerdict, Type: TypeSchemaVerdict, ID: msg.ID, Source: "toolsentry", Time: input, Subject: "crm.lookup", Key: "crm.lookup", SchemaVerdict: &wantSV}
	if diff := diffEvent(want, ev); diff != "" {
		t.Errorf("schema verdict (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(msg.Data), `"migration":null`) {
		t.Errorf("a nil Migration must be written as null: %s", msg.Data)
	}

	cv := CompositionVerdict{Verdict: guards.SingleTool, Directive: "PROCEED: Single tool workflow, quality 0.95.", ManifestDigest: digest,
		CompositionID: "etl", ComposedQuality: 0.95, GuardVersion: "0.1.0", InputEventID: "e-2", InputSubject: "toolsentry.telemetry.workflow.etl", InputSequence: 9}
	msg, err = n.NewCompositionVerdict(cv, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "toolsentry.verdicts.composition.single_tool.etl"; msg.Subject != want {
		t.Errorf("subject %q, want %q", msg.Subject, want)
	}
	if strings.Contains(string(msg.Data), `"time"`) {
		t.Errorf("a verdict of an input without time has a time: %s", msg.Data)
	}
	ev, err = Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffEvent(Event{Kind: KindCompositionVerdict, Type: TypeCompositionVerdict, ID: VerdictID(KindCompositionVerdict, "e-2", "etl", "", digest), Source: "toolsentry", Subject: "etl", Key: "etl", CompositionVerdict: &cv}, ev); diff != "" {
		t.Errorf("composition verdict (-want +got):\n%s", diff)
	}
}

// TestVerdictIDDependsOnEveryInput: each input of the id changes it, and
// the fields cannot be shifted into each other.
func TestVerdictIDDependsOnEveryInput(t *testing.T) {
	base := VerdictID(KindSchemaVerdict, "e-1", "crm", "agent", digest)
	others := map[string]string{
		"guard":   VerdictID(KindCompositionVerdict, "e-1", "crm", "agent", digest),
		"input":   VerdictID(KindSchemaVerdict, "e-2", "crm", "agent", digest),
		"key":     VerdictID(KindSchemaVerdict, "e-1", "crn", "agent", digest),
		"agent":   VerdictID(KindSchemaVerdict, "e-1", "crm", "", digest),
		"digest":  VerdictID(KindSchemaVerdict, "e-1", "crm", "agent", strings.Repeat("0", 64)),
		"shifted": VerdictID(KindSchemaVerdict, "e-1c", "rm", "agent", digest),
	}
	for name, id := range others {
		if id == base {
			t.Errorf("changing the %s does not change the id", name)
		}
	}
	if VerdictID(KindSchemaVerdict, "e-1", "crm", "agent", digest) != base {
		t.Error("VerdictID is not deterministic")
	}
}

func TestEncodeRefuses(t *testing.T) {
	n := Names{}
	meta := Meta{ID: "e", Source: "s"}
	sv := schemaVerdict()
	tests := []struct {
		name  string
		build func() (Message, error)
	}{
		{"no id", func() (Message, error) {
			return n.NewContract(Meta{Source: "s"}, Contract{ToolID: "a", Accuracy: 1, Determinism: "DETERMINISTIC"})
		}},
		{"no source", func() (Message, error) {
			return n.NewContract(Meta{ID: "e"}, Contract{ToolID: "a", Accuracy: 1, Determinism: "DETERMINISTIC"})
		}},
		{"accuracy above 1", func() (Message, error) {
			return n.NewContract(meta, Contract{ToolID: "a", Accuracy: 2, Determinism: "DETERMINISTIC"})
		}},
		{"empty tool id", func() (Message, error) {
			return n.NewContract(meta, Contract{Accuracy: 1, Determinism: "DETERMINISTIC"})
		}},
		{"invocation without agent", func() (Message, error) { return n.NewInvocation(meta, Invocation{ToolID: "a"}) }},
		{"bad extension name", func() (Message, error) {
			return n.NewInvocation(Meta{ID: "e", Source: "s", Extensions: map[string]string{"Tenant": "x"}}, Invocation{AgentID: "a", ToolID: "t"})
		}},
		{"extension shadowing id", func() (Message, error) {
			return n.NewInvocation(Meta{ID: "e", Source: "s", Extensions: map[string]string{"id": "x"}}, Invocation{AgentID: "a", ToolID: "t"})
		}},
		{"tool and tools", func() (Message, error) {
			return n.NewSchemaObserved(meta, SchemaObserved{ToolID: "a", Version: "1", Server: "s", Tool: &MCPTool{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`)}, Tools: []MCPTool{}})
		}},
		{"neither tool nor tools", func() (Message, error) { return n.NewSchemaObserved(meta, SchemaObserved{ToolID: "a", Version: "1"}) }},
		{"workflow not JSON", func() (Message, error) { return n.NewWorkflow(meta, []byte(`{`)) }},
		{"workflow not an object", func() (Message, error) { return n.NewWorkflow(meta, []byte(`[]`)) }},
		{"workflow without structure", func() (Message, error) {
			return n.NewWorkflow(meta, []byte(`{"composition_id":"w","workflow_quality_requirement":1,"introduction_of_nondeterminism_acceptable":true}`))
		}},
		{"verdict with a lower-case name", func() (Message, error) { v := sv; v.Verdict = "drift"; return n.NewSchemaVerdict(v, time.Time{}) }},
		{"verdict without guard version", func() (Message, error) { v := sv; v.GuardVersion = ""; return n.NewSchemaVerdict(v, time.Time{}) }},
		{"verdict with invalid raw JSON", func() (Message, error) {
			v := sv
			v.Changes = json.RawMessage(`[`)
			return n.NewSchemaVerdict(v, time.Time{})
		}},
		{"two payloads", func() (Message, error) {
			return n.Encode(Event{Kind: KindContract, ID: "e", Source: "s", Contract: &Contract{ToolID: "a", Accuracy: 1, Determinism: "DETERMINISTIC"}, Invocation: &Invocation{AgentID: "a", ToolID: "a"}})
		}},
		{"kind and payload disagree", func() (Message, error) {
			return n.Encode(Event{Kind: KindInvocation, ID: "e", Source: "s", Contract: &Contract{ToolID: "a", Accuracy: 1, Determinism: "DETERMINISTIC"}})
		}},
		{"type of another kind", func() (Message, error) {
			return n.Encode(Event{Kind: KindContract, Type: TypeInvocation, ID: "e", Source: "s", Contract: &Contract{ToolID: "a", Accuracy: 1, Determinism: "DETERMINISTIC"}})
		}},
		{"workflow id not in the raw workflow", func() (Message, error) {
			return n.Encode(Event{Kind: KindWorkflow, ID: "e", Source: "s", Workflow: &Workflow{CompositionID: "other", Raw: json.RawMessage(workflowData)}})
		}},
		{"key too long", func() (Message, error) {
			return n.NewContract(meta, Contract{ToolID: strings.Repeat("é", 300), Accuracy: 1, Determinism: "DETERMINISTIC"})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := tc.build()
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("got %v (%s), want ErrBadEvent", err, msg.Data)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if len(a) != 32 || a == b {
		t.Errorf("NewID gave %q and %q", a, b)
	}
}
