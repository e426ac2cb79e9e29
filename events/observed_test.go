package events

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

const (
	observedSubject = "toolsentry.telemetry.observed.support"
	observedAttrs   = `"id":"4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7","source":"otlp","type":"io.toolsentry.workflow.observed.v1","time":"2026-11-29T10:00:00Z"`
	observedData    = `{"composition_id":"support","agent_id":"support-bot","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7",
		"structure":{"chain":["crm.lookup",{"parallel":{"mode":"all","of":["kb.search","billing.balance"]}},"mail.send"]},
		"calls":[{"tool_id":"crm.lookup","span_id":"a1","status":"ok"},{"tool_id":"kb.search","span_id":"a2","status":"ok","correct":false},
			{"tool_id":"billing.balance","span_id":"a3","status":"error","error_type":"timeout"},{"tool_id":"mail.send","span_id":"a4","status":"ok","correct":true}],
		"success":false}`
	observedVerdictData = `{"verdict":"COMPOSITION_DEGRADED","directive":"HALT: Observed quality 40.00% < requirement 80.00% over 30 runs.","manifest_digest":"` + digest + `","composition_id":"support","composed_quality":0.4,"confidence":"CONFIRMED","failure_modes":[],"observed":{"runs":30,"successes":12,"success_rate":0.4,"success_rate_lower":0.27,"success_rate_upper":0.55,"predicted_quality":0.9025,"correlated_errors":true},"guard_version":"1","input_event_id":"e-9","input_subject":"toolsentry.telemetry.observed.support","input_sequence":90}`
)

func observedDecodeCases(t testing.TB) []decodeCase {
	return []decodeCase{
		{
			name:    "observed workflow, chain with a parallel block",
			subject: observedSubject,
			body:    structured(observedAttrs, observedData),
			want: Event{Kind: KindWorkflowObserved, Type: TypeWorkflowObserved, ID: "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", Source: "otlp",
				Time: mustTime(t, "2026-11-29T10:00:00Z"), Key: "support",
				WorkflowObserved: &WorkflowObserved{
					CompositionID: "support", AgentID: "support-bot", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
					Structure: workflow.Chain(workflow.Tool("crm.lookup"), workflow.ParallelAll(workflow.Tool("kb.search"), workflow.Tool("billing.balance")), workflow.Tool("mail.send")),
					Calls: []ObservedCall{
						{ToolID: "crm.lookup", SpanID: "a1", Status: "ok"},
						{ToolID: "kb.search", SpanID: "a2", Status: "ok", Correct: ptr(false)},
						{ToolID: "billing.balance", SpanID: "a3", Status: "error", ErrorType: "timeout"},
						{ToolID: "mail.send", SpanID: "a4", Status: "ok", Correct: ptr(true)},
					},
				}},
		},
		{
			name:    "observed workflow, one successful call",
			subject: "toolsentry.telemetry.observed.lookup=20only",
			body: structured(`"id":"o-2","source":"otlp","type":"io.toolsentry.workflow.observed.v1"`,
				`{"composition_id":"lookup only","agent_id":"a","trace_id":"t","span_id":"s","structure":"crm.lookup","calls":[{"tool_id":"crm.lookup","span_id":"s1","status":"ok"}],"success":true}`),
			want: Event{Kind: KindWorkflowObserved, Type: TypeWorkflowObserved, ID: "o-2", Source: "otlp", Key: "lookup only",
				WorkflowObserved: &WorkflowObserved{
					CompositionID: "lookup only", AgentID: "a", TraceID: "t", SpanID: "s", Structure: workflow.Tool("crm.lookup"),
					Calls: []ObservedCall{{ToolID: "crm.lookup", SpanID: "s1", Status: "ok"}}, Success: true,
				}},
		},
		{
			name:    "composition verdict with observed runs",
			subject: "toolsentry.verdicts.composition.composition_degraded.support",
			body:    structured(`"id":"v-3","source":"toolsentry","type":"io.toolsentry.verdict.composition.v1"`, observedVerdictData),
			want: Event{Kind: KindCompositionVerdict, Type: TypeCompositionVerdict, ID: "v-3", Source: "toolsentry", Key: "support",
				CompositionVerdict: &CompositionVerdict{
					Verdict: guards.CompositionDegraded, Directive: "HALT: Observed quality 40.00% < requirement 80.00% over 30 runs.", ManifestDigest: digest,
					CompositionID: "support", ComposedQuality: 0.4, Confidence: workflow.ConfidenceConfirmed, FailureModes: []byte(`[]`),
					Observed:     &workflow.ObservedQuality{Runs: 30, Successes: 12, SuccessRate: 0.4, SuccessRateLower: 0.27, SuccessRateUpper: 0.55, PredictedQuality: 0.9025, CorrelatedErrors: true},
					GuardVersion: "1", InputEventID: "e-9", InputSubject: "toolsentry.telemetry.observed.support", InputSequence: 90,
				}},
		},
	}
}

