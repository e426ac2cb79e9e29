package otlp

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards/workflow"
)

// The OpenTelemetry attribute, event and value names this package reads
// (GenAI semantic conventions; MCP semantic conventions; resource
// conventions), and toolsentry's own attribute.
const (
	AttrOperationName   = "gen_ai.operation.name"
	AttrToolName        = "gen_ai.tool.name"
	AttrToolCallID      = "gen_ai.tool.call.id"
	AttrToolCallArgs    = "gen_ai.tool.call.arguments"
	AttrToolDefinitions = "gen_ai.tool.definitions"
	AttrAgentName       = "gen_ai.agent.name"
	AttrAgentID         = "gen_ai.agent.id"
	AttrProviderName    = "gen_ai.provider.name"
	AttrSystem          = "gen_ai.system" // deprecated for gen_ai.provider.name
	AttrErrorType       = "error.type"
	AttrMCPMethodName   = "mcp.method.name"
	// AttrMCPServerName names the MCP server of a tool call span, as
	// serverInfo.name does. It is not an OpenTelemetry semantic
	// convention: the conventions' MCP registry (semconv v1.40.0, now
	// in the GenAI conventions repository) has mcp.method.name,
	// mcp.protocol.version, mcp.resource.uri and mcp.session.id, and
	// MCP client spans carry only the network peer, server.address and
	// server.port, which name a host, not the server a tools/list came
	// from. mcp.server.name is what MCP clients' own instrumentation
	// emits (OpenAI Codex's MCP tool spans, for one), so a call span
	// that has it names the server's tool (events.QualifiedToolID).
	AttrMCPServerName = "mcp.server.name"
	AttrServiceName   = "service.name"
	AttrCompositionID = "toolsentry.composition.id"

	EventEvaluationResult = "gen_ai.evaluation.result"
	AttrEvaluationLabel   = "gen_ai.evaluation.score.label"

	OpExecuteTool = "execute_tool"
	OpInvokeAgent = "invoke_agent"
	MCPToolsCall  = "tools/call"

	// ExtensionProvider is the CloudEvents extension attribute that carries
	// the GenAI provider (gen_ai.provider.name, or gen_ai.system).
	ExtensionProvider = "genaiprovider"
	// DefaultSource is the CloudEvents source of translated events.
	DefaultSource = "otlp"
	// unknownService is the OpenTelemetry default service.name.
	unknownService = "unknown_service"
)

// Options configure a translation.
type Options struct {
	// Names are the subjects (default prefix toolsentry).
	Names events.Names
	// Source is the CloudEvents source of every event (default "otlp").
	Source string
}

// Result is what a translation produced: the events to publish, and the
// spans it could not translate. Messages come in publishing order: schema
// observations, then invocations, then observed workflows, each sorted by
// span start time and id.
type Result struct {
	Messages []events.Message
	// Spans counts the spans read; Rejected are the GenAI spans that could
	// not be translated (every other span of their trace still was).
	Spans    int
	Rejected []*SpanError
}

// span is one span with what the translation needs of it.
type span struct {
	s        *tracepb.Span
	resource map[string]*commonpb.AnyValue
	attrs    map[string]*commonpb.AnyValue
	traceID  string // hex; "" if malformed
	spanID   string // hex; "" if malformed
	parentID string // hex; "" for a root
	idErr    error
}

func (sp *span) str(key string) string { return anyString(sp.attrs[key]) }

func (sp *span) fail(err error) *SpanError {
	return &SpanError{TraceID: sp.traceID, SpanID: sp.spanID, Name: sp.s.GetName(), Err: err}
}

func (sp *span) isTool() bool {
	return sp.str(AttrOperationName) == OpExecuteTool || sp.isMCPCall()
}

func (sp *span) isMCPCall() bool { return sp.str(AttrMCPMethodName) == MCPToolsCall }

func (sp *span) isAgent() bool { return sp.str(AttrOperationName) == OpInvokeAgent }

