package core

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

const (
	// The reference server's release with empty input schemas, and the
	// next one that typed them (issue rule 7). The observed event's schema
	// wants an object inputSchema to say "type", and a call sending a
	// field the tool does not declare is told of it at once, so the live
	// form of "anything goes" declares path with an empty schema.
	readAny   = `{"name":"read_file","description":"Read a file.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{},"other":{}}}}`
	readTyped = `{"name":"read_file","description":"Read a file.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{"type":"string"},"other":{}},"required":["path"]}}`
)

// TestLiveVerdictsJudgeWhatTheAgentSends: the usage record keeps which
// paths some call omitted, so a live verdict judges a narrowing and a
// changed default against what the agent's calls sent (rules 5 and 7).
func TestLiveVerdictsJudgeWhatTheAgentSends(t *testing.T) {
	tests := []struct {
		name     string
		v1, v2   string
		calls    []string // arguments of the agent's calls
		verdict  guards.SchemaVerdict
		affected []string
	}{
		{"typed empty schema, path always sent as a string", readAny, readTyped,
			[]string{`{"path":"/a"}`, `{"path":"/b"}`}, guards.DriftOnUnusedFields, []string{}},
		{"typed empty schema, path once omitted", readAny, readTyped,
			[]string{`{"path":"/a"}`, `{}`}, guards.DriftOnUsedFields, []string{"path"}},
		{"typed empty schema, path first sent by the second call", readAny, readTyped,
			[]string{`{"other":1}`, `{"path":"/a","other":1}`}, guards.DriftOnUsedFields, []string{"path"}},
		{"typed empty schema, path sent as a number", readAny, readTyped,
			[]string{`{"path":7}`}, guards.DriftOnUsedFields, []string{"path"}},
		{"default changed, always sent", crmV1, crmDefault,
			[]string{`{"user_id":"u","include_deleted":false}`, `{"user_id":"v","include_deleted":true}`}, guards.DriftOnUnusedFields, []string{}},
		{"default changed, omitted by one call", crmV1, crmDefault,
			[]string{`{"user_id":"u","include_deleted":false}`, `{"user_id":"v"}`}, guards.DriftOnUsedFields, []string{"include_deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.observe("fs.read", "1", tt.v1)
			for _, args := range tt.calls {
				if got := h.invoke("fs.read", "agent-a", `,"arguments":`+args); len(got) != 0 {
					t.Fatalf("a call that fits the baseline got verdicts: %+v", got)
				}
			}
			got := schemaVerdicts(t, h.observe("fs.read", "2", tt.v2))
			if len(got) != 1 || got[0].Verdict != tt.verdict {
				t.Fatalf("verdicts %+v, want one %s", got, tt.verdict)
			}
			affected := []string{}
			if got[0].Affected != nil {
				if err := json.Unmarshal(got[0].Affected, &affected); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tt.affected, affected); diff != "" {
				t.Errorf("affected (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUsageRecordOmitted: the record keeps the omitted paths sorted, is
// rewritten only when one is first omitted, and a record written before
// it kept them judges as before (no Sends: conservative).
func TestUsageRecordOmitted(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmV1)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5","include_deleted":true}`)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","include_deleted":false}`)
	u, _ := h.state.Usage("crm.lookup", "agent-a")
	if want := []string{"include_deleted", "limit"}; !u.SendsRecorded || !cmp.Equal(u.Omitted, want) {
		t.Fatalf("omitted %v (sends recorded %v), want %v", u.Omitted, u.SendsRecorded, want)
	}
	want := map[string]toolschema.SentField{
		"user_id":         {Types: toolschema.TypeString, Always: true},
		"limit":           {Types: toolschema.TypeString},
		"include_deleted": {Types: toolschema.TypeBoolean},
	}
	if diff := cmp.Diff(want, u.Surface().Sends); diff != "" {
		t.Errorf("sends (-want +got):\n%s", diff)
	}

	// Calls that omit nothing new do not write the record.
	for _, args := range []string{`{"user_id":"w"}`, `{"user_id":"x","limit":"1"}`} {
		ev := h.decodeInvocation("crm.lookup", "agent-a", args)
		eff, err := h.core.Apply(h.state, ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range eff.Writes {
			if w.Bucket == Usage {
				t.Errorf("call %s rewrote the usage record", args)
			}
		}
	}

	// A record as the previous version wrote it: no omitted paths known.
	var old UsageRecord
	if err := json.Unmarshal([]byte(`{"tool_id":"fs.read","agent_id":"agent-old","input":{"path":["string"]}}`), &old); err != nil {
		t.Fatal(err)
	}
	if s := old.Surface(); s.Sends != nil {
		t.Fatalf("an old record has sends %v", s.Sends)
	}
	h = newHarness(t)
	h.observe("fs.read", "1", readAny)
	if err := h.state.Store([]Write{{Bucket: Usage, IDs: []string{"fs.read", "agent-old"}, Record: &old}}); err != nil {
		t.Fatal(err)
	}
	h.invoke("fs.read", "agent-old", `,"arguments":{}`)
	if u, _ := h.state.Usage("fs.read", "agent-old"); u.SendsRecorded || u.Omitted != nil {
		t.Fatalf("an old record started keeping omissions mid-way: %+v", u)
	}
	got := schemaVerdicts(t, h.observe("fs.read", "2", readTyped))
	if len(got) != 1 || got[0].Verdict != guards.DriftOnUsedFields {
		t.Fatalf("old record: %+v, want DRIFT_ON_USED_FIELDS as before", got)
	}
}

// decodeInvocation is the Input of an invocation at the next sequence,
// for a test that reads its Effects.
func (h *harness) decodeInvocation(tool, agent, args string) Input {
	h.t.Helper()
	h.seq++
	tok, err := events.KeyToken(tool)
	if err != nil {
		h.t.Fatal(err)
	}
	subject := "toolsentry.telemetry.invocation." + tok
	body := fmt.Sprintf(`{"specversion":"1.0","id":"ev-%d","source":"test","type":%q,"time":"2026-10-03T10:00:00Z","datacontenttype":"application/json","data":{"tool_id":%q,"agent_id":%q,"arguments":%s}}`,
		h.seq, events.TypeInvocation, tool, agent, args)
	ev, err := events.Decode(subject, nil, []byte(body))
	if err != nil {
		h.t.Fatal(err)
	}
	return Input{Event: ev, Subject: subject, Seq: h.seq}
}

// TestIntegratedAgentKeepsOmissions: an agent that moves on to the
// current version keeps omissions only of the paths it still sends, and
// calls after that are recorded as before.
func TestIntegratedAgentKeepsOmissions(t *testing.T) {
	h := newHarness(t)
	h.observe("crm.lookup", "1", crmRenamed)
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"user_id":"u","limit":"5"}`) // told of the rename
	got := schemaVerdicts(t, h.invoke("crm.lookup", "agent-a", `,"arguments":{"userId":"u","limit":"5"}`))
	if len(got) != 1 || got[0].Verdict != guards.SchemaMatch {
		t.Fatalf("integration: %+v", got)
	}
	u, _ := h.state.Usage("crm.lookup", "agent-a")
	if want := []string{"userId"}; !cmp.Equal(u.Omitted, want) { // the first call did not send it
		t.Fatalf("omitted %v after integrating, want %v", u.Omitted, want)
	}
	h.invoke("crm.lookup", "agent-a", `,"arguments":{"userId":"u"}`)
	if u, _ = h.state.Usage("crm.lookup", "agent-a"); !cmp.Equal(u.Omitted, []string{"limit", "userId"}) {
		t.Fatalf("omitted %v, want limit too", u.Omitted)
	}
}
