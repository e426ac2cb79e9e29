package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// Directive is the directive in force for one key of the directives bucket
// (Names.DirectivesBucket): what the latest verdict about a tool for an
// agent, about a tool for every agent, or about a composition tells agents
// to do. Agents read it before they call the tool or run the workflow.
//
// Keys (each id encoded with KeyToken, joined by '.', as KVKey does):
//
//	schema.<tool>.<agent>    the latest schema verdict about the tool for the agent
//	schema.<tool>            the latest schema verdict about the tool for no agent in
//	                         particular (NO_BASELINE, SCHEMA_MATCH, drift with no usage known)
//	composition.<composition>  the latest composition verdict
//
// An agent watches only its own keys with the KV watch filters of
// AgentDirectiveFilters: "schema.*.<agent>", "schema.*" and "composition.*".
// For a tool, an agent's own key wins over the tool-wide one.
//
// Values never hold an argument's value: only paths, types, verdict names,
// directive texts and digests.
type Directive struct {
	// Guard is "schema" or "composition".
	Guard string `json:"guard"`
	// ToolID and AgentID name a schema directive's tool and agent (AgentID
	// "" for the tool-wide one).
	ToolID  string `json:"tool_id,omitempty"`
	AgentID string `json:"agent_id,omitempty"`
	// CompositionID names a composition directive's workflow.
	CompositionID string `json:"composition_id,omitempty"`
	// Action is what the agent must do: PROCEED, MIGRATE or HALT (the
	// mapping is toolschema.SchemaAction and guards.CompositionAction).
	Action guards.Action `json:"action"`
	// Directive is the verdict's directive text, verbatim ("HALT: Drift on
	// used fields ['user_id']. Apply migration.").
	Directive string `json:"directive"`
	// Reason says why the action is what it is.
	Reason string `json:"reason"`
	// Verdict identifies the verdict the directive follows: the first of a
	// run of verdicts that repeat it exactly (the projector does not
	// rewrite a directive for a verdict that tells nothing new).
	Verdict VerdictRef `json:"verdict"`
	// Migration is the verdict's plan that rewrites the agent's payload
	// (schema directives; empty when nothing is to migrate). Only a MIGRATE
	// directive applies it.
	Migration toolschema.MigrationPlan `json:"migration"`
	// Affected are the changed fields the agent uses (surface keys).
	Affected []string `json:"affected"`
	// FromFingerprint and ToFingerprint are the tool fingerprints the
	// directive holds between: the schema the agent was judged against
	// (the baseline, or the one it integrated against) and the tool's
	// current one. Empty for compositions.
	FromFingerprint string `json:"from_fingerprint,omitempty"`
	ToFingerprint   string `json:"to_fingerprint,omitempty"`
	// Held is true while the tool's baseline is held on this drift, until
	// an operator accepts the current version (`toolsentry baseline
	// accept`).
	Held bool `json:"held,omitempty"`
	// AcceptedFingerprint is set when an operator accepted ToFingerprint as
	// the tool's baseline after the verdict. The action stays: accepting
	// changes what agents are judged against, not what they send.
	AcceptedFingerprint string `json:"accepted_fingerprint,omitempty"`
	// SupersededBy is set on an agent's directive that a later tool-wide
	// verdict replaced: the tool no longer presents the schema the agent's
	// verdict was about. It names that verdict's id.
	SupersededBy string `json:"superseded_by,omitempty"`
}

// VerdictRef identifies a verdict: its name, CloudEvent id, sequence in the
// verdict stream, manifest digest, guard version and time.
type VerdictRef struct {
	Name           string    `json:"name"`
	ID             string    `json:"id"`
	Sequence       uint64    `json:"sequence"`
	ManifestDigest string    `json:"manifest_digest"`
	GuardVersion   string    `json:"guard_version"`
	Time           time.Time `json:"time,omitzero"`
}

// The Guard values of a Directive, which are also the first token of its
// key.
const (
	DirectiveSchema      = "schema"
	DirectiveComposition = "composition"
)

// SchemaDirectiveKey is the key of the schema directive of tool for agent,
// or of the tool-wide one when agent is "".
func SchemaDirectiveKey(tool, agent string) (string, error) {
	if agent == "" {
		return KVKey(DirectiveSchema, tool)
	}
	return KVKey(DirectiveSchema, tool, agent)
}

// CompositionDirectiveKey is the key of the directive of a composition.
func CompositionDirectiveKey(composition string) (string, error) {
	return KVKey(DirectiveComposition, composition)
}

// SchemaDirectiveFilter is the KV filter of every agent's directive about
// tool ("schema.<tool>.*"), without the tool-wide one.
func SchemaDirectiveFilter(tool string) (string, error) {
	k, err := KVKey(DirectiveSchema, tool)
	if err != nil {
		return "", err
	}
	return k + ".*", nil
}

