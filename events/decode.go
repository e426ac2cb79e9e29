package events

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/schemas"
)

// Decode decodes a message that arrived on subject (with the default prefix);
// see Names.Decode.
func Decode(subject string, header map[string][]string, body []byte) (Event, error) {
	return Names{}.Decode(subject, header, body)
}

// Decode decodes one NATS message (its subject, headers and body) into an
// Event. header is a nats.Header, an http.Header or any map of header names
// to values; names are matched case-insensitively.
//
// The content mode follows the NATS protocol binding: a Content-Type of
// application/cloudevents+json means structured mode; otherwise any ce-
// header means binary mode (attributes in ce- headers, percent-decoded;
// data in the body; datacontenttype in ce-datacontenttype or Content-Type);
// otherwise the body must be a structured-mode event (a JSON object with
// specversion).
//
// The event must be valid CloudEvents 1.0, of one of toolsentry's types, the
// type of the subject's kind, with JSON data that matches the type's JSON
// Schema and a payload whose key is the subject's key. Errors wrap one of
// ErrBadSubject, ErrNotCloudEvent, ErrSpecViolation, ErrUnknownType,
// ErrSchemaInvalid and ErrSubjectMismatch, and name the attribute, header or
// field at fault.
//
// Decode keeps no argument values of an invocation, and no reference to
// the body.
func (n Names) Decode(subject string, header map[string][]string, body []byte) (Event, error) {
	return n.decode(subject, header, body, true)
}

// decode is Decode, with or without the fast path for invocations (see
// invocation.go); the tests compare the two.
func (n Names) decode(subject string, header map[string][]string, body []byte, fast bool) (Event, error) {
	addr, err := n.ParseSubject(subject)
	if err != nil {
		return Event{}, err
	}
	if addr.Class == ClassDeadLetter {
		return Event{}, fmt.Errorf("%w: %q is a dead-letter subject: decode the message with its %s", ErrBadSubject, subject, HeaderOriginalSubject)
	}
	fastKind := KindUnknown
	if fast {
		fastKind = addr.Kind
	}
	env, err := readEnvelope(header, body, fastKind)
	if err != nil {
		return Event{}, err
	}
	ev, err := env.attributes()
	if err != nil {
		return Event{}, err
	}
	ev.Kind = KindOfType(ev.Type)
	if ev.Kind == KindUnknown {
		return Event{}, fmt.Errorf("%w: type %q", ErrUnknownType, ev.Type)
	}
	if ev.Kind != addr.Kind {
		return Event{}, fmt.Errorf("%w: type %q does not belong on subject %q", ErrSubjectMismatch, ev.Type, subject)
	}
	if !env.hasData {
		return Event{}, fmt.Errorf("%w: %s: the event has no data", ErrSchemaInvalid, ev.Kind.Schema())
	}
	var key, verdict string
	switch {
	case env.inv != nil:
		// The data was read as the subject's kind, an invocation, checked
		// against its schema on the way; the type is that kind (see above).
		ev.Invocation, key = env.inv, env.inv.ToolID
	case env.sv != nil: // likewise, a schema verdict
		ev.SchemaVerdict, key, verdict = env.sv, env.sv.ToolID, string(env.sv.Verdict)
	default:
		if ev.Kind != KindSchemaObserved || !plainSchemaObserved(env.data) { // else valid at a glance
			if err := schemas.Validate(ev.Kind.Schema(), env.data); err != nil {
				return Event{}, fmt.Errorf("%w: %v", ErrSchemaInvalid, strings.TrimPrefix(err.Error(), schemas.ErrInvalid.Error()+": "))
			}
		}
		if key, verdict, err = ev.setPayload(env.data, env.args); err != nil {
			return Event{}, err
		}
	}
	if key != addr.Key {
		return Event{}, fmt.Errorf("%w: the payload's key %q is not the subject's key %q (subject %q)", ErrSubjectMismatch, key, addr.Key, subject)
	}
	if verdict != addr.Verdict {
		return Event{}, fmt.Errorf("%w: the payload's verdict %q is not the subject's %q (subject %q)", ErrSubjectMismatch, verdict, addr.Verdict, subject)
	}
	if ev.Subject != "" && ev.Subject != key {
		return Event{}, fmt.Errorf("%w: attribute subject %q is not the subject's key %q", ErrSubjectMismatch, ev.Subject, key)
	}
	ev.Key = key
	return ev, nil
}

