package events

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Message is an event ready to publish to JetStream: publish Data on Subject
// with Header, and with jetstream.WithMsgID(ID) (Header already holds
// Nats-Msg-Id = ID), so that the stream's duplicate window drops a repeat.
type Message struct {
	Subject string
	ID      string
	Header  map[string][]string
	Data    []byte
	// Digest is Data's VerdictDigest when whoever built the message has
	// computed it (consumer/core does, for the chain link), so that the
	// signer does not compute it again (publisher.Signer.Sign); "" when
	// unknown. It is set on an unsigned verdict only, whoever changes Data
	// clears it, and it is not published.
	Digest string
}

// Meta are the CloudEvents attributes a producer chooses.
type Meta struct {
	// ID identifies the event; a retried publish must reuse it (NewID makes
	// one). Required.
	ID string
	// Source is a URI-reference naming the producer, e.g. "agents/billing-7".
	// Required.
	Source string
	// Time is when it happened; zero omits the attribute.
	Time time.Time
	// Extensions are extra attributes (names a-z0-9), e.g. traceparent.
	Extensions map[string]string
}

// NewID returns a random 128-bit event id in hex, for producers of telemetry.
// (Verdict ids are not random: see VerdictID.)
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// NewSchemaObserved builds an io.toolsentry.tool.schema.observed.v1 event:
// one tool (p.Tool set) on the tool's subject, or a tools/list result
// (p.Tool nil, p.Tools non-nil) on the server's subject. The CloudEvents
// subject attribute is the key.
func (n Names) NewSchemaObserved(meta Meta, p SchemaObserved) (Message, error) {
	key := p.ToolID
	if p.IsList() {
		key = p.Server
	}
	return n.Encode(meta.event(KindSchemaObserved, key, Event{SchemaObserved: &p}))
}

// NewInvocation builds an io.toolsentry.tool.invocation.v1 event on the
// tool's subject. Argument values are never sent: fill p.ArgumentTypes with
// FieldTypesOf(arguments).
func (n Names) NewInvocation(meta Meta, p Invocation) (Message, error) {
	return n.Encode(meta.event(KindInvocation, p.ToolID, Event{Invocation: &p}))
}

// NewContract builds an io.toolsentry.tool.contract.v1 event on the tool's
// subject.
func (n Names) NewContract(meta Meta, p Contract) (Message, error) {
	return n.Encode(meta.event(KindContract, p.ToolID, Event{Contract: &p}))
}