// AgentDirectiveFilters are the KV watch filters of an agent's own keys:
// its schema directives of every tool, the tool-wide ones, and every
// composition's.
func AgentDirectiveFilters(agent string) ([]string, error) {
	tok, err := KeyToken(agent)
	if err != nil {
		return nil, err
	}
	return []string{DirectiveSchema + ".*." + tok, DirectiveSchema + ".*", DirectiveComposition + ".*"}, nil
}

// Key returns the directive's key in the bucket.
func (d *Directive) Key() (string, error) {
	switch d.Guard {
	case DirectiveSchema:
		return SchemaDirectiveKey(d.ToolID, d.AgentID)
	case DirectiveComposition:
		return CompositionDirectiveKey(d.CompositionID)
	}
	return "", fmt.Errorf("%w: directive of guard %q", ErrBadKey, d.Guard)
}

// DirectiveOf returns the directive that a decoded verdict sets, seq being
// the verdict's sequence in the verdict stream. It fails for an event that
// is not a verdict, and for a schema verdict whose migration or affected
// fields do not decode.
func DirectiveOf(ev Event, seq uint64) (Directive, error) {
	ref := VerdictRef{ID: ev.ID, Sequence: seq, Time: ev.Time}
	switch {
	case ev.Kind == KindSchemaVerdict && ev.SchemaVerdict != nil:
		v := ev.SchemaVerdict
		d := Directive{
			Guard:           DirectiveSchema,
			ToolID:          v.ToolID,
			AgentID:         v.AgentID,
			Directive:       v.Directive,
			FromFingerprint: v.BaselineFingerprint,
			ToFingerprint:   v.CurrentFingerprint,
		}
		ref.Name, ref.ManifestDigest, ref.GuardVersion = string(v.Verdict), v.ManifestDigest, v.GuardVersion
		d.Verdict = ref
		var err error
		if d.Affected, d.Migration, err = v.plan(ev.ID); err != nil {
			return Directive{}, err
		}
		// The same action as the verdict's own (SchemaVerdict.Describe).
		d.Action, d.Reason = toolschema.SchemaAction(v.Verdict, d.Affected, d.Migration)
		d.Held = v.Verdict == guards.DriftOnUsedFields && isObservation(v.InputSubject)
		return d, nil
	case ev.Kind == KindCompositionVerdict && ev.CompositionVerdict != nil:
		v := ev.CompositionVerdict
		ref.Name, ref.ManifestDigest, ref.GuardVersion = string(v.Verdict), v.ManifestDigest, v.GuardVersion
		d := Directive{
			Guard:         DirectiveComposition,
			CompositionID: v.CompositionID,
			Directive:     v.Directive,
			Verdict:       ref,
			Affected:      []string{},
			Migration:     toolschema.MigrationPlan{Steps: []toolschema.MigrationStep{}, Blocked: []toolschema.MigrationBlocker{}},
			Action:        guards.CompositionAction(v.Verdict),
		}
		d.Reason = string(v.Verdict) + " says " + string(d.Action)
		return d, nil
	}
	return Directive{}, fmt.Errorf("%w: a %s event is not a verdict", ErrBadEvent, ev.Kind)
}

// noSteps reports whether a verdict's migration is a plan without steps or
// blockers as Decode writes it (most verdicts' is), which leaves
// Directive.Migration as it starts: no need to decode it.
func noSteps(migration json.RawMessage) bool {
	switch string(migration) {
	case `{"blocked":null,"steps":[]}`, `{"blocked":[],"steps":[]}`, `{"blocked":null,"steps":null}`, `{"blocked":[],"steps":null}`:
		return true
	}
	return false
}

// isObservation reports whether a verdict's input subject is a schema
// observation (toolsentry.telemetry.schema.<key>, any prefix): drift on used
// fields found there holds the tool's baseline.
func isObservation(inputSubject string) bool {
	a, err := ParseSubjectAnyPrefix(inputSubject)
	return err == nil && a.Class == ClassTelemetry && a.Kind == KindSchemaObserved
}

// ParseSubjectAnyPrefix parses a subject whose first token is any valid
// prefix (see Names.ParseSubject).
func ParseSubjectAnyPrefix(subject string) (Address, error) {
	for i := 0; i < len(subject); i++ {
		if subject[i] == '.' {
			n, err := NewNames(subject[:i])
			if err != nil {
				return Address{}, fmt.Errorf("%w: %q: %v", ErrBadSubject, subject, err)
			}
			return n.ParseSubject(subject)
		}
	}
	return Address{}, fmt.Errorf("%w: %q has no prefix", ErrBadSubject, subject)
}
