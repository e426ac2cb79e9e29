package agent

// This file protects the very first call after a silent upgrade: an agent
// (or its MCP proxy) that has just listed a tool tells its view, which
// compares the listed version with the tool's baseline itself, with the
// same guards as the stream processor and the agent's recorded surface
// (bucket toolsentry-usage, its own keys), and answers the agent's calls by
// that local verdict until serve's verdict about the listed version
// reaches the directives bucket. The two agree: same verdict, migration
// and manifest digest.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// ListedVersion is the version of a tool observed in a tools/list result,
// which names no version per tool: the stream processor splits a list into
// one observation per tool under this version (consumer/core
// UnversionedTool), and a local verdict must judge the same version.
const ListedVersion = "unversioned"

// ErrNoAgent is returned by Listed on a view that follows every agent: a
// local verdict is about one agent's recorded surface.
var ErrNoAgent = errors.New("the view follows no single agent")

// usageSurface is what the view reads of one of the agent's usage records
// (bucket toolsentry-usage, key tool.agent; consumer/core.UsageRecord).
type usageSurface struct {
	ToolID  string              `json:"tool_id"`
	AgentID string              `json:"agent_id"`
	Input   map[string][]string `json:"input"`
	Output  []string            `json:"output"`
}

func (u usageSurface) surface() toolschema.UsedSurface {
	in := make([]string, 0, len(u.Input))
	for p := range u.Input {
		in = append(in, p)
	}
	sort.Strings(in)
	return toolschema.UsedSurface{Input: in, Output: slices.Clone(u.Output)}
}

// usageView follows one agent's usage records, by tool id.
type usageView = kvIndex[usageSurface]

func watchUsage(ctx context.Context, js jetstream.JetStream, names events.Names, agent string) (*usageView, error) {
	tok, err := events.KeyToken(agent)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, names.UsageBucket())
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s (has `toolsentry serve` run with this prefix?): %w", names.UsageBucket(), err)
	}
	w, err := kv.WatchFiltered(ctx, []string{"*." + tok})
	if err != nil {
		return nil, fmt.Errorf("watching bucket %s: %w", names.UsageBucket(), err)
	}
	return followKV(ctx, w, func(e jetstream.KeyValueEntry) (string, usageSurface, bool) {
		var u usageSurface
		ok := json.Unmarshal(e.Value(), &u) == nil && u.ToolID != "" && u.AgentID == agent
		return u.ToolID, u, ok
	}), nil
}

// listedEntry is a local verdict: the directive it sets for the agent and
// the listed version, against whose input schema payloads are judged.
type listedEntry struct {
	d    events.Directive
	tool *toolEntry
	// byPayload is set when the agent has no recorded surface for the
	// tool: Guard then judges each payload by the drift of these two
	// versions for the paths the payload sends.
	byPayload *drift
	sv        events.SchemaVerdict // the local verdict
}

// drift is a baseline and a listed version of one tool.
type drift struct {
	base, listed toolschema.ToolDefinition
	baseFP       string
}

// fillDrift sets a verdict's decision from a drift report.
func fillDrift(sv *events.SchemaVerdict, baseFP string, rep toolschema.DriftReport) error {
	sv.Verdict, sv.Directive, sv.ManifestDigest = rep.Manifest.Verdict, rep.Manifest.Directive, rep.Manifest.ManifestDigest
	sv.BaselineFingerprint = baseFP
	var err error
	if sv.Affected, err = json.Marshal(rep.Affected); err != nil {
		return err
	}
	sv.Migration, err = json.Marshal(rep.Migration)
	return err
}

// localDirective is the directive a verdict judged here sets, as the
// directives projector would set it from serve's.
func localDirective(sv events.SchemaVerdict) (events.Directive, error) {
	d, err := events.DirectiveOf(events.Event{Kind: events.KindSchemaVerdict, SchemaVerdict: &sv}, 0)
	if err != nil {
		return events.Directive{}, err
	}
	d.Reason = "judged here, before serve's verdict, from the listed version: " + d.Reason
	return d, nil
}