// envelope is a CloudEvent before its attributes are checked: every
// attribute in canonical string form, and the data as a decoded JSON value,
// or, when the fast path read it, as an Invocation.
type envelope struct {
	attrs   attrSet
	data    any
	hasData bool
	args    FieldTypes  // the summary of data.arguments, if the data has them
	inv     *Invocation // the data, valid, if read by the fast path (then data and args are nil)
	sv      *SchemaVerdict
}

const (
	ceHeaderPrefix  = "ce-"
	mediaStructured = "application/cloudevents+json"
)

// readEnvelope reads a message's attributes and data. The data of kind (the
// subject's; KindUnknown for none) may be read by a fast path: invocations
// have one, and structured-mode schema verdicts.
func readEnvelope(header map[string][]string, body []byte, kind Kind) (envelope, error) {
	var ctBuf [1]string // no allocation for the one Content-Type value allowed
	contentType := ctBuf[:0]
	binary := false
	for name, values := range header {
		if strings.EqualFold(name, HeaderContentType) {
			contentType = append(contentType, values...)
		} else if len(name) > len(ceHeaderPrefix) && strings.EqualFold(name[:len(ceHeaderPrefix)], ceHeaderPrefix) {
			binary = true
		}
	}
	if len(contentType) > 1 {
		return envelope{}, fmt.Errorf("%w: header Content-Type given %d times", ErrSpecViolation, len(contentType))
	}
	if len(contentType) == 1 {
		if mt := mediaType(contentType[0]); strings.HasPrefix(mt, "application/cloudevents") {
			if mt != mediaStructured {
				return envelope{}, fmt.Errorf("%w: header Content-Type %q: only the JSON event format (%s) is supported", ErrSpecViolation, contentType[0], mediaStructured)
			}
			return readStructured(body, true, kind)
		}
	}
	if binary {
		return readBinary(header, contentType, body, kind)
	}
	return readStructured(body, false, kind)
}

// mediaType returns the media type of a Content-Type value, in lower case,
// without parameters (and without mime.ParseMediaType's allocations: this
// runs for every message).
func mediaType(v string) string {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(strings.TrimSpace(v))
}