func observedErrorCases() []errorCase {
	s := func(data string) string { return string(structured(observedAttrs, data)) }
	v := func(data string) string {
		return string(structured(`"id":"v-3","source":"toolsentry","type":"io.toolsentry.verdict.composition.v1"`, data))
	}
	one := func(structure, calls string, success bool) string {
		ok := "false"
		if success {
			ok = "true"
		}
		return s(`{"composition_id":"support","agent_id":"a","trace_id":"t","span_id":"s","structure":` + structure + `,"calls":` + calls + `,"success":` + ok + `}`)
	}
	okCall := `{"tool_id":"x","span_id":"s1","status":"ok"}`
	verdictSubject := "toolsentry.verdicts.composition.composition_degraded.support"
	return []errorCase{
		{"observed: structure and calls differ", observedSubject, nil, one(`"y"`, `[`+okCall+`]`, true), ErrSchemaInvalid, `the structure's call 0 is "y"`},
		{"observed: more calls than the structure", observedSubject, nil, one(`"x"`, `[`+okCall+`,`+okCall+`]`, true), ErrSchemaInvalid, "structure names 1 tool calls, calls lists 2"},
		{"observed: success with a failed call", observedSubject, nil, one(`"x"`, `[{"tool_id":"x","span_id":"s1","status":"error"}]`, true), ErrSchemaInvalid, "calls[0]"},
		{"observed: success with an incorrect call", observedSubject, nil, one(`"x"`, `[{"tool_id":"x","span_id":"s1","status":"ok","correct":false}]`, true), ErrSchemaInvalid, "calls[0]"},
		{"observed: argument values", observedSubject, nil, s(strings.Replace(observedData, `"success":false`, `"success":false,"arguments":{"q":"secret"}`, 1)), ErrSchemaInvalid, "'arguments' not allowed"},
		{"observed: on another composition's subject", "toolsentry.telemetry.observed.billing", nil, s(observedData), ErrSubjectMismatch, `"support"`},
		{"observed: on the workflow subject", "toolsentry.telemetry.workflow.support", nil, s(observedData), ErrSubjectMismatch, "does not belong"},
		{"verdict: more successes than runs", verdictSubject, nil, v(strings.Replace(observedVerdictData, `"successes":12`, `"successes":31`, 1)), ErrSchemaInvalid, "31 successes of 30 runs"},
		{"verdict: rate not successes/runs", verdictSubject, nil, v(strings.Replace(observedVerdictData, `"successes":12`, `"successes":13`, 1)), ErrSchemaInvalid, "is not 13/30"},
		{"verdict: rate outside its bounds", verdictSubject, nil, v(strings.Replace(observedVerdictData, `"success_rate_lower":0.27`, `"success_rate_lower":0.47`, 1)), ErrSchemaInvalid, "outside its bounds"},
	}
}

// TestNewWorkflowObserved: the constructor writes what Decode reads back,
// on the composition's subject.
func TestNewWorkflowObserved(t *testing.T) {
	p := WorkflowObserved{
		CompositionID: "support", AgentID: "bot", TraceID: "t", SpanID: "s",
		Structure: workflow.Chain(workflow.Tool("a"), workflow.Tool("b")),
		Calls:     []ObservedCall{{ToolID: "a", SpanID: "1", Status: "ok"}, {ToolID: "b", SpanID: "2", Status: "error", ErrorType: "tool_error"}},
	}
	msg, err := Names{}.NewWorkflowObserved(Meta{ID: "t-s", Source: "otlp"}, p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != observedSubject || msg.ID != "t-s" {
		t.Errorf("subject %q id %q", msg.Subject, msg.ID)
	}
	ev, err := Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&p, ev.WorkflowObserved); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	p.Success = true // with a failed call
	if _, err := (Names{}).NewWorkflowObserved(Meta{ID: "t-s", Source: "otlp"}, p); err == nil {
		t.Error("a successful run with a failed call was encoded")
	}
}
