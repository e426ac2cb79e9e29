package agent

// This file follows the tools' schema state (bucket toolsentry-baselines,
// written by each tool's lane) so that Guard judges a payload against the
// tool's current input schema, from memory.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards/toolschema"
	"github.com/toolsentry/toolsentry/schemas"
)

// ToolState is what a guard reads of a tool's baseline record (bucket
// toolsentry-baselines, key: the tool; consumer/core.BaselineRecord is the
// record the tool's lane writes): the version agents are judged against and
// the version the tool presents now.
type ToolState struct {
	ToolID   string      `json:"tool_id"`
	Baseline ToolVersion `json:"baseline"`
	Current  ToolVersion `json:"current"`
	// Held is true while the baseline is held on a drift that touches
	// fields agents use.
	Held bool `json:"held"`
}

// ToolVersion is one version of a tool: its fingerprint and its MCP Tool
// object (descriptions and schemas).
type ToolVersion struct {
	Fingerprint string          `json:"fingerprint"`
	Version     string          `json:"version"`
	Tool        json.RawMessage `json:"tool"`
}

// InputSchema is the version's inputSchema; nil when the Tool has none.
func (v ToolVersion) InputSchema() json.RawMessage {
	var t struct {
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if json.Unmarshal(v.Tool, &t) != nil {
		return nil
	}
	return t.InputSchema
}

// DecodeToolState reads a value of the baselines bucket.
func DecodeToolState(data []byte) (ToolState, error) {
	var s ToolState
	if err := json.Unmarshal(data, &s); err != nil {
		return ToolState{}, fmt.Errorf("decoding a tool's baseline record: %w", err)
	}
	if s.ToolID == "" {
		return ToolState{}, errors.New("decoding a tool's baseline record: no tool_id")
	}
	return s, nil
}

// toolEntry is one tool's state in the view, with its current version
// parsed and its input schema compiled on first use.
type toolEntry struct {
	state ToolState
	known []string // fingerprints of the record's recent versions

	once     sync.Once
	def      toolschema.ToolDefinition
	compiled *schemas.Schema
	err      error
}

func (e *toolEntry) load() error {
	e.once.Do(func() {
		defs, err := toolschema.ParseToolDocument(e.state.Current.Tool)
		switch {
		case err != nil:
			e.err = err
			return
		case len(defs) != 1:
			e.err = fmt.Errorf("tool %s at %s: %d tools in one version", e.state.ToolID, e.state.Current.Fingerprint, len(defs))
			return
		}
		e.def = defs[0]
		in := e.state.Current.InputSchema()
		if len(in) == 0 {
			e.err = fmt.Errorf("tool %s at %s has no inputSchema", e.state.ToolID, e.state.Current.Fingerprint)
			return
		}
		e.compiled, e.err = schemas.Compile("tool "+e.state.ToolID+" at "+short(e.state.Current.Fingerprint), in)
	})
	return e.err
}

// fits reports whether payload (one JSON value) fits the tool's current
// input schema: every path it sends is declared with a type that accepts
// its value (toolschema.InputDeviations, the check the core runs on the
// agent's recorded surface), and it validates as JSON Schema. The error
// names paths and keywords, never values. load must have succeeded.
func (e *toolEntry) fits(payload json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	types, err := events.FieldTypesOf(payload)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	dev, err := toolschema.InputDeviations(e.def.Input, types)
	if err != nil {
		return err
	}
	if len(dev) > 0 {
		return fmt.Errorf("it sends %s, which the tool does not declare with that type", strings.Join(dev, ", "))
	}
	return e.compiled.Conforms(v)
}

// judges reports whether the tool's current version is the one to judge a
// payload by under a directive about version fp: it is that version, or fp
// is an older version the tool has moved on from. A directive about a
// version the view has not seen yet (its watch of the baselines bucket is
// behind the directives') is not judged by an older schema.
func (e *toolEntry) judges(fp string) bool {
	return fp == "" || fp == e.state.Current.Fingerprint || fp == e.state.Baseline.Fingerprint || slices.Contains(e.known, fp)
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// toolView is a local copy of the baselines bucket, by tool id, kept
// current by a KV watch.
type toolView = kvIndex[*toolEntry]

// watchTools starts following the baselines bucket of names on js until
// ctx ends. Its ready channel closes once the bucket's current values are
// loaded; done closes when the watch ends.
func watchTools(ctx context.Context, js jetstream.JetStream, names events.Names) (*toolView, error) {
	kv, err := js.KeyValue(ctx, names.BaselinesBucket())
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s (has `toolsentry serve` run with this prefix?): %w", names.BaselinesBucket(), err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watching bucket %s: %w", names.BaselinesBucket(), err)
	}
	return followKV(ctx, w, decodeToolEntry), nil
}

// decodeToolEntry reads a baseline record. An unreadable record leaves the
// tool unknown: its directives then apply as they are.
func decodeToolEntry(e jetstream.KeyValueEntry) (string, *toolEntry, bool) {
	s, err := DecodeToolState(e.Value())
	if err != nil {
		return "", nil, false
	}
	var k struct {
		Known []struct {
			Fingerprint string `json:"fingerprint"`
		} `json:"known"`
	}
	_ = json.Unmarshal(e.Value(), &k)
	entry := &toolEntry{state: s}
	for _, v := range k.Known {
		entry.known = append(entry.known, v.Fingerprint)
	}
	return s.ToolID, entry, true
}
