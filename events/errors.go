package events

import "errors"

// The decoding errors. Every error that Decode returns wraps exactly one of
// them (match with errors.Is) and names the attribute, header or field at
// fault; ReasonFor maps them to a dead-letter reason. None of them is worth
// a retry: the same bytes fail the same way.
var (
	// ErrNotCloudEvent is returned when a message is not a CloudEvent at
	// all: no ce- headers and a body that is not a JSON object with a
	// specversion member.
	ErrNotCloudEvent = errors.New("not a CloudEvent")

	// ErrSpecViolation is returned when a message is a CloudEvent but breaks
	// CloudEvents 1.0 or its JSON format or NATS binding: a required
	// attribute (id, source, specversion, type) missing or empty, a
	// specversion other than 1.0, an attribute name outside a-z0-9, an
	// attribute given twice, both data and data_base64, an invalid time, a
	// source that is not a URI-reference, a badly percent-encoded header, a
	// datacontenttype that is not JSON (our types carry JSON data), a JSON
	// object with a repeated member name.
	ErrSpecViolation = errors.New("CloudEvents spec violation")

	// ErrUnknownType is returned when the CloudEvent's type is not one of
	// toolsentry's types (Type* constants), e.g. an unknown version.
	ErrUnknownType = errors.New("unknown event type")

	// ErrSchemaInvalid is returned when an event's data is missing, is not
	// JSON, or does not match the JSON Schema of its type (package schemas),
	// or holds a value the Go payload cannot represent (a number out of
	// range, a repeated tool name, more argument fields than
	// MaxArgumentFields).
	ErrSchemaInvalid = errors.New("data does not match its schema")

	// ErrSubjectMismatch is returned when a well-formed event disagrees with
	// the NATS subject it arrived on: its type is not the subject's kind,
	// the subject's key is not the payload's tool_id, server or
	// composition_id, the CloudEvent subject attribute is not the key, or a
	// verdict subject names another verdict than the payload.
	ErrSubjectMismatch = errors.New("event does not match its subject")

	// ErrBadSubject is returned when a NATS subject is not one of
	// toolsentry's: another prefix, an unknown kind or guard, a wrong number
	// of tokens, or a key token that is not in canonical encoding.
	ErrBadSubject = errors.New("not a toolsentry subject")

	// ErrBadKey is returned by KeyToken and KVKey for a key that cannot be
	// encoded (empty, not UTF-8, longer than MaxKeyLen bytes) and by
	// KeyFromToken and ParseKVKey for a token that is not an encoding.
	ErrBadKey = errors.New("bad key")

	// ErrBadEvent is returned by Encode and the constructors for an event
	// they refuse to produce: one that Decode would reject.
	ErrBadEvent = errors.New("bad event")
)