// forPayload is the local directive for one payload of an agent with no
// recorded surface: the drift judged for the paths the payload sends. It
// returns false when the payload's paths do not make the drift touch the
// agent.
func (e listedEntry) forPayload(payload json.RawMessage) (events.Directive, bool) {
	types, err := events.FieldTypesOf(payload)
	if err != nil {
		return events.Directive{}, false
	}
	paths := make([]string, 0, len(types))
	for p := range types {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	rep, err := toolschema.EvaluateDrift(e.byPayload.base, e.byPayload.listed, toolschema.UsedSurface{Input: paths})
	if err != nil || rep.Manifest.Verdict != guards.DriftOnUsedFields {
		return events.Directive{}, false
	}
	sv := e.sv
	if fillDrift(&sv, e.byPayload.baseFP, rep) != nil {
		return events.Directive{}, false
	}
	d, err := localDirective(sv)
	return d, err == nil
}

// Listed tells the view that the agent has just been shown tool (as
// tools/list showed it) under the id toolID. When that version is not the
// one the view knows as the tool's current one, the view judges it itself
// as `toolsentry serve` will: the diff of the tool's baseline against the
// listed version for the agent's recorded surface (toolschema.EvaluateDrift),
// SCHEMA_MATCH when it is the baseline, NO_BASELINE when the tool has none.
// Until a directive about the listed version reaches the view, Guard
// answers the agent's calls of the tool by that local directive, judged
// against the listed input schema. It returns the local directive, or nil
// when the view already knows the listed version.
func (v *DirectiveView) Listed(toolID string, tool events.MCPTool) (*events.Directive, error) {
	agent := v.opts.Agent
	if agent == "" || v.usage == nil {
		return nil, ErrNoAgent
	}
	key, err := events.SchemaDirectiveKey(toolID, agent)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(tool)
	if err != nil {
		return nil, fmt.Errorf("%w: tool %q: %v", guards.ErrInvalid, tool.Name, err)
	}
	newDef, newFP, err := definitionOf(toolID, ListedVersion, raw)
	if err != nil {
		return nil, err
	}
	st, known := v.ToolState(toolID)
	if known && st.Current.Fingerprint == newFP {
		v.forget(key)
		return nil, nil
	}
	current := guards.ToolSchema{ToolID: toolID, Version: ListedVersion, SchemaFingerprint: newFP}
	var byPayload *drift
	sv := events.SchemaVerdict{
		ToolID:             toolID,
		AgentID:            agent,
		Version:            ListedVersion,
		CurrentFingerprint: newFP,
		Changes:            json.RawMessage(`[]`),
		Affected:           json.RawMessage(`[]`),
		Migration:          json.RawMessage(`{"steps":[]}`),
		GuardVersion:       guards.Version,
	}
	switch {
	case !known:
		m := guards.EvaluateSchema(current, nil)
		sv.Verdict, sv.Directive, sv.ManifestDigest = m.Verdict, m.Directive, m.ManifestDigest
	case st.Baseline.Fingerprint == newFP:
		m := guards.EvaluateSchema(current, &guards.SchemaBaseline{BaselineFingerprint: newFP})
		sv.Verdict, sv.Directive, sv.ManifestDigest, sv.BaselineFingerprint = m.Verdict, m.Directive, m.ManifestDigest, newFP
	default:
		baseDef, _, err := definitionOf(toolID, st.Baseline.Version, st.Baseline.Tool)
		if err != nil {
			return nil, fmt.Errorf("baseline of %s: %w", toolID, err)
		}
		u, used := v.usage.lookup(toolID)
		if !used {
			// No recorded surface: the agent is judged by each payload
			// (Guard), against the same two versions.
			byPayload = &drift{base: baseDef, listed: newDef, baseFP: st.Baseline.Fingerprint}
		}
		rep, err := toolschema.EvaluateDrift(baseDef, newDef, u.surface())
		if err != nil {
			return nil, err
		}
		if err := fillDrift(&sv, st.Baseline.Fingerprint, rep); err != nil {
			return nil, err
		}
	}
	d, err := localDirective(sv)
	if err != nil {
		return nil, err
	}
	entry := &toolEntry{state: ToolState{ToolID: toolID, Baseline: st.Baseline, Current: ToolVersion{Fingerprint: newFP, Version: ListedVersion, Tool: raw}, Held: st.Held}}
	v.mu.Lock()
	v.listed[key] = listedEntry{d: d, tool: entry, byPayload: byPayload, sv: sv}
	v.mu.Unlock()
	return &d, nil
}

func (v *DirectiveView) forget(key string) {
	v.mu.Lock()
	delete(v.listed, key)
	v.mu.Unlock()
}

// listedFor returns the local verdict for agent's calls of tool until both
// the directive in force and the tool's state in the view are about the
// listed version (the directives and baselines buckets are watched apart:
// either may arrive first).
func (v *DirectiveView) listedFor(agent, tool string, inForce *events.Directive) (listedEntry, bool) {
	if agent == "" || agent != v.opts.Agent {
		return listedEntry{}, false
	}
	key, err := events.SchemaDirectiveKey(tool, agent)
	if err != nil {
		return listedEntry{}, false
	}
	v.mu.RLock()
	e, ok := v.listed[key]
	v.mu.RUnlock()
	if !ok {
		return listedEntry{}, false
	}
	if st, known := v.ToolState(tool); known && st.Current.Fingerprint == e.d.ToFingerprint &&
		inForce != nil && inForce.ToFingerprint == e.d.ToFingerprint {
		v.forget(key) // serve's verdict and state about the listed version are here
		return listedEntry{}, false
	}
	return e, true
}

// definitionOf parses one tool version as the stream processor does: the
// MCP Tool's definition with the tool id and version, and its fingerprint.
func definitionOf(toolID, version string, raw json.RawMessage) (toolschema.ToolDefinition, string, error) {
	defs, err := toolschema.ParseToolDocument(raw)
	if err != nil {
		return toolschema.ToolDefinition{}, "", err
	}
	if len(defs) != 1 {
		return toolschema.ToolDefinition{}, "", fmt.Errorf("%w: a tool version holds %d tools", guards.ErrInvalid, len(defs))
	}
	def := defs[0]
	def.ID, def.Version = toolID, version
	fp, err := toolschema.Fingerprint(def)
	if err != nil {
		return toolschema.ToolDefinition{}, "", err
	}
	return def, fp, nil
}