// readStructured reads a structured-mode event. declared says whether the
// Content-Type said so; without it, a body that is not a JSON object with a
// specversion is not a CloudEvent at all. An invocation's body is read in
// one pass if readStructuredFast can, and so is a schema verdict's.
func readStructured(body []byte, declared bool, kind Kind) (envelope, error) {
	if kind == KindInvocation || kind == KindSchemaVerdict {
		if env, ok := readStructuredFast(body, kind); ok {
			return env, nil
		}
	}
	notCE := ErrNotCloudEvent
	if declared {
		notCE = ErrSpecViolation
	}
	v, args, err := parseJSONSummarizing(body, structuredArguments)
	var dup *pathError
	var argErr *argumentsError
	switch {
	case errors.As(err, &dup):
		if strings.HasPrefix(dup.pointer(), "/data/") {
			return envelope{}, fmt.Errorf("%w: data: %v", ErrSchemaInvalid, dup)
		}
		return envelope{}, fmt.Errorf("%w: structured mode: %v", ErrSpecViolation, dup)
	case errors.As(err, &argErr):
		return envelope{}, fmt.Errorf("%w: arguments: %v", ErrSchemaInvalid, argErr)
	case err != nil:
		return envelope{}, fmt.Errorf("%w: structured mode: the body is not JSON: %v", notCE, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return envelope{}, fmt.Errorf("%w: structured mode: the body is a JSON %s, not an object", notCE, jsonKind(v))
	}
	if sv, ok := obj["specversion"]; !ok || sv == nil {
		return envelope{}, fmt.Errorf("%w: structured mode: attribute specversion missing", notCE)
	}
	env := envelope{args: args}
	data, hasData := obj["data"]
	b64, hasB64 := obj["data_base64"]
	if hasB64 && b64 == nil {
		hasB64 = false
	}
	switch {
	case hasData && hasB64:
		return envelope{}, fmt.Errorf("%w: both data and data_base64 are present", ErrSpecViolation)
	case hasData:
		env.data, env.hasData = data, true
	case hasB64:
		s, ok := b64.(string)
		if !ok {
			return envelope{}, fmt.Errorf("%w: data_base64: want a string, got %s", ErrSpecViolation, jsonKind(b64))
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return envelope{}, fmt.Errorf("%w: data_base64: not base64: %v", ErrSpecViolation, err)
		}
		if err := env.readData(raw, kind); err != nil {
			return envelope{}, err
		}
	}
	for name, val := range obj {
		if name == "data" || name == "data_base64" {
			continue
		}
		if !validAttrName(name) {
			return envelope{}, fmt.Errorf("%w: attribute name %q: want a-z 0-9 only", ErrSpecViolation, name)
		}
		if val == nil {
			continue // null means unset
		}
		s, err := attrString(name, val)
		if err != nil {
			return envelope{}, err
		}
		env.attrs.set(strings.Clone(name), strings.Clone(s)) // see str
	}
	return env, nil
}

// Where the arguments of an invocation are, in a structured-mode body and in
// data: the parser summarises them instead of decoding them.
var (
	structuredArguments = []string{"data", "arguments"}
	dataArguments       = []string{"arguments"}
)

// readData reads binary-mode data (or decoded data_base64) of kind, the
// subject's: an invocation's by the fast path if it can (see invocation.go),
// else by parseData.
func (env *envelope) readData(raw []byte, kind Kind) error {
	if kind == KindInvocation {
		if inv, ok := parseInvocation(raw); ok {
			env.inv, env.hasData = inv, true
			return nil
		}
	}
	var err error
	if env.data, env.args, err = parseData(raw); err != nil {
		return err
	}
	env.hasData = true
	return nil
}

// parseData decodes binary-mode data (or decoded data_base64): JSON, one
// value, no repeated member names; arguments summarised.
func parseData(raw []byte) (any, FieldTypes, error) {
	v, args, err := parseJSONSummarizing(raw, dataArguments)
	var dup *pathError
	var argErr *argumentsError
	switch {
	case errors.As(err, &dup):
		return nil, nil, fmt.Errorf("%w: data: %v", ErrSchemaInvalid, dup)
	case errors.As(err, &argErr):
		return nil, nil, fmt.Errorf("%w: arguments: %v", ErrSchemaInvalid, argErr)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: data is not JSON: %v", ErrSchemaInvalid, err)
	}
	return v, args, nil
}

// attrString returns a structured-mode attribute value in its canonical
// string form: core attributes (coreAttrNames), all of them strings in the
// JSON format, must be JSON strings; extensions may also be booleans and
// integers (the CloudEvents type system has no other JSON form).
func attrString(name string, v any) (string, error) {
	core := coreAttr(name) >= 0
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		if !core {
			if x {
				return "true", nil
			}
			return "false", nil
		}
	case json.Number:
		if !core {
			lit := string(x)
			if !isCEInteger(lit) {
				return "", fmt.Errorf("%w: attribute %s: %s is not a CloudEvents Integer (32-bit, no fraction or exponent)", ErrSpecViolation, name, lit)
			}
			return lit, nil
		}
	}
	if core {
		return "", fmt.Errorf("%w: attribute %s: want a string, got %s", ErrSpecViolation, name, jsonKind(v))
	}
	return "", fmt.Errorf("%w: attribute %s: want a string, boolean or integer, got %s", ErrSpecViolation, name, jsonKind(v))
}

