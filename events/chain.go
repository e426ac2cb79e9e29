package events

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The extension attributes of signed, chained verdicts.
//
// AttrSignature follows the CloudEvents verifiability extension
// (cloudevents/spec, cloudevents/extensions/verifiability.md, "Verifiable
// CloudEvents with DSSE"): its value is a DSSE v1.0.2 JSON envelope in
// standard Base64, whose signatures carry a keyid and an ed25519 signature
// over DSSE's pre-authentication encoding of the payload (package publisher
// writes and checks it). toolsentry deviates from that proposal in one
// point, and says so with its own DSSE payloadType: the proposal's payload
// is a digest over the core attributes and the data only, and leaves
// extension attributes unverified; the chain attribute is an extension, and
// a signature that did not cover it would let anyone who can delete a
// verdict re-link its successor. toolsentry's payload is therefore the
// VerdictDigest (raw 32 bytes), which covers every attribute but the
// signature itself, extensions included. A consumer that implements the
// proposal sees an unknown payloadType and refuses to call the event
// verified instead of wrongly accepting it.
//
// AttrPrevious is the chain link: the VerdictDigest of the previous verdict
// of the same chain (ChainKey), absent on the first verdict of a chain. The
// name is the one EventSourcingDB gives the same link on its CloudEvents.
const (
	AttrSignature = "dssematerial"
	AttrPrevious  = "predecessorhash"
)

// DigestPrefix starts every VerdictDigest: the algorithm, then 64 lower-case
// hex digits.
const DigestPrefix = "sha256:"

// VerdictDigest returns the digest of a structured-mode verdict (the body
// of a verdict message, as the constructors write it): SHA-256 over the RFC
// 8785 (JCS) canonical form of the event's JSON object without its
// AttrSignature member (so every attribute, AttrPrevious and other
// extensions included, and the data), as "sha256:<64 hex digits>". Member
// order, white space, string escapes and number spelling do not change it;
// any change of a value does.
//
// The body must be one JSON object with a specversion member, in UTF-8,
// without repeated member names (errors wrap ErrNotCloudEvent or
// ErrSpecViolation). A binary-mode message has no such body: toolsentry
// writes verdicts in structured mode only. JCS reads numbers as IEEE
// doubles, so integers beyond 2^53 (none in a verdict's data: sequences and
// counts stay far below) would be rounded in the canonical form.
func VerdictDigest(data []byte) (string, error) {
	link, err := ReadChainLink(data)
	return link.Digest, err
}

// ChainLink is what the chain and the signature need of a structured-mode
// verdict body, read in one pass.
type ChainLink struct {
	// Digest is the verdict's VerdictDigest.
	Digest string
	// Previous is its AttrPrevious ("" when absent): the digest it names as
	// its predecessor.
	Previous string
	// Signature is its AttrSignature ("" when absent).
	Signature string
}

// ReadChainLink parses a structured-mode verdict body and returns its
// digest and its chain and signature attributes; see VerdictDigest for the
// body it accepts. An attribute that is present but not a string is
// returned as "" for Signature and makes an error for Previous (wrapping
// ErrSpecViolation): neither is ever written in another form.
func ReadChainLink(data []byte) (ChainLink, error) {
	if link, ok := readChainLinkFast(data); ok {
		return link, nil
	}
	return readChainLink(data)
}

// readChainLink is ReadChainLink for any body: parsed, then canonicalised.
func readChainLink(data []byte) (ChainLink, error) {
	v, err := parseJSON(data)
	if err != nil {
		var dup *pathError
		if errors.As(err, &dup) {
			return ChainLink{}, fmt.Errorf("%w: structured mode: %v", ErrSpecViolation, err)
		}
		return ChainLink{}, fmt.Errorf("%w: structured mode: the body is not JSON: %v", ErrNotCloudEvent, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return ChainLink{}, fmt.Errorf("%w: structured mode: the body is a JSON %s, not an object", ErrNotCloudEvent, jsonKind(v))
	}
	if _, ok := obj["specversion"]; !ok {
		return ChainLink{}, fmt.Errorf("%w: structured mode: attribute specversion missing", ErrNotCloudEvent)
	}
	var link ChainLink
	if p, ok := obj[AttrPrevious]; ok && p != nil {
		if link.Previous, ok = p.(string); !ok {
			return ChainLink{}, fmt.Errorf("%w: attribute %s: want a string, got %s", ErrSpecViolation, AttrPrevious, jsonKind(p))
		}
	}
	// Without a signature member the body itself is canonicalised; with
	// one, the object without it.
	skip := ""
	if sig, ok := obj[AttrSignature]; ok {
		link.Signature, _ = sig.(string)
		skip = AttrSignature
	}
	canon, err := canonicalize(data, skip)
	if err != nil {
		return ChainLink{}, fmt.Errorf("%w: canonical form (RFC 8785): %v", ErrSpecViolation, err)
	}
	sum := sha256.Sum256(canon)
	link.Digest = DigestPrefix + hex.EncodeToString(sum[:])
	return link, nil
}

// ValidDigest reports whether s is written as VerdictDigest writes digests:
// "sha256:" and 64 lower-case hex digits.
func ValidDigest(s string) bool {
	h, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ChainKey names the chain a verdict belongs to: the verdict's guard (the
// kind's subject token, "schema" or "composition") and its key (the tool
// or composition id), joined by '/': "schema/crm.lookup",
// "composition/checkout". The guard comes first and holds no '/', so a
// tool and a composition with the same id never share a chain, and the key
// may be any string. All schema verdicts about one tool, whatever the
// agent, form one chain, in the order the worker produced them (the order of
// the tool's lane). For a kind that is not a verdict, ChainKey returns "".
func ChainKey(kind Kind, key string) string {
	if kind.Class() != ClassVerdicts {
		return ""
	}
	return kind.Token() + "/" + key
}

// ChainKey returns the chain of a decoded verdict ("" for other events).
func (ev Event) ChainKey() string { return ChainKey(ev.Kind, ev.Key) }

// VerdictOption adds to a verdict that NewSchemaVerdict or
// NewCompositionVerdict builds.
type VerdictOption func(*verdictOptions)

type verdictOptions struct {
	previous string
}

// WithPrevious links the verdict to the previous verdict of its chain:
// digest is that verdict's VerdictDigest, written as AttrPrevious. An empty
// digest leaves the attribute out: the first verdict of a chain. A digest
// not in VerdictDigest's form makes the constructor fail with ErrBadEvent.
func WithPrevious(digest string) VerdictOption {
	return func(o *verdictOptions) { o.previous = digest }
}

// applyVerdictOptions sets the options' attributes on a verdict event.
func applyVerdictOptions(ev *Event, opts []VerdictOption) error {
	var o verdictOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.previous == "" {
		return nil
	}
	if !ValidDigest(o.previous) {
		return fmt.Errorf("%w: %s: previous verdict digest %q: want sha256: and 64 lower-case hex digits", ErrBadEvent, ev.Kind, o.previous)
	}
	ev.Extensions = map[string]string{AttrPrevious: o.previous}
	return nil
}
