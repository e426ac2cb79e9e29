package core

import (
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// Bucket names one of the state buckets, by role; the live store maps it to
// the KV bucket of the configured prefix (events.Names).
type Bucket string

// The state buckets.
const (
	Baselines Bucket = "baselines" // key: tool
	Usage     Bucket = "usage"     // key: tool.agent
	Quality   Bucket = "quality"   // key: tool; written by the composition lane
	Outcomes  Bucket = "outcomes"  // key: tool; written by the tool's lane
	Workflows Bucket = "workflows" // key: composition
)

// ToolVersion is one observed version of a tool: its fingerprint, nominal
// version and MCP Tool object as it arrived (descriptions and schemas, never
// an agent's values).
type ToolVersion struct {
	Fingerprint string          `json:"fingerprint"`
	Version     string          `json:"version"`
	Tool        json.RawMessage `json:"tool"`
	Seq         uint64          `json:"seq"`      // stream sequence of the observation
	EventID     string          `json:"event_id"` // CloudEvent id of the observation
	// ToolFields is the digest of the Tool fields outside the fingerprint
	// (toolschema.ToolFieldsDigest: _meta, icons); "" in a version recorded
	// before it was kept, which takes the next observation's silently.
	ToolFields string `json:"tool_fields,omitempty"`
}

// maxKnownVersions bounds how many past versions of a tool a baseline
// record keeps for agents that integrated against one of them.
const maxKnownVersions = 8

// BaselineRecord is a tool's schema state (bucket baselines, key: tool).
type BaselineRecord struct {
	ToolID string `json:"tool_id"`
	// Baseline is the version agents are judged against.
	Baseline ToolVersion `json:"baseline"`
	// Current is the last version observed; equal to Baseline unless Held.
	Current ToolVersion `json:"current"`
	// Held is true while drift on fields agents use keeps the baseline
	// (until `toolsentry baseline accept`).
	Held bool `json:"held"`
	// Known are the recent distinct versions, newest last, Baseline and
	// Current among them.
	Known []ToolVersion `json:"known"`
	// LastSeq is the stream sequence of the last observation applied,
	// which makes its redelivery a no-op; LastEventID its CloudEvent id.
	LastSeq     uint64 `json:"last_seq"`
	LastEventID string `json:"last_event_id,omitempty"`
	// Seen counts the observations of the current fingerprint since the
	// tool came to present it, this one included: a repeat publishes no
	// verdict (its pair was judged when it came), it is counted here.
	// LastSeen is the time of the last observation (the event's; zero when
	// it had none).
	Seen     uint64    `json:"seen,omitempty"`
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// known returns the recorded version with fingerprint fp.
func (r *BaselineRecord) known(fp string) (ToolVersion, bool) {
	for _, v := range r.Known {
		if v.Fingerprint == fp {
			return v, true
		}
	}
	return ToolVersion{}, false
}

// remember adds v to Known (moving it to the end if present), keeping the
// baseline and the newest versions.
func (r *BaselineRecord) remember(v ToolVersion) {
	r.Known = slices.DeleteFunc(r.Known, func(k ToolVersion) bool { return k.Fingerprint == v.Fingerprint })
	r.Known = append(r.Known, v)
	for len(r.Known) > maxKnownVersions {
		i := slices.IndexFunc(r.Known, func(k ToolVersion) bool { return k.Fingerprint != r.Baseline.Fingerprint })
		r.Known = slices.Delete(r.Known, i, i+1)
	}
}

// Accept makes the current version the baseline (an operator's
// `toolsentry baseline accept`, applied by the tool's lane: operator.go).
func (r *BaselineRecord) Accept() {
	r.Baseline = r.Current
	r.Held = false
}

// maxNotified bounds the fingerprint pairs a usage record remembers having
// reported.
const maxNotified = 32

// UsageRecord is what one agent does with one tool (bucket usage, key:
// tool.agent): the input paths it sends with the types seen, the output
// paths it reads. It is written only when it grows.
type UsageRecord struct {
	ToolID  string `json:"tool_id"`
	AgentID string `json:"agent_id"`
	// Input maps the input paths the agent sends to the JSON types seen
	// there (names, as toolschema.TypeSet.Names; empty when only the path is
	// known).
	Input map[string][]string `json:"input"`
	// Output are the output paths the agent reads.
	Output []string `json:"output,omitempty"`
	// Omitted are the input paths, sorted, that at least one recorded call
	// did not send (a path first sent after the first call was omitted by
	// the calls before it); the others were sent by every call. It is kept
	// only when SendsRecorded.
	Omitted []string `json:"omitted,omitempty"`
	// SendsRecorded is true for a record begun by a version that keeps
	// Omitted from the agent's first call on: only then does Surface say
	// what the agent sends (toolschema.UsedSurface.Sends). A record written
	// before has it false and keeps being judged without Sends.
	SendsRecorded bool `json:"sends_recorded,omitempty"`
	// CheckedAgainst is the tool fingerprint the surface was last compared
	// with for fields the tool does not declare.
	CheckedAgainst string `json:"checked_against,omitempty"`
	// Notified are the fingerprint pairs ("old>new") already reported to
	// this agent, so an agent's drift is reported once, not per call.
	Notified []string `json:"notified,omitempty"`
}

// Surface is the record's used surface for the schema diff: the input
// paths, the output paths and, when the record keeps them
// (SendsRecorded), the types sent at each input path and whether every
// call sent it.
func (u *UsageRecord) Surface() toolschema.UsedSurface {
	in := make([]string, 0, len(u.Input))
	for p := range u.Input {
		in = append(in, p)
	}
	sort.Strings(in)
	s := toolschema.UsedSurface{Input: in, Output: slices.Clone(u.Output)}
	if u.SendsRecorded {
		s.Sends = make(map[string]toolschema.SentField, len(u.Input))
		for p, names := range u.Input {
			_, omitted := slices.BinarySearch(u.Omitted, p)
			s.Sends[p] = toolschema.SentField{Types: typeSetOf(names), Always: !omitted}
		}
	}
	return s
}

// InputTypes are the input paths with their observed types.
func (u *UsageRecord) InputTypes() map[string]toolschema.TypeSet {
	out := make(map[string]toolschema.TypeSet, len(u.Input))
	for p, names := range u.Input {
		var t toolschema.TypeSet
		for _, n := range names {
			if ts, err := toolschema.ParseType(n); err == nil {
				t |= ts
			}
		}
		out[p] = t
	}
	return out
}

func (u *UsageRecord) notified(pair string) bool { return slices.Contains(u.Notified, pair) }

func (u *UsageRecord) notify(pair string) {
	u.Notified = append(u.Notified, pair)
	if len(u.Notified) > maxNotified {
		u.Notified = u.Notified[len(u.Notified)-maxNotified:]
	}
}

// Contract is a tool's declared quality contract.
type Contract struct {
	Accuracy                float64 `json:"accuracy"`
	Determinism             string  `json:"determinism"`
	OutputSchemaHash        string  `json:"output_schema_hash,omitempty"`
	ExpectedInputSchemaHash string  `json:"expected_input_schema_hash,omitempty"`
	EventID                 string  `json:"event_id"`
	Seq                     uint64  `json:"seq"`
}

// QualityRecord is what composition verdicts know of a tool (bucket
// quality, key: tool): its declared contract and its measured outcomes as
// of the last quality checkpoint. Only the composition lane writes it, and
// only from recorded inputs (contracts, checkpoints), so that a replay of
// the stream in order reads what the live worker read.
type QualityRecord struct {
	ToolID   string    `json:"tool_id"`
	Contract *Contract `json:"contract,omitempty"`
	// Calls counts invocations with an outcome; Successes those that
	// succeeded (correct when the agent said so, else status ok), through
	// the invocation at stream sequence Through.
	Calls     int64  `json:"calls"`
	Successes int64  `json:"successes"`
	Through   uint64 `json:"through_sequence"`
	// Fingerprint, InputSchema and OutputSchema are the tool's observed
	// version as of the last checkpoint that carried one, for stage
	// compatibility where no contract names schema hashes.
	Fingerprint  string          `json:"fingerprint,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// OutcomeRecord is the tool lane's own record of a tool (bucket outcomes,
// key: tool): the outcomes it counted and the head of the tool's verdict
// chain. Every QualityEvery outcomes the lane publishes the counts as a
// quality checkpoint for the composition lane. No operator action deletes
// it (unlike a baseline or a usage record), so the chain survives
// `baseline reset`.
type OutcomeRecord struct {
	ToolID    string `json:"tool_id"`
	Calls     int64  `json:"calls"`
	Successes int64  `json:"successes"`
	// LastSeq is the stream sequence of the last invocation counted.
	LastSeq uint64 `json:"last_seq"`
	// Chain is the digest (events.VerdictDigest) of the last schema verdict
	// about the tool: the predecessor of the next one.
	Chain string `json:"chain,omitempty"`
	// ChainSeq is the stream sequence of the input whose verdict is the
	// chain head. A redelivery of that input (its other writes failed, or
	// its ack was lost) must not publish its verdicts again, linked to the
	// first copies (see redoWrites).
	ChainSeq uint64 `json:"chain_seq,omitempty"`
	// ObservedSeq is the stream sequence of the last schema observation of
	// the tool that published a verdict, stored with the chain head it
	// moved. (Versions before the baseline record counted repeats wrote
	// only this for an observation that repeated the current version; the
	// baseline record's LastSeq now has the last one applied.)
	ObservedSeq uint64 `json:"observed_seq,omitempty"`
	// Operator is the last operator action applied to the tool and its
	// result (operator.go): the command that published it waits for it
	// here, and no input of the tool at or below its sequence is applied
	// again.
	Operator *OperatorResult `json:"operator,omitempty"`
}

// LastVerdict is the composition verdict last published for a workflow.
type LastVerdict struct {
	Verdict         guards.CompositionVerdict `json:"verdict"`
	ComposedQuality float64                   `json:"composed_quality"`
	ManifestDigest  string                    `json:"manifest_digest"`
	EventID         string                    `json:"event_id"` // the input that produced it
}

// WorkflowRecord is a declared workflow and its last verdict (bucket
// workflows, key: composition).
type WorkflowRecord struct {
	CompositionID string          `json:"composition_id"`
	Workflow      json.RawMessage `json:"workflow"`
	Tools         []string        `json:"tools"`
	Last          *LastVerdict    `json:"last,omitempty"`
	// Pending says why no verdict could be computed yet ("" when one was).
	Pending string `json:"pending,omitempty"`
	// DeclaredSeq is the stream sequence of the declaration applied.
	DeclaredSeq uint64 `json:"declared_seq"`
	// Chain is the digest (events.VerdictDigest) of the last composition
	// verdict about the workflow: the predecessor of the next one.
	Chain string `json:"chain,omitempty"`
	// Observed counts the runs seen in traces (observed.go); a record may
	// hold only these, before the workflow is declared.
	Observed *ObservedRuns `json:"observed,omitempty"`
}

// Key is the KV key of a record: its ids (tool; tool and agent; or
// composition) each encoded as a token (events.KVKey) and joined by dots.
func Key(ids ...string) (string, error) { return events.KVKey(ids...) }