func (sp *span) failed() bool {
	return sp.str(AttrErrorType) != "" || sp.s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR
}

func (sp *span) start() time.Time { return unixNano(sp.s.GetStartTimeUnixNano()) }

func (sp *span) provider() string {
	if p := sp.str(AttrProviderName); p != "" {
		return p
	}
	return sp.str(AttrSystem)
}

func unixNano(ns uint64) time.Time {
	if ns == 0 || ns > math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns)).UTC()
}

// call is one tool call: a tool span, merged with the MCP span that
// describes the same call.
type call struct {
	sp       *span
	tool     string
	agent    *span // the enclosing invoke_agent span, or nil
	args     events.FieldTypes
	failed   bool
	errType  string
	correct  *bool
	provider string
}

func (c *call) succeeded() bool { return !c.failed && (c.correct == nil || *c.correct) }

// Translate turns an OTLP trace export into toolsentry telemetry; see the
// package documentation for the mapping. It never fails as a whole: a span
// it cannot translate is in Result.Rejected, with the reason.
func Translate(req *coltracepb.ExportTraceServiceRequest, opts Options) Result {
	if opts.Source == "" {
		opts.Source = DefaultSource
	}
	t := &translation{opts: opts, byID: map[string]*span{}}
	t.index(req)
	t.definitions()
	t.calls()
	t.workflows()
	return t.res
}

type translation struct {
	opts  Options
	spans []*span
	byID  map[string]*span // trace id + span id
	res   Result

	defs, invs, runs []events.Message
	seen             map[string]bool   // message ids already produced
	callsOf          map[*span][]*call // by enclosing agent span (nil: none), in start order
}

func (t *translation) index(req *coltracepb.ExportTraceServiceRequest) {
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := &span{s: s, resource: res, attrs: attrMap(s.GetAttributes())}
				if len(s.GetTraceId()) != 16 {
					sp.idErr = fmt.Errorf("trace id of %d bytes, want 16", len(s.GetTraceId()))
				} else if isZero(s.GetTraceId()) {
					sp.idErr = errors.New("trace id all zero")
				} else if len(s.GetSpanId()) != 8 {
					sp.idErr = fmt.Errorf("span id of %d bytes, want 8", len(s.GetSpanId()))
				} else if isZero(s.GetSpanId()) {
					sp.idErr = errors.New("span id all zero")
				} else if p := s.GetParentSpanId(); len(p) != 0 && len(p) != 8 {
					sp.idErr = fmt.Errorf("parent span id of %d bytes, want 8 or none", len(p))
				}
				if sp.idErr == nil {
					sp.traceID, sp.spanID = hex.EncodeToString(s.GetTraceId()), hex.EncodeToString(s.GetSpanId())
					if p := s.GetParentSpanId(); len(p) == 8 && !isZero(p) {
						sp.parentID = hex.EncodeToString(p)
					}
					t.byID[sp.traceID+sp.spanID] = sp
				}
				t.spans = append(t.spans, sp)
			}
		}
	}
	t.res.Spans = len(t.spans)
	// Start order (then id) everywhere below, so that the output does not
	// depend on how the exporter batched the spans.
	slices.SortStableFunc(t.spans, func(a, b *span) int {
		if c := a.start().Compare(b.start()); c != 0 {
			return c
		}
		return strings.Compare(a.traceID+a.spanID, b.traceID+b.spanID)
	})
	t.seen = map[string]bool{}
}

func isZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func (t *translation) reject(e *SpanError) { t.res.Rejected = append(t.res.Rejected, e) }

func (t *translation) emit(dst *[]events.Message, msg events.Message) {
	if t.seen[msg.ID] {
		return
	}
	t.seen[msg.ID] = true
	*dst = append(*dst, msg)
}

// parent returns a span's parent in this export, or nil.
func (t *translation) parent(sp *span) *span {
	if sp.parentID == "" {
		return nil
	}
	return t.byID[sp.traceID+sp.parentID]
}