// isCEInteger reports whether a JSON number literal is a CloudEvents
// Integer: an optional minus, digits without leading zeros, within int32.
func isCEInteger(lit string) bool {
	digits := strings.TrimPrefix(lit, "-")
	if digits == "" || len(digits) > 10 || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
		n = n*10 + int64(digits[i]-'0')
	}
	if lit[0] == '-' {
		return n <= 1<<31 && lit != "-0"
	}
	return n < 1<<31
}

func readBinary(header map[string][]string, contentType []string, body []byte, kind Kind) (envelope, error) {
	var env envelope
	for hname, values := range header {
		if len(hname) <= len(ceHeaderPrefix) || !strings.EqualFold(hname[:len(ceHeaderPrefix)], ceHeaderPrefix) {
			continue
		}
		name := strings.ToLower(hname[len(ceHeaderPrefix):])
		if !validAttrName(name) {
			return envelope{}, fmt.Errorf("%w: header %q: attribute name %q: want a-z 0-9 only", ErrSpecViolation, hname, name)
		}
		if name == "data" {
			return envelope{}, fmt.Errorf("%w: header %q: data is not an attribute; in binary mode it is the body", ErrSpecViolation, hname)
		}
		if _, dup := env.attrs.get(name); dup || len(values) != 1 {
			return envelope{}, fmt.Errorf("%w: attribute %s given more than once", ErrSpecViolation, name)
		}
		v, err := decodeHeaderValue(values[0])
		if err != nil {
			return envelope{}, fmt.Errorf("%w: header %q: %v", ErrSpecViolation, hname, err)
		}
		env.attrs.set(name, v)
	}
	if len(contentType) == 1 {
		ct := strings.TrimSpace(contentType[0])
		if dct, ok := env.attrs.get("datacontenttype"); ok && dct != ct {
			return envelope{}, fmt.Errorf("%w: header ce-datacontenttype %q and Content-Type %q disagree", ErrSpecViolation, dct, ct)
		}
		env.attrs.set("datacontenttype", ct)
	}
	if len(body) > 0 {
		if err := checkJSONContentType(&env.attrs); err != nil {
			return envelope{}, err
		}
		if err := env.readData(body, kind); err != nil {
			return envelope{}, err
		}
	}
	return env, nil
}

