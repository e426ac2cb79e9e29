package events

// Decode's fast path for schema verdicts, which the directives projector
// reads one by one: most are SCHEMA_MATCH, in the form toolsentry writes
// them. The reader checks the data against verdict.schema.v1 as it goes and
// builds the SchemaVerdict that schemaVerdictOf would; what it is not sure
// of (an unknown or repeated member, a null where a string goes, an input
// sequence written as 7.0) it leaves to the generic path, which then says
// what is wrong. TestDecodeSchemaVerdictFastPath and FuzzDecodeFastPath
// hold both paths to the same results.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/toolsentry/toolsentry/guards"
)

// The members of schema verdict data, one bit each.
const (
	svVerdict uint32 = 1 << iota
	svDirective
	svAction
	svSummary
	svManifestDigest
	svToolID
	svAgentID
	svVersion
	svBaselineFingerprint
	svCurrentFingerprint
	svChanges
	svAffected
	svMigration
	svGuardVersion
	svInputEventID
	svInputSubject
	svInputSequence

	// svRequired is every member but agent_id, action and summary.
	svRequired = (svInputSequence<<1 - 1) &^ (svAgentID | svAction | svSummary)
)

func schemaVerdictMember(name string) uint32 {
	switch name {
	case "verdict":
		return svVerdict
	case "directive":
		return svDirective
	case "action":
		return svAction
	case "summary":
		return svSummary
	case "manifest_digest":
		return svManifestDigest
	case "tool_id":
		return svToolID
	case "agent_id":
		return svAgentID
	case "version":
		return svVersion
	case "baseline_fingerprint":
		return svBaselineFingerprint
	case "current_fingerprint":
		return svCurrentFingerprint
	case "changes":
		return svChanges
	case "affected":
		return svAffected
	case "migration":
		return svMigration
	case "guard_version":
		return svGuardVersion
	case "input_event_id":
		return svInputEventID
	case "input_subject":
		return svInputSubject
	case "input_sequence":
		return svInputSequence
	}
	return 0
}

// schemaVerdict reads schema verdict data at p.i into a SchemaVerdict, as
// parseJSON, schemas.Validate and schemaVerdictOf would together, and
// reports true; or reports false, with p.i anywhere, if one of them would
// fail or the data holds a form this reader leaves to them.
func (p *parser) schemaVerdict() (*SchemaVerdict, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, false
	}
	p.i++
	v := new(SchemaVerdict)
	var seen uint32
	p.skipSpace()
	for {
		name, ok := p.memberName()
		if !ok {
			return nil, false
		}
		bit := schemaVerdictMember(name)
		if bit == 0 || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
		ok = true
		switch bit {
		case svVerdict:
			var s string
			s, ok = p.text(1, 64)
			ok = ok && plainVerdictName(s)
			v.Verdict = guards.SchemaVerdict(s)
		case svDirective:
			v.Directive, ok = p.text(1, -1)
		case svAction:
			var s string
			s, ok = p.text(1, 16)
			v.Action = guards.Action(s)
			ok = ok && v.Action.Valid()
		case svSummary:
			v.Summary, ok = p.text(1, MaxSummaryLen)
		case svManifestDigest:
			v.ManifestDigest, ok = p.text(64, 64)
			ok = ok && lowerHex64(v.ManifestDigest)
		case svToolID:
			v.ToolID, ok = p.text(1, 128)
		case svAgentID:
			v.AgentID, ok = p.text(1, 128)
		case svVersion:
			v.Version, ok = p.text(0, 128)
		case svBaselineFingerprint:
			v.BaselineFingerprint, ok = p.text(0, 256)
		case svCurrentFingerprint:
			v.CurrentFingerprint, ok = p.text(0, 256)
		case svChanges:
			v.Changes, ok = p.rawValue('[')
		case svAffected:
			v.Affected, ok = p.rawValue('[')
		case svMigration:
			v.Migration, ok = p.rawValue('{', '[')
		case svGuardVersion:
			v.GuardVersion, ok = p.text(1, 128)
		case svInputEventID:
			v.InputEventID, ok = p.text(1, -1)
		case svInputSubject:
			v.InputSubject, ok = p.text(1, -1)
		case svInputSequence:
			v.InputSequence, ok = p.digits()
		}
		if !ok {
			return nil, false
		}
		more, ok := p.afterItem('}')
		if !ok {
			return nil, false
		}
		if !more {
			break
		}
	}
	if seen&svRequired != svRequired {
		return nil, false
	}
	return v, true
}

// text reads a string of min to max code points (max < 0: no bound), as
// JSON Schema's minLength and maxLength count them; a clone, as str makes
// it.
func (p *parser) text(min, max int) (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	s, err := p.str()
	if err != nil || !textLen(s, min, max) {
		return "", false
	}
	return strings.Clone(s), true
}

// rawValue reads null (nil) or a value that starts with one of the bytes
// open, written back as rawOf writes the generic path's tree of it.
func (p *parser) rawValue(open ...byte) (json.RawMessage, bool) {
	if p.i >= len(p.b) {
		return nil, false
	}
	if p.b[p.i] == 'n' {
		return nil, p.literal("null") == nil
	}
	if bytes.IndexByte(open, p.b[p.i]) < 0 {
		return nil, false
	}
	v, err := p.value(-1)
	if err != nil {
		return nil, false
	}
	if a, ok := v.([]any); ok && len(a) == 0 {
		return json.RawMessage("[]"), true
	}
	raw, err := rawOf(v)
	return raw, err == nil
}

// digits reads a non-negative integer written in digits only that fits in
// 64 bits; other numbers that the schema allows (7.0, 7e0) are left to the
// generic path.
func (p *parser) digits() (uint64, bool) {
	if p.i >= len(p.b) || p.b[p.i] < '0' || p.b[p.i] > '9' {
		return 0, false // scanNumber wants a number's first byte
	}
	start := p.i
	if p.scanNumber() != nil || p.i-start > maxNumberLen {
		return 0, false
	}
	lit := p.s[start:p.i]
	for i := 0; i < len(lit); i++ {
		if lit[i] < '0' || lit[i] > '9' {
			return 0, false
		}
	}
	u, err := strconv.ParseUint(lit, 10, 64)
	return u, err == nil
}