// enclosingAgent is the nearest invoke_agent ancestor in this export.
func (t *translation) enclosingAgent(sp *span) *span {
	for p, hops := t.parent(sp), 0; p != nil && hops < 1000; p, hops = t.parent(p), hops+1 {
		if p.isAgent() {
			return p
		}
	}
	return nil
}

// definitions turns every gen_ai.tool.definitions attribute into one
// schema observation per tool.
func (t *translation) definitions() {
	for _, sp := range t.spans {
		v, ok := sp.attrs[AttrToolDefinitions]
		if !ok {
			continue
		}
		if sp.idErr != nil {
			t.reject(sp.fail(sp.idErr))
			continue
		}
		msgs, err := t.definitionMessages(sp, v)
		if err != nil {
			t.reject(sp.fail(err))
			continue
		}
		for _, m := range msgs {
			t.emit(&t.defs, m)
		}
	}
}

// toolDefinition is one entry of gen_ai.tool.definitions.
type toolDefinition struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Response    json.RawMessage `json:"response"`
}

func (t *translation) definitionMessages(sp *span, v *commonpb.AnyValue) ([]events.Message, error) {
	raw, err := jsonOf(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", AttrToolDefinitions, err)
	}
	var defs []toolDefinition
	if err := json.Unmarshal(raw, &defs); err != nil {
		return nil, fmt.Errorf("%s: not a JSON array of tool definitions: %v", AttrToolDefinitions, err)
	}
	var out []events.Message
	for i, d := range defs {
		if d.Name == "" {
			return nil, fmt.Errorf("%s[%d]: no name", AttrToolDefinitions, i)
		}
		tool := events.MCPTool{Name: d.Name, Description: d.Description, InputSchema: json.RawMessage(`{"type":"object"}`)}
		if hasJSON(d.Parameters) {
			tool.InputSchema = d.Parameters
		}
		if hasJSON(d.Response) {
			tool.OutputSchema = d.Response
		}
		body, err := canonicalJSON(tool)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] (%s): %v", AttrToolDefinitions, i, d.Name, err)
		}
		// The id and version come from the definition itself: every chat
		// span repeats the definitions, and the stream's duplicate window
		// keeps one observation of each.
		sum := sha256.Sum256(append([]byte(d.Name+"\x00"), body...))
		msg, err := t.opts.Names.NewSchemaObserved(t.meta("def-"+hex.EncodeToString(sum[:16]), sp.start(), sp.provider()),
			events.SchemaObserved{ToolID: d.Name, Version: "sha256:" + hex.EncodeToString(sum[:6]), Tool: &tool})
		if err != nil {
			return nil, fmt.Errorf("%s[%d] (%s): %v", AttrToolDefinitions, i, d.Name, err)
		}
		out = append(out, msg)
	}
	return out, nil
}

// canonicalJSON writes v with every object's keys sorted and no
// insignificant space, numbers as written: the same definition always
// hashes the same.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return json.Marshal(x)
}

func hasJSON(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	return len(r) > 0 && string(r) != "null"
}

func (t *translation) meta(id string, at time.Time, provider string) events.Meta {
	m := events.Meta{ID: id, Source: t.opts.Source, Time: at}
	if provider != "" {
		m.Extensions = map[string]string{ExtensionProvider: provider}
	}
	return m
}