// NewWorkflow builds an io.toolsentry.workflow.declared.v1 event from a
// workflow object (JSON) on its composition's subject.
func (n Names) NewWorkflow(meta Meta, workflow []byte) (Message, error) {
	v, err := parseJSON(workflow)
	if err != nil {
		return Message{}, fmt.Errorf("%w: workflow: not JSON: %v", ErrBadEvent, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return Message{}, fmt.Errorf("%w: workflow: a JSON %s, not an object", ErrBadEvent, jsonKind(v))
	}
	raw, err := rawOf(obj)
	if err != nil {
		return Message{}, fmt.Errorf("%w: workflow: %v", ErrBadEvent, err)
	}
	id := str(obj, "composition_id")
	return n.Encode(meta.event(KindWorkflow, id, Event{Workflow: &Workflow{CompositionID: id, Raw: raw}}))
}

func (m Meta) event(kind Kind, key string, payload Event) Event {
	payload.Kind = kind
	payload.Type = kind.Type()
	payload.ID = m.ID
	payload.Source = m.Source
	payload.Time = m.Time
	payload.Subject = key
	payload.Extensions = m.Extensions
	return payload
}

// NewQualityCheckpoint builds an io.toolsentry.tool.quality.checkpoint.v1
// event on toolsentry.telemetry.quality.<tool>. Like a verdict, it is
// derived from an input, so its id is too (CheckpointID), its source is the
// prefix and its time inputTime: a redelivered invocation republishes the
// same checkpoint, which the stream drops.
func (n Names) NewQualityCheckpoint(p QualityCheckpoint, inputTime time.Time) (Message, error) {
	return n.Encode(Event{
		Kind:              KindQualityCheckpoint,
		ID:                CheckpointID(p.ToolID, p.ThroughSequence),
		Source:            n.Prefix(),
		Time:              inputTime,
		Subject:           p.ToolID,
		QualityCheckpoint: &p,
	})
}

// CheckpointID is the event id of a tool's checkpoint through a sequence:
// the first 128 bits of a SHA-256 over the length-prefixed fields, in hex.
func CheckpointID(toolID string, throughSeq uint64) string {
	return lengthPrefixedID("toolsentry.checkpoint.v1", toolID, strconv.FormatUint(throughSeq, 10))
}

func lengthPrefixedID(fields ...string) string {
	var buf [512]byte // the fields of a verdict id fit, hashed without allocating
	b := buf[:0]
	for _, s := range fields {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// DerivedID is the id of an event that a worker derives from an input
// (the tools of a tools/list, say): the first 128 bits of a SHA-256 over
// the input's id and the parts, length-prefixed, in hex. A redelivered input
// derives the same ids, so the stream's duplicate window drops the repeats.
func DerivedID(inputEventID string, parts ...string) string {
	return lengthPrefixedID(append([]string{"toolsentry.derived.v1", inputEventID}, parts...)...)
}

// VerdictID derives a verdict's event id from what the verdict is about: the
// guard (kind), the input event's id, the key, the agent ("" for none) and
// the manifest digest. A redelivered or replayed input yields the same id,
// so the verdict stream's duplicate window drops the repeat. It is the first
// 128 bits of a SHA-256 over the length-prefixed fields, in hex.
func VerdictID(kind Kind, inputEventID, key, agentID, manifestDigest string) string {
	return lengthPrefixedID("toolsentry.verdict.v1", kind.Token(), inputEventID, key, agentID, manifestDigest)
}

// NewSchemaVerdict builds an io.toolsentry.verdict.schema.v1 event on
// toolsentry.verdicts.schema.<verdict>.<tool>. Its id is VerdictID, its
// source the prefix, its subject attribute the tool id, and its time
// inputTime, the time of the input event (zero omits it): never the wall
// clock, so that a replay produces the same bytes. WithPrevious links it to
// the previous verdict of its chain (see ChainKey); the id does not depend
// on the link.
func (n Names) NewSchemaVerdict(v SchemaVerdict, inputTime time.Time, opts ...VerdictOption) (Message, error) {
	ev := Event{
		Kind:          KindSchemaVerdict,
		Type:          TypeSchemaVerdict,
		ID:            VerdictID(KindSchemaVerdict, v.InputEventID, v.ToolID, v.AgentID, v.ManifestDigest),
		Source:        n.Prefix(),
		Time:          inputTime,
		Subject:       v.ToolID,
		SchemaVerdict: &v,
	}
	if err := applyVerdictOptions(&ev, opts); err != nil {
		return Message{}, err
	}
	return n.Encode(ev)
}

// NewCompositionVerdict builds an io.toolsentry.verdict.composition.v1 event
// on toolsentry.verdicts.composition.<verdict>.<composition>; see
// NewSchemaVerdict for its attributes.
func (n Names) NewCompositionVerdict(v CompositionVerdict, inputTime time.Time, opts ...VerdictOption) (Message, error) {
	ev := Event{
		Kind:               KindCompositionVerdict,
		Type:               TypeCompositionVerdict,
		ID:                 VerdictID(KindCompositionVerdict, v.InputEventID, v.CompositionID, "", v.ManifestDigest),
		Source:             n.Prefix(),
		Time:               inputTime,
		Subject:            v.CompositionID,
		CompositionVerdict: &v,
	}
	if err := applyVerdictOptions(&ev, opts); err != nil {
		return Message{}, err
	}
	return n.Encode(ev)
}

// Encode writes ev as a structured-mode CloudEvent (JSON format) on the
// subject of its kind and key. ev.Kind names the payload, which must be the
// only one set; ev.Type must be empty or the kind's type; ev.Key is ignored
// (the payload says it). Encode checks its output with Decode and refuses,
// with ErrBadEvent, an event that Decode would reject; for every event that
// Decode returns, Encode then Decode gives it back. (A schema verdict or an
// invocation whose attributes and fields plainly pass Decode's checks is
// checked field by field instead of decoded: see plainSchemaVerdict and
// plainInvocation. An event is validated once, as it is built.)
func (n Names) Encode(ev Event) (Message, error) { return n.encode(ev, true) }

// encode is Encode; plain allows the field by field check of a schema
// verdict or an invocation instead of Decode, which the tests turn off to
// compare.
func (n Names) encode(ev Event, plain bool) (Message, error) {
	data, key, verdict, err := payloadData(ev)
	if err != nil {
		return Message{}, err
	}
	if ev.Type == "" {
		ev.Type = ev.Kind.Type()
	}
	var subject string
	if ev.Kind.Class() == ClassVerdicts {
		subject, err = n.Verdict(ev.Kind, verdict, key)
	} else {
		subject, err = n.Telemetry(ev.Kind, key)
	}
	if err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrBadEvent, ev.Kind, err)
	}
	body := make([]byte, 0, 256+len(data))
	body = append(body, `{"specversion":"1.0","id":`...)
	body = appendJSONString(body, ev.ID)
	body = append(body, `,"source":`...)
	body = appendJSONString(body, ev.Source)
	body = append(body, `,"type":`...)
	body = appendJSONString(body, ev.Type)
	if ev.Subject != "" {
		body = append(body, `,"subject":`...)
		body = appendJSONString(body, ev.Subject)
	}
	if !ev.Time.IsZero() {
		body = append(body, `,"time":"`...)
		body = ev.Time.UTC().AppendFormat(body, time.RFC3339Nano)
		body = append(body, '"')
	}
	if ev.DataSchema != "" {
		body = append(body, `,"dataschema":`...)
		body = appendJSONString(body, ev.DataSchema)
	}
	body = append(body, `,"datacontenttype":"application/json"`...)
	names := make([]string, 0, len(ev.Extensions))
	for name := range ev.Extensions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		body = append(body, ',')
		body = appendJSONString(body, name)
		body = append(body, ':')
		body = appendJSONString(body, ev.Extensions[name])
	}
	body = append(body, `,"data":`...)
	body = append(body, data...)
	body = append(body, '}')
	msg := Message{
		Subject: subject,
		ID:      ev.ID,
		Header:  map[string][]string{HeaderMsgID: {ev.ID}, HeaderContentType: {ContentTypeStructured}},
		Data:    body,
	}
	if plain && (plainSchemaVerdict(&ev) || plainInvocation(&ev)) {
		return msg, nil
	}
	if _, err := n.Decode(msg.Subject, msg.Header, msg.Data); err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrBadEvent, ev.Kind, err)
	}
	return msg, nil
}

