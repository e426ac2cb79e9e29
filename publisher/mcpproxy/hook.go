package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// CodeHalted is the JSON-RPC error code of a HaltError without a code of
// its own: in the range JSON-RPC leaves to implementations.
const CodeHalted = -32090

// Call is an outgoing tools/call, as a CallHook sees it.
type Call struct {
	Agent  string // the agent id the invocation will carry
	Server string // the server key its schema observations carry
	Tool   string // params.name
	// ToolID is the tool's qualified id, events.QualifiedToolID(Server,
	// Tool): the id its invocations, verdicts and directives carry.
	ToolID string
	// Arguments is params.arguments as the client sent it; nil when the
	// call has none. A hook must not keep it or let its values reach logs.
	Arguments json.RawMessage
	// SchemaFingerprint is the fingerprint of the tool as the client last
	// saw it listed; "" when it did not list it through this proxy.
	SchemaFingerprint string
}

// CallHook decides what happens to an outgoing tools/call. It returns
//
//   - nil, nil, nil: forward the request unchanged, byte for byte;
//   - args, nil, nil: forward it with params.arguments replaced by args
//     (a JSON object; the message is re-encoded, nothing else changes);
//   - nil, halt, nil: do not forward it; the client receives halt as the
//     JSON-RPC error response of its request;
//   - an error: the hook failed; the request is forwarded unchanged (the
//     proxy fails open: a broken guard must not break the agent) and the
//     failure is counted and logged.
//
// It is called on the client's reading goroutine, one call at a time, and
// holds up the messages behind it while it runs: keep it quick.
type CallHook func(ctx context.Context, call Call) (args json.RawMessage, halt *HaltError, err error)

// HaltError is a hook's refusal of a call: the JSON-RPC error object the
// client receives. Code 0 stands for CodeHalted.
type HaltError struct {
	Code    int
	Message string
	Data    json.RawMessage // optional; a JSON value
}

func (e *HaltError) Error() string {
	return fmt.Sprintf("tools/call halted (%d): %s", e.code(), e.Message)
}

func (e *HaltError) code() int {
	if e.Code == 0 {
		return CodeHalted
	}
	return e.Code
}

// withArguments returns a tools/call request with params.arguments
// replaced by args (compacted to one line): the rest of the message keeps
// its bytes, key order and spacing included.
func withArguments(raw, args json.RawMessage) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, errors.New("new arguments are not a JSON object")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, args); err != nil {
		return nil, err
	}
	if !json.Valid(raw) {
		return nil, errors.New("the request is not JSON")
	}
	ps, pe, err := memberSpan(raw, "params")
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	params := raw[ps:pe]
	var newParams []byte
	as, ae, err := memberSpan(params, "arguments")
	switch {
	case errors.Is(err, errNoMember):
		open := bytes.IndexByte(params, '{')
		newParams = append(newParams, params[:open+1]...)
		newParams = append(append(newParams, `"arguments":`...), compact.Bytes()...)
		if rest := bytes.TrimSpace(params[open+1:]); len(rest) > 0 && rest[0] != '}' {
			newParams = append(newParams, ',')
		}
		newParams = append(newParams, params[open+1:]...)
	case err != nil:
		return nil, fmt.Errorf("params.arguments: %w", err)
	default:
		newParams = append(append(append(newParams, params[:as]...), compact.Bytes()...), params[ae:]...)
	}
	out := make([]byte, 0, len(raw)-len(params)+len(newParams))
	return append(append(append(out, raw[:ps]...), newParams...), raw[pe:]...), nil
}

// errNoMember is memberSpan's answer for an object without the key.
var errNoMember = errors.New("no such member")

// memberSpan returns where the value of key starts and ends in the JSON
// object obj.
func memberSpan(obj []byte, key string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, 0, errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, 0, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, 0, err
		}
		if k, _ := tok.(string); k == key {
			end := int(dec.InputOffset())
			return end - len(v), end, nil
		}
	}
	return 0, 0, errNoMember
}

// haltResponse is the JSON-RPC error response to request id.
func haltResponse(id json.RawMessage, h *HaltError) json.RawMessage {
	e := struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	}{h.code(), h.Message, h.Data}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		e.Data = nil
	}
	out, _ := marshalNoEscape(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, e})
	return out
}

func marshalNoEscape(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}