// calls turns every tool span into an invocation, a framework span and the
// MCP span of the same call into one, and keeps the calls per agent span
// for the workflows.
func (t *translation) calls() {
	var tools []*span
	for _, sp := range t.spans {
		if sp.isTool() {
			if sp.idErr != nil {
				t.reject(sp.fail(sp.idErr))
				continue
			}
			tools = append(tools, sp)
		}
	}
	// Pair each MCP tools/call span with the framework execute_tool span
	// of the same call: the same gen_ai.tool.call.id in the trace, or the
	// framework span is its parent and names the same tool.
	merged := map[*span]*span{} // MCP span → framework span
	byCallID := map[string]*span{}
	for _, sp := range tools {
		if !sp.isMCPCall() {
			if id := sp.str(AttrToolCallID); id != "" {
				byCallID[sp.traceID+"\x00"+id] = sp
			}
		}
	}
	for _, sp := range tools {
		if !sp.isMCPCall() {
			continue
		}
		if id := sp.str(AttrToolCallID); id != "" {
			if f, ok := byCallID[sp.traceID+"\x00"+id]; ok {
				merged[sp] = f
				continue
			}
		}
		if p := t.parent(sp); p != nil && p.isTool() && !p.isMCPCall() && toolName(p) == toolName(sp) {
			merged[sp] = p
		}
	}
	partners := map[*span][]*span{} // framework span → its MCP spans
	for m, f := range merged {
		partners[f] = append(partners[f], m)
	}
	t.callsOf = map[*span][]*call{}
	for _, sp := range tools {
		if _, ok := merged[sp]; ok {
			continue // counted with its framework span
		}
		c, err := t.call(sp, partners[sp])
		if err != nil {
			t.reject(sp.fail(err))
			continue
		}
		msg, err := t.invocation(c)
		if err != nil {
			t.reject(sp.fail(err))
			continue
		}
		t.emit(&t.invs, msg)
		t.callsOf[c.agent] = append(t.callsOf[c.agent], c)
	}
}