// decodeHeaderValue undoes the NATS binding's header encoding: an optional
// RFC 7230 quoted-string, then one round of percent-decoding (upper- or
// lower-case hex), and the result must be UTF-8.
func decodeHeaderValue(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", errors.New("unterminated quoted string")
		}
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c == '\\' {
				if i+1 == len(inner) {
					return "", errors.New("quoted string ends in a backslash")
				}
				i++
				c = inner[i]
			} else if c == '"' {
				return "", errors.New("unescaped quote inside a quoted string")
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if strings.IndexByte(v, '%') >= 0 {
		out := make([]byte, 0, len(v))
		for i := 0; i < len(v); i++ {
			if v[i] != '%' {
				out = append(out, v[i])
				continue
			}
			if i+2 >= len(v) {
				return "", fmt.Errorf("truncated percent-encoding at %d", i)
			}
			hi, lo := unhex(v[i+1]), unhex(v[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("bad percent-encoding %q", v[i:i+3])
			}
			out = append(out, byte(hi<<4|lo))
			i += 2
		}
		v = string(out)
	}
	if !utf8.ValidString(v) {
		return "", errors.New("the decoded value is not UTF-8")
	}
	return v, nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func validAttrName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// validAttrValue reports whether s may be a CloudEvents String: no control
// characters (U+0000-U+001F, U+007F-U+009F).
func validAttrValue(s string) bool {
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

// checkJSONContentType accepts an absent datacontenttype (JSON is implied)
// or a JSON media type: */json or */*+json, with parameters.
func checkJSONContentType(attrs *attrSet) error {
	dct, ok := attrs.get("datacontenttype")
	if !ok || dct == "application/json" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(dct)
	if err != nil {
		return fmt.Errorf("%w: attribute datacontenttype %q: %v", ErrSpecViolation, dct, err)
	}
	_, sub, _ := strings.Cut(mt, "/")
	if sub != "json" && !strings.HasSuffix(sub, "+json") {
		return fmt.Errorf("%w: attribute datacontenttype %q: toolsentry's events carry JSON data (*/json or */*+json)", ErrSpecViolation, dct)
	}
	return nil
}

// attributes checks the attributes against CloudEvents 1.0 and returns them
// as an Event without payload.
func (env *envelope) attributes() (Event, error) {
	a := &env.attrs
	for i, v := range a.core {
		if a.isSet&(1<<i) != 0 && !validAttrValue(v) {
			return Event{}, fmt.Errorf("%w: attribute %s: control characters are not allowed", ErrSpecViolation, coreAttrNames[i])
		}
	}
	for _, x := range a.ext {
		if !validAttrValue(x.value) {
			return Event{}, fmt.Errorf("%w: attribute %s: control characters are not allowed", ErrSpecViolation, x.name)
		}
	}
	sv, ok := a.get("specversion")
	if !ok {
		return Event{}, fmt.Errorf("%w: attribute specversion missing", ErrSpecViolation)
	}
	if sv != "1.0" {
		return Event{}, fmt.Errorf("%w: attribute specversion %q: want \"1.0\"", ErrSpecViolation, sv)
	}
	for _, name := range []string{"id", "source", "type"} {
		v, ok := a.get(name)
		if !ok {
			return Event{}, fmt.Errorf("%w: attribute %s missing", ErrSpecViolation, name)
		}
		if v == "" {
			return Event{}, fmt.Errorf("%w: attribute %s is empty", ErrSpecViolation, name)
		}
	}
	for _, name := range []string{"subject", "datacontenttype", "dataschema", "time"} {
		if v, ok := a.get(name); ok && v == "" {
			return Event{}, fmt.Errorf("%w: attribute %s is empty", ErrSpecViolation, name)
		}
	}
	ev := Event{ID: a.core[attrID], Source: a.core[attrSource], Type: a.core[attrType], Subject: a.core[attrSubject], DataSchema: a.core[attrDataSchema]}
	if !plainPath(ev.Source) {
		if _, err := url.Parse(ev.Source); err != nil {
			return Event{}, fmt.Errorf("%w: attribute source %q is not a URI-reference", ErrSpecViolation, ev.Source)
		}
	}
	if ev.DataSchema != "" {
		if u, err := url.Parse(ev.DataSchema); err != nil || !u.IsAbs() {
			return Event{}, fmt.Errorf("%w: attribute dataschema %q is not an absolute URI", ErrSpecViolation, ev.DataSchema)
		}
	}
	if t, ok := a.get("time"); ok {
		var err error
		if ev.Time, err = parseTime(t); err != nil {
			return Event{}, fmt.Errorf("%w: attribute time %q: %v", ErrSpecViolation, t, err)
		}
	}
	if err := checkJSONContentType(a); err != nil {
		return Event{}, err
	}
	if len(a.ext) > 0 {
		ev.Extensions = make(map[string]string, len(a.ext))
		for _, x := range a.ext {
			ev.Extensions[x.name] = x.value
		}
	}
	return ev, nil
}

// plainPath reports whether s is a relative path of unreserved characters
// (RFC 3986: A-Z a-z 0-9 - . _ ~) and slashes, not starting with "//": a
// source such as "agents/billing", which url.Parse accepts (it allocates to
// say so). It is false for the empty string.
func plainPath(s string) bool {
	if s == "" || strings.HasPrefix(s, "//") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
			return false
		}
	}
	return true
}

// parseTime parses an RFC 3339 timestamp into UTC; years outside 0000-9999
// (after conversion to UTC) cannot be written back and are refused.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.New("not an RFC 3339 timestamp")
	}
	t = t.UTC()
	if t.Year() < 0 || t.Year() > 9999 {
		return time.Time{}, errors.New("year out of range")
	}
	return t, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}
