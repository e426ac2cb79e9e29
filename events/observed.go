package events

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/toolsentry/toolsentry/guards/workflow"
)

// WorkflowObserved is the data of TypeWorkflowObserved: one run of a
// composition as a trace shows it. Structure holds the tool calls under
// one agent invocation in start order, calls that overlap in time in a
// parallel (mode all) block; Calls are those calls in the order Structure
// names them. Success means every call ended ok and was not judged
// incorrect, and the agent invocation did not fail. No argument or result
// values.
type WorkflowObserved struct {
	CompositionID string         `json:"composition_id"`
	AgentID       string         `json:"agent_id"`
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"` // the agent invocation's span
	Structure     workflow.Node  `json:"structure"`
	Calls         []ObservedCall `json:"calls"`
	Success       bool           `json:"success"`
}

// ObservedCall is one tool call of an observed run and how it ended.
type ObservedCall struct {
	ToolID    string `json:"tool_id"`
	SpanID    string `json:"span_id"`
	Status    string `json:"status"` // "ok" or "error"
	ErrorType string `json:"error_type,omitempty"`
	Correct   *bool  `json:"correct,omitempty"`
}

// Succeeded reports whether the call counts as a success: status ok and
// not judged incorrect (the rule the quality measurements use).
func (c ObservedCall) Succeeded() bool {
	return c.Status == "ok" && (c.Correct == nil || *c.Correct)
}

// NewWorkflowObserved builds an io.toolsentry.workflow.observed.v1 event on
// the composition's subject, toolsentry.telemetry.observed.<composition>.
func (n Names) NewWorkflowObserved(meta Meta, p WorkflowObserved) (Message, error) {
	return n.Encode(meta.event(KindWorkflowObserved, p.CompositionID, Event{WorkflowObserved: &p}))
}

// workflowObservedOf reads validated data. Beyond the schema it checks
// what the schema cannot say: the structure's tool calls, in order, are
// the calls listed, and a run with a failed call is not a success.
func workflowObservedOf(m map[string]any) (*WorkflowObserved, error) {
	p := &WorkflowObserved{
		CompositionID: str(m, "composition_id"),
		AgentID:       str(m, "agent_id"),
		TraceID:       str(m, "trace_id"),
		SpanID:        str(m, "span_id"),
	}
	p.Success, _ = m["success"].(bool)
	structure, err := marshalJSON(m["structure"])
	if err != nil {
		return nil, fmt.Errorf("%w: structure: %v", ErrSchemaInvalid, err)
	}
	if err := json.Unmarshal(structure, &p.Structure); err != nil {
		return nil, fmt.Errorf("%w: structure: %v", ErrSchemaInvalid, err)
	}
	arr, _ := m["calls"].([]any)
	p.Calls = make([]ObservedCall, len(arr))
	for i, v := range arr {
		c := v.(map[string]any)
		p.Calls[i] = ObservedCall{ToolID: str(c, "tool_id"), SpanID: str(c, "span_id"), Status: str(c, "status"), ErrorType: str(c, "error_type")}
		if b, ok := c["correct"].(bool); ok {
			p.Calls[i].Correct = &b
		}
	}
	leaves := observedLeaves(p.Structure, nil)
	if len(leaves) != len(p.Calls) {
		return nil, fmt.Errorf("%w: structure names %d tool calls, calls lists %d", ErrSchemaInvalid, len(leaves), len(p.Calls))
	}
	for i, id := range leaves {
		if id != p.Calls[i].ToolID {
			return nil, fmt.Errorf("%w: calls[%d]: tool_id %q, but the structure's call %d is %q", ErrSchemaInvalid, i, p.Calls[i].ToolID, i, id)
		}
		if p.Success && !p.Calls[i].Succeeded() {
			return nil, fmt.Errorf("%w: success is true, but calls[%d] (%q) failed", ErrSchemaInvalid, i, id)
		}
	}
	return p, nil
}

// observedLeaves lists the structure's tool calls in order.
func observedLeaves(n workflow.Node, out []string) []string {
	if n.Kind == workflow.KindTool {
		return append(out, n.Tool)
	}
	for _, c := range n.Of {
		out = observedLeaves(c, out)
	}
	return out
}

// observedQualityOf reads a composition verdict's validated "observed"
// object, refusing counts and rates that contradict each other.
func observedQualityOf(m map[string]any) (*workflow.ObservedQuality, error) {
	o := &workflow.ObservedQuality{}
	var err error
	if o.Runs, err = count(m, "runs", "observed.runs"); err != nil {
		return nil, err
	}
	if o.Successes, err = count(m, "successes", "observed.successes"); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		k   string
		dst *float64
	}{{"success_rate", &o.SuccessRate}, {"success_rate_lower", &o.SuccessRateLower}, {"success_rate_upper", &o.SuccessRateUpper}, {"predicted_quality", &o.PredictedQuality}} {
		if *f.dst, err = number(m, f.k); err != nil {
			return nil, err
		}
	}
	o.CorrelatedErrors, _ = m["correlated_errors"].(bool)
	switch {
	case o.Successes > o.Runs:
		return nil, fmt.Errorf("%w: observed: %d successes of %d runs", ErrSchemaInvalid, o.Successes, o.Runs)
	case math.Abs(o.SuccessRate-float64(o.Successes)/float64(o.Runs)) > 1e-9:
		return nil, fmt.Errorf("%w: observed: success_rate %v is not %d/%d", ErrSchemaInvalid, o.SuccessRate, o.Successes, o.Runs)
	case o.SuccessRateLower > o.SuccessRate || o.SuccessRate > o.SuccessRateUpper:
		return nil, fmt.Errorf("%w: observed: success_rate %v outside its bounds [%v, %v]", ErrSchemaInvalid, o.SuccessRate, o.SuccessRateLower, o.SuccessRateUpper)
	}
	return o, nil
}

// count reads a validated non-negative JSON integer (possibly written as
// 7.0 or 7e0) that fits an int64.
func count(m map[string]any, k, name string) (int64, error) {
	n, _ := m[k].(json.Number)
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f >= 1<<63 || f != math.Trunc(f) {
		return 0, fmt.Errorf("%w: %s: %s is out of range", ErrSchemaInvalid, name, n)
	}
	return int64(f), nil
}