// toolName is gen_ai.tool.name, or the tool in the span name the
// conventions prescribe ("execute_tool {tool}", "tools/call {tool}").
func toolName(sp *span) string {
	if n := sp.str(AttrToolName); n != "" {
		return n
	}
	for _, prefix := range []string{OpExecuteTool + " ", MCPToolsCall + " "} {
		if rest, ok := strings.CutPrefix(sp.s.GetName(), prefix); ok && strings.TrimSpace(rest) != "" {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

func (t *translation) call(sp *span, partners []*span) (*call, error) {
	c := &call{sp: sp, tool: toolName(sp), agent: t.enclosingAgent(sp)}
	if c.tool == "" {
		return nil, fmt.Errorf("a tool span without %s", AttrToolName)
	}
	all := append([]*span{sp}, partners...)
	for _, s := range all {
		if server := s.str(AttrMCPServerName); server != "" {
			c.tool = events.QualifiedToolID(server, c.tool)
			break
		}
	}
	for _, s := range all {
		if v, ok := s.attrs[AttrToolCallArgs]; ok {
			args, err := argumentTypes(v)
			if err != nil {
				return nil, err
			}
			if c.args == nil {
				c.args = args
			} else {
				for p, ty := range args {
					c.args[p] |= ty
				}
			}
		}
		if s.failed() {
			c.failed = true
			if c.errType == "" {
				c.errType = s.str(AttrErrorType)
			}
		}
		if ok, judged := evaluation(s); judged {
			c.correct = andJudgement(c.correct, ok)
		}
		if c.provider == "" {
			c.provider = s.provider()
		}
	}
	if c.provider == "" && c.agent != nil {
		c.provider = c.agent.provider()
	}
	return c, nil
}

func andJudgement(prev *bool, ok bool) *bool {
	v := ok && (prev == nil || *prev)
	return &v
}

// The gen_ai.evaluation.score.label values read as a judgement of
// correctness (case-insensitive); other labels are no judgement.
var (
	passLabels = []string{"pass", "passed", "correct", "true", "yes", "success", "succeeded"}
	failLabels = []string{"fail", "failed", "incorrect", "false", "no", "failure"}
)

// evaluation reads the span's gen_ai.evaluation.result events: judged when
// one has a pass or fail label; ok when none failed.
func evaluation(sp *span) (ok, judged bool) {
	ok = true
	for _, e := range sp.s.GetEvents() {
		if e.GetName() != EventEvaluationResult {
			continue
		}
		attrs := attrMap(e.GetAttributes())
		if anyString(attrs[AttrErrorType]) != "" {
			continue // the evaluation itself failed: no judgement
		}
		label := strings.ToLower(anyString(attrs[AttrEvaluationLabel]))
		switch {
		case slices.Contains(passLabels, label):
			judged = true
		case slices.Contains(failLabels, label):
			judged, ok = true, false
		}
	}
	return ok, judged
}

// agentID: the enclosing agent's gen_ai.agent.name, else the tool span's
// own, else the resource's service.name.
func agentID(c *call) string {
	if c.agent != nil {
		if n := c.agent.str(AttrAgentName); n != "" {
			return n
		}
	}
	if n := c.sp.str(AttrAgentName); n != "" {
		return n
	}
	return serviceName(c.sp)
}

func serviceName(sp *span) string {
	if n := anyString(sp.resource[AttrServiceName]); n != "" {
		return n
	}
	return unknownService
}

func (t *translation) invocation(c *call) (events.Message, error) {
	sp := c.sp
	inv := events.Invocation{
		AgentID:       agentID(c),
		ToolID:        c.tool,
		ArgumentTypes: c.args,
		Outcome:       &events.Outcome{Status: "ok", Correct: c.correct},
		TraceID:       sp.traceID,
		SpanID:        sp.spanID,
		ParentSpanID:  sp.parentID,
	}
	if c.failed {
		inv.Outcome.Status, inv.Outcome.ErrorType = "error", c.errType
	}
	if c.agent != nil {
		if id, err := compositionID(c.agent); err == nil {
			inv.WorkflowID = id
		}
	}
	if s, e := sp.s.GetStartTimeUnixNano(), sp.s.GetEndTimeUnixNano(); s != 0 && e >= s {
		ms := float64(e-s) / 1e6
		inv.LatencyMS = &ms
	}
	return t.opts.Names.NewInvocation(t.meta(sp.traceID+"-"+sp.spanID, sp.start(), c.provider), inv)
}

// compositionID of an invoke_agent span: toolsentry.composition.id, else
// gen_ai.agent.name.
func compositionID(agent *span) (string, error) {
	if id := agent.str(AttrCompositionID); id != "" {
		return id, nil
	}
	if id := agent.str(AttrAgentName); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("an %s span without %s or %s: no composition to observe", OpInvokeAgent, AttrAgentName, AttrCompositionID)
}

// workflows turns the calls under each invoke_agent span into one
// observed run.
func (t *translation) workflows() {
	for _, agent := range t.spans {
		calls := t.callsOf[agent]
		if agent.idErr != nil || !agent.isAgent() || len(calls) == 0 {
			continue
		}
		msg, err := t.observed(agent, calls)
		if err != nil {
			t.reject(agent.fail(err))
			continue
		}
		t.emit(&t.runs, msg)
	}
	t.res.Messages = slices.Concat(t.defs, t.invs, t.runs)
}

func (t *translation) observed(agent *span, calls []*call) (events.Message, error) {
	composition, err := compositionID(agent)
	if err != nil {
		return events.Message{}, err
	}
	if len(calls) > maxCalls {
		return events.Message{}, fmt.Errorf("%d tool calls under one agent invocation, at most %d", len(calls), maxCalls)
	}
	// calls are in start order (t.spans is): group the ones that overlap.
	var stages []workflow.Node
	var ordered []events.ObservedCall
	success := !agent.failed()
	if ok, judged := evaluation(agent); judged && !ok {
		success = false
	}
	for i := 0; i < len(calls); {
		end := calls[i].sp.s.GetEndTimeUnixNano()
		j := i + 1
		for j < len(calls) && calls[j].sp.s.GetStartTimeUnixNano() < end {
			end = max(end, calls[j].sp.s.GetEndTimeUnixNano())
			j++
		}
		group := make([]workflow.Node, 0, j-i)
		for _, c := range calls[i:j] {
			group = append(group, workflow.Tool(c.tool))
			oc := events.ObservedCall{ToolID: c.tool, SpanID: c.sp.spanID, Status: "ok", Correct: c.correct}
			if c.failed {
				oc.Status, oc.ErrorType = "error", c.errType
			}
			ordered = append(ordered, oc)
			success = success && c.succeeded()
		}
		if len(group) == 1 {
			stages = append(stages, group[0])
		} else {
			stages = append(stages, workflow.ParallelAll(group...))
		}
		i = j
	}
	structure := workflow.Chain(stages...)
	if len(stages) == 1 {
		structure = stages[0]
	}
	agentName := agent.str(AttrAgentName)
	if agentName == "" {
		agentName = agent.str(AttrAgentID)
	}
	if agentName == "" {
		agentName = serviceName(agent)
	}
	return t.opts.Names.NewWorkflowObserved(t.meta(agent.traceID+"-"+agent.spanID, agent.start(), agent.provider()), events.WorkflowObserved{
		CompositionID: composition,
		AgentID:       agentName,
		TraceID:       agent.traceID,
		SpanID:        agent.spanID,
		Structure:     structure,
		Calls:         ordered,
		Success:       success,
	})
}

// maxCalls is the most tool calls one observed run may list: with a node
// per call and per stage, its structure stays within guards'
// MaxWorkflowNodes (the schema allows 1000 calls; the structure binds first).
const maxCalls = (workflow.MaxWorkflowNodes - 1) / 2

// argumentTypes reads gen_ai.tool.call.arguments, structured or a JSON
// string, as paths and types; the values are dropped here.
func argumentTypes(v *commonpb.AnyValue) (events.FieldTypes, error) {
	var raw []byte
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		raw = []byte(s.StringValue)
	} else {
		var err error
		if raw, err = jsonOf(v); err != nil {
			return nil, fmt.Errorf("%s: %w", AttrToolCallArgs, err)
		}
	}
	f, err := events.FieldTypesOf(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", AttrToolCallArgs, strings.TrimPrefix(err.Error(), events.ErrBadEvent.Error()+": arguments: "))
	}
	return f, nil
}

// attrMap indexes attributes by key; a repeated key keeps its last value.
func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// anyString is a string attribute's value, or an integer's decimal form
// (call ids are sometimes numbers); "" otherwise.
func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return ""
}

// jsonOf writes an attribute value as JSON: a string holding JSON is that
// JSON (instrumentations may record structured values as JSON strings);
// structured values map as OTLP/JSON's AnyValue does, bytes as base64.
func jsonOf(v *commonpb.AnyValue) ([]byte, error) {
	if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		if !json.Valid([]byte(s.StringValue)) {
			return nil, errors.New("a string that is not JSON")
		}
		return []byte(s.StringValue), nil
	}
	val, err := goValue(v, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(val)
}

func goValue(v *commonpb.AnyValue, depth int) (any, error) {
	if depth > events.MaxArgumentDepth {
		return nil, fmt.Errorf("nested deeper than %d", events.MaxArgumentDepth)
	}
	switch x := v.GetValue().(type) {
	case nil:
		return nil, nil
	case *commonpb.AnyValue_StringValue:
		return x.StringValue, nil
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue, nil
	case *commonpb.AnyValue_IntValue:
		return x.IntValue, nil
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return 0.5, nil // JSON has no NaN; the type, number, is all that is kept
		}
		return x.DoubleValue, nil
	case *commonpb.AnyValue_BytesValue:
		return base64.StdEncoding.EncodeToString(x.BytesValue), nil
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			g, err := goValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, nil
	case *commonpb.AnyValue_KvlistValue:
		out := make(map[string]any, len(x.KvlistValue.GetValues()))
		for _, kv := range x.KvlistValue.GetValues() {
			g, err := goValue(kv.GetValue(), depth+1)
			if err != nil {
				return nil, err
			}
			out[kv.GetKey()] = g
		}
		return out, nil
	}
	return nil, fmt.Errorf("an attribute value of type %T", v.GetValue())
}