// payloadData marshals the one payload of ev and returns it with its key and
// verdict.
func payloadData(ev Event) (data []byte, key, verdict string, err error) {
	set := 0
	for _, p := range []bool{ev.SchemaObserved != nil, ev.Invocation != nil, ev.Contract != nil, ev.Workflow != nil, ev.QualityCheckpoint != nil, ev.WorkflowObserved != nil, ev.SchemaVerdict != nil, ev.CompositionVerdict != nil, ev.Operator != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		return nil, "", "", fmt.Errorf("%w: %d payloads set, want exactly one", ErrBadEvent, set)
	}
	var v any
	switch {
	case ev.Kind == KindSchemaObserved && ev.SchemaObserved != nil:
		p := ev.SchemaObserved
		if p.IsList() {
			if p.Tools == nil {
				return nil, "", "", fmt.Errorf("%w: schema observation without Tool or Tools", ErrBadEvent)
			}
			list := map[string]any{"tools": p.Tools}
			if p.NextCursor != "" {
				list["nextCursor"] = p.NextCursor
			}
			v, key = map[string]any{"tools": list, "server": p.Server}, p.Server
		} else {
			if p.Tools != nil {
				return nil, "", "", fmt.Errorf("%w: schema observation with both Tool and Tools", ErrBadEvent)
			}
			m := map[string]any{"tool_id": p.ToolID, "version": p.Version, "tool": p.Tool}
			if p.Server != "" {
				m["server"] = p.Server
			}
			v, key = m, p.ToolID
		}
	case ev.Kind == KindInvocation && ev.Invocation != nil:
		key = ev.Invocation.ToolID
		var ok bool
		if data, ok = ev.Invocation.appendJSON(make([]byte, 0, 512)); !ok {
			v = ev.Invocation // marshalJSON gives the error
		}
	case ev.Kind == KindContract && ev.Contract != nil:
		v, key = ev.Contract, ev.Contract.ToolID
	case ev.Kind == KindQualityCheckpoint && ev.QualityCheckpoint != nil:
		v, key = ev.QualityCheckpoint, ev.QualityCheckpoint.ToolID
	case ev.Kind == KindWorkflow && ev.Workflow != nil:
		data, key = ev.Workflow.Raw, ev.Workflow.CompositionID
	case ev.Kind == KindSchemaVerdict && ev.SchemaVerdict != nil:
		sv := ev.SchemaVerdict
		if data, err = sv.appendJSON(make([]byte, 0, 512+len(sv.Changes)+len(sv.Affected)+len(sv.Migration))); err != nil {
			return nil, "", "", fmt.Errorf("%w: %s: %v", ErrBadEvent, ev.Kind, err)
		}
		key, verdict = sv.ToolID, string(sv.Verdict)
	case ev.Kind == KindCompositionVerdict && ev.CompositionVerdict != nil:
		v, key, verdict = ev.CompositionVerdict, ev.CompositionVerdict.CompositionID, string(ev.CompositionVerdict.Verdict)
	case ev.Kind == KindWorkflowObserved && ev.WorkflowObserved != nil:
		v, key = ev.WorkflowObserved, ev.WorkflowObserved.CompositionID
	case ev.Kind.Operator() && ev.Operator != nil:
		if err := ev.Operator.check(ev.Kind); err != nil {
			return nil, "", "", err
		}
		v, key = ev.Operator, ev.Operator.ToolID
	default:
		return nil, "", "", fmt.Errorf("%w: kind %s with another kind's payload", ErrBadEvent, ev.Kind)
	}
	if v != nil {
		if data, err = marshalJSON(v); err != nil {
			return nil, "", "", fmt.Errorf("%w: %s: %v", ErrBadEvent, ev.Kind, err)
		}
	}
	return data, key, verdict, nil // Encode's Decode refuses data that is not JSON
}
