package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

func init() {
	register(&command{
		name:    "emit",
		summary: "publish telemetry (CloudEvents, JSON Lines, MCP tools/list results) to the telemetry stream",
		usage:   emitUsage,
		run:     runEmit,
	})
}

const emitUsage = `Usage: toolsentry emit [flags] [FILE...]

Publishes telemetry to the telemetry stream (TOOLSENTRY_TELEMETRY), where
` + "`toolsentry serve`" + ` judges it. FILE "-" or no FILE reads standard input.
Each JSON document in the input is one of:
  - a CloudEvent of one of toolsentry's telemetry types, in structured mode
    (a JSON object with "specversion"): io.toolsentry.tool.schema.observed.v1,
    io.toolsentry.tool.invocation.v1, io.toolsentry.tool.contract.v1,
    io.toolsentry.workflow.declared.v1; published on the subject of its type
    and key (toolsentry.telemetry.<kind>.<key>);
  - JSON Lines of such events (one per line), or a JSON array of them;
  - an MCP tools/list result {"tools": [...]} or the JSON-RPC response that
    holds it ({"jsonrpc": "2.0", "result": {"tools": [...]}}), with --server:
    published as one schema observation of the whole list. One event rather
    than one per tool, because the list is one observation of the server:
    it is stored or refused as a whole, and toolsentry still judges every
    tool in it against that tool's own baseline.
Documents may be mixed in one input.

Every event is checked as the processor will check it (CloudEvents 1.0, the
type's JSON Schema, the key) before anything is published: an invalid event
is reported as FILE:LINE and nothing is published, unless --keep-going.
Events are published with Nats-Msg-Id = the CloudEvent id, so the stream
drops an event it already holds (within its duplicate window): re-running
emit on the same file publishes nothing new. Generated schema observations
get a new random id each run (an observation is a fact at a time).

Argument values never leave this machine: an invocation's "arguments" are
replaced by their paths and JSON types ("argument_types") before publishing.

On success emit prints "published N events (M duplicates)" on standard
error, M being those the stream already held. The exit status is 0 when
every event was published, 1 when an event was invalid (even with
--keep-going) or not acknowledged, 2 on a usage error.

Flags (they may come before or after the files):
  --server NAME   the MCP server the input came from: the key of a tools/list
                  result's schema observation, whose tools are NAME/TOOL; the
                  tool_id of invocations, contracts and one tool's
                  observations is the tool's name on NAME and becomes
                  NAME/tool_id (default: none, tool_id is published as
                  written; required for tools/list)
  --mcp-tools FILE  a file ("-": standard input) of MCP tools/list results
                  only, bare or in their JSON-RPC responses, one per page:
                  each becomes a schema observation of --server, whose
                  every tool toolsentry judges against its own baseline;
                  anything else in it is an error (default: none)
  --source URI    CloudEvents source of generated events (default toolsentry-emit)
  --keep-going    publish the valid events and report the invalid ones
                  (default: false: publish nothing if any is invalid)
  --dry-run       check the input and print each event's subject and id on
                  standard output, without connecting (default: false)
  --otlp FILE     also read FILE ("-" for standard input) as OpenTelemetry
                  traces: the collector file exporter's output (JSON lines,
                  each an OTLP/JSON ExportTraceServiceRequest) or the Go
                  SDK stdout exporter's (stdouttrace); GenAI execute_tool and
                  MCP tools/call spans become invocations, the tool calls
                  under each invoke_agent span an observed workflow
                  (io.toolsentry.workflow.observed.v1), gen_ai.tool.definitions
                  schema observations. Event ids come from the spans, so
                  emitting a file twice publishes nothing new. A malformed
                  GenAI span is reported like an invalid event (default: none)

` + connFlagsHelp + `
Examples:
  toolsentry emit invocations.jsonl
  curl -s ... | toolsentry emit --server crm-mcp      # a tools/list response
  toolsentry emit --mcp-tools tools-list.json --server crm-mcp
  toolsentry emit --nats-url nats://nats.internal:4222 --keep-going events/*.json
  toolsentry emit --otlp /var/log/otelcol/traces.jsonl   # the collector's file exporter
`

// emitDefaultSource is the CloudEvents source of the events emit generates.
const emitDefaultSource = "toolsentry-emit"

// emitEvent is one event ready to publish and where it came from.
type emitEvent struct {
	where string // FILE:LINE
	msg   events.Message
}

// emitProblem is an input document that cannot be published.
type emitProblem struct {
	where string
	err   error
}

func (p emitProblem) String() string { return p.where + ": " + p.err.Error() }

// emitReader turns input documents into events.
type emitReader struct {
	names  events.Names
	server string
	source string
	now    func() time.Time

	events   []emitEvent
	problems []emitProblem

	toolsOnly bool // reading an --mcp-tools file: tools/list results only
}

func runEmit(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("emit", flag.ContinueOnError)
	server := fs.String("server", "", "")
	mcpTools := fs.String("mcp-tools", "", "")
	source := fs.String("source", emitDefaultSource, "")
	keepGoing := fs.Bool("keep-going", false, "")
	dryRun := fs.Bool("dry-run", false, "")
	otlpFile := fs.String("otlp", "", "")
	conn := addConnFlags(fs)
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	if *source == "" {
		return usageErrorf("--source is empty")
	}
	if *server != "" {
		if _, err := names.Telemetry(events.KindSchemaObserved, *server); err != nil {
			return usageErrorf("--server %q: %v", *server, err)
		}
	}
	if *mcpTools != "" && *server == "" {
		return usageErrorf("--mcp-tools needs --server NAME (the MCP server the tools/list result came from)")
	}
	if len(files) == 0 && *otlpFile == "" && *mcpTools == "" {
		files = []string{"-"}
	}
	stdin := 0
	for _, f := range append(files, *otlpFile, *mcpTools) {
		if f == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return usageErrorf("standard input (-) given %d times", stdin)
	}

	r := &emitReader{names: names, server: *server, source: *source, now: time.Now}
	if *mcpTools != "" {
		if err := r.readMCPTools(*mcpTools, sio.in); err != nil {
			return err
		}
	}
	for _, f := range files {
		name, data, err := readInput(f, sio.in)
		if err != nil {
			return err
		}
		r.read(name, data)
	}
	if *otlpFile != "" {
		name, data, err := readInput(*otlpFile, sio.in)
		if err != nil {
			return err
		}
		r.readOTLP(name, data)
	}
	for _, p := range r.problems {
		fmt.Fprintln(sio.err, p)
	}
	if len(r.problems) > 0 && !*keepGoing {
		if len(r.events) == 0 {
			return fmt.Errorf("nothing published: %s, none valid", plural(len(r.problems), "invalid document", "invalid documents"))
		}
		return fmt.Errorf("nothing published: %s (--keep-going publishes the %s)", plural(len(r.problems), "invalid document", "invalid documents"), plural(len(r.events), "valid one", "valid ones"))
	}
	if *dryRun {
		for _, ev := range r.events {
			fmt.Fprintf(sio.out, "%s\t%s\t%s\n", ev.where, ev.msg.Subject, ev.msg.ID)
		}
		fmt.Fprintf(sio.err, "checked %s, published nothing (--dry-run)\n", plural(len(r.events), "event", "events"))
		if len(r.problems) > 0 {
			return errExit(1)
		}
		return nil
	}

	res, pubErr := publishTelemetry(ctx, conn, names, r.events)
	if pubErr != nil && res.Stored+res.Duplicates == 0 {
		return pubErr
	}
	fmt.Fprintf(sio.err, "published %s (%s)\n", plural(res.Stored+res.Duplicates, "event", "events"), plural(res.Duplicates, "duplicate", "duplicates"))
	if pubErr != nil {
		return pubErr
	}
	if len(r.problems) > 0 {
		fmt.Fprintf(sio.err, "skipped %s\n", plural(len(r.problems), "invalid document", "invalid documents"))
		return errExit(1)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// readInput reads a whole file, or standard input for "-".
func readInput(path string, stdin io.Reader) (name string, data []byte, err error) {
	if path == "-" {
		data, err = io.ReadAll(stdin)
		if err != nil {
			return "", nil, fmt.Errorf("reading standard input: %w", err)
		}
		return "stdin", data, nil
	}
	data, err = os.ReadFile(path)
	return path, data, err
}

// publishTelemetry publishes evs asynchronously, each with its id, and waits
// for all acknowledgements.
func publishTelemetry(ctx context.Context, conn *connFlags, names events.Names, evs []emitEvent) (publisher.Result, error) {
	if len(evs) == 0 {
		return publisher.Result{}, nil
	}
	nc, js, err := conn.connect(ctx, "toolsentry emit")
	if err != nil {
		return publisher.Result{}, err
	}
	defer nc.Close()
	if _, err := js.Stream(ctx, names.TelemetryStream()); err != nil {
		return publisher.Result{}, conn.notProvisioned(err, "stream "+names.TelemetryStream())
	}
	p, err := publisher.New(nc, publisher.Options{})
	if err != nil {
		return publisher.Result{}, err
	}
	em := publisher.NewEmitter(p, names.Prefix()+".telemetry")
	for _, ev := range evs {
		// A failed send is reported again by Flush, with the others.
		_ = em.Emit(ctx, ev.msg.Subject, ev.msg.ID, ev.msg.Header, ev.msg.Data)
	}
	res, err := em.Flush(ctx)
	if err != nil {
		return res, fmt.Errorf("publishing to %s: %w", conn.displayURL(), err)
	}
	return res, nil
}

// read splits one input into JSON documents (JSON Lines, concatenated or
// pretty-printed documents, arrays of them) and turns each into an event.
// A document that is not JSON is reported at the line it starts on, and
// reading resumes at the first line that starts with '{' or '[' after that
// line and not before the line of the error (so a truncated JSON Lines
// line costs only itself).
func (r *emitReader) read(name string, data []byte) {
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	lines := &lineCounter{data: data}
	pos := 0
	for {
		pos = skipJSONSpace(data, pos, false)
		if pos >= len(data) {
			return
		}
		start := pos
		if data[pos] == '{' {
			// The usual document, an object: where it ends if it is JSON,
			// without a decoder's buffer and copy. If it is not, the
			// decoder below says why.
			if end := jsonValueEnd(data, pos); json.Valid(data[pos:end]) {
				r.document(fmt.Sprintf("%s:%d", name, lines.at(start)), data[pos:end:end])
				pos = end
				continue
			}
		}
		dec := json.NewDecoder(bytes.NewReader(data[pos:]))
		var err error
		if data[pos] == '[' {
			var next int
			if next, err = r.readArray(name, data, pos, dec, lines); err == nil {
				pos = next
				continue
			}
			// Locate the error from the start of the array.
			var raw json.RawMessage
			err = json.NewDecoder(bytes.NewReader(data[pos:])).Decode(&raw)
		} else {
			var raw json.RawMessage
			if err = dec.Decode(&raw); err == nil {
				r.document(fmt.Sprintf("%s:%d", name, lines.at(start)), raw)
				pos += int(dec.InputOffset())
				continue
			}
		}
		errLine := r.notJSON(name, data, start, err)
		pos = nextDocumentLine(data, start, errLine)
	}
}

// readArray reads a JSON array of documents at data[pos:] and returns the
// offset after it, or the error that makes it not JSON.
func (r *emitReader) readArray(name string, data []byte, pos int, dec *json.Decoder, lines *lineCounter) (int, error) {
	if _, err := dec.Token(); err != nil { // '['
		return 0, err
	}
	type elem struct {
		line int
		raw  json.RawMessage
	}
	var elems []elem
	for dec.More() {
		at := skipJSONSpace(data, pos+int(dec.InputOffset()), true)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return 0, err
		}
		elems = append(elems, elem{lines.at(at), raw})
	}
	if _, err := dec.Token(); err != nil { // ']'
		return 0, err
	}
	for i, e := range elems {
		before := len(r.problems)
		r.document(fmt.Sprintf("%s:%d", name, e.line), e.raw)
		for j := before; j < len(r.problems); j++ {
			r.problems[j].err = fmt.Errorf("array element %d: %w", i, r.problems[j].err)
		}
	}
	return pos + int(dec.InputOffset()), nil
}

// notJSON reports a document starting at start that is not JSON, and
// returns the line of the error (the last line for an unexpected end).
func (r *emitReader) notJSON(name string, data []byte, start int, err error) int {
	line := lineAt(data, start)
	errLine := lineAt(data, len(data))
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		errLine = lineAt(data, start+int(syn.Offset)-1)
		if errLine != line {
			err = fmt.Errorf("%v (at line %d)", syn, errLine)
		}
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("unexpected end of input")
	}
	r.problems = append(r.problems, emitProblem{fmt.Sprintf("%s:%d", name, line), fmt.Errorf("not JSON: %w", err)})
	return errLine
}

// lineCounter gives the 1-based line of byte offsets of data that mostly
// increase: it counts the newlines from the last offset asked, not from the
// start (lineAt for every document of 100k JSON Lines was quadratic, most
// of emit's time).
type lineCounter struct {
	data []byte
	off  int // data[:off] holds line-1 newlines
	line int // 0: not started
}

// at is lineAt(c.data, off).
func (c *lineCounter) at(off int) int {
	off = min(off, len(c.data))
	if c.line == 0 || off < c.off {
		c.off, c.line = 0, 1
	}
	c.line += bytes.Count(c.data[c.off:off], []byte{'\n'})
	c.off = off
	return c.line
}

// lineAt is the 1-based line of byte offset off.
func lineAt(data []byte, off int) int {
	return 1 + bytes.Count(data[:min(off, len(data))], []byte{'\n'})
}

// skipJSONSpace skips JSON whitespace (and commas, between array elements).
func skipJSONSpace(data []byte, pos int, commas bool) int {
	for pos < len(data) {
		switch data[pos] {
		case ' ', '\t', '\r', '\n':
		case ',':
			if !commas {
				return pos
			}
		default:
			return pos
		}
		pos++
	}
	return pos
}

// nextDocumentLine returns the offset of the first line after the one
// holding start, and not before line minLine, that begins with '{' or '['
// (len(data) if none).
func nextDocumentLine(data []byte, start, minLine int) int {
	pos, line := start, lineAt(data, start)
	for {
		nl := bytes.IndexByte(data[pos:], '\n')
		if nl < 0 {
			return len(data)
		}
		pos += nl + 1
		line++
		if line >= minLine && pos < len(data) && (data[pos] == '{' || data[pos] == '[') {
			return pos
		}
	}
}

// document turns one JSON document into an event, or records why not.
func (r *emitReader) document(where string, raw json.RawMessage) {
	msg, err := r.event(raw)
	if err != nil {
		r.problems = append(r.problems, emitProblem{where, err})
		return
	}
	r.events = append(r.events, emitEvent{where: where, msg: msg})
}

// event turns one JSON document, raw, into an event. raw is JSON: read
// and validated by a json.Decoder.
func (r *emitReader) event(raw json.RawMessage) (events.Message, error) {
	top, ok := jsonMembers(raw)
	if !ok {
		return events.Message{}, fmt.Errorf("a JSON %s, not a CloudEvent or an MCP tools/list result", jsonKindOf(raw))
	}
	if top.has("specversion") {
		if r.toolsOnly {
			return events.Message{}, errMCPToolsCloudEvent
		}
		return r.cloudEvent(raw, top)
	}
	if top.has("tools") {
		return r.toolsList(raw)
	}
	if rpcErr := top.get("error"); rpcErr != nil {
		return events.Message{}, fmt.Errorf("a JSON-RPC error response, not a tools/list result: %s", rpcErr)
	}
	if result := top.get("result"); result != nil {
		var inner map[string]json.RawMessage
		if json.Unmarshal(result, &inner) == nil {
			if _, ok := inner["tools"]; ok {
				return r.toolsList(result)
			}
		}
		return events.Message{}, errors.New("a JSON-RPC response whose result has no tools: not a tools/list result")
	}
	return events.Message{}, errors.New(`neither a CloudEvent (no "specversion") nor an MCP tools/list result (no "tools")`)
}

func jsonKindOf(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '[':
		return "array"
	case t[0] == '"':
		return "string"
	case t[0] == 't' || t[0] == 'f':
		return "boolean"
	case t[0] == 'n':
		return "null"
	}
	return "number"
}

// cePeek is what emit reads of a CloudEvent before decoding it: enough to
// name the subject it belongs on. Decode then checks everything, the
// subject included.
type cePeek struct {
	Type       string          `json:"type"`
	Data       json.RawMessage `json:"data"`
	DataBase64 string          `json:"data_base64"`
}

// dataBytes is the event's data: data, or data_base64 decoded.
func (h cePeek) dataBytes() []byte {
	data := []byte(h.Data)
	if len(data) == 0 && h.DataBase64 != "" {
		data, _ = base64.StdEncoding.DecodeString(h.DataBase64)
	}
	return data
}

// telemetrySubjectOf is the subject a telemetry event of CloudEvents type
// typ with data belongs on: its kind's, keyed by the tool, the server of a
// tools/list observation or the composition its data names. Decode then
// checks everything, the subject included: an unknown type (or one that
// is not telemetry) gets the invocation kind and data without a usable key
// a stand-in key, so that Decode's error names the type, or the missing or
// invalid field. emit and POST /v1/events both publish on it.
func telemetrySubjectOf(names events.Names, typ string, data []byte) string {
	if !json.Valid(data) {
		data = nil // jsonMembers reads JSON only
	}
	d, _ := jsonMembers(data)
	return telemetrySubjectOfMembers(names, typ, d)
}

// telemetrySubjectOfMembers is telemetrySubjectOf of the data's members.
func telemetrySubjectOfMembers(names events.Names, typ string, d jsonObject) string {
	kind := events.KindOfType(typ)
	key := jsonStringMember(d, "tool_id")
	switch kind {
	case events.KindSchemaObserved:
		if tools := d.get("tools"); len(tools) > 0 && string(tools) != "null" {
			key = jsonStringMember(d, "server")
		}
	case events.KindWorkflow, events.KindWorkflowObserved:
		key = jsonStringMember(d, "composition_id")
	}
	if kind.Class() != events.ClassTelemetry {
		kind = events.KindInvocation // Decode reports the type
	}
	subject, err := names.Telemetry(kind, key)
	if err != nil {
		subject, _ = names.Telemetry(kind, "-")
	}
	return subject
}

// jsonMembers returns the members of a JSON object, each name unquoted
// (invalid UTF-8 as U+FFFD) and each value as it is written in raw, or
// false if raw is not an object. raw must be JSON: jsonMembers finds where
// values end, it does not validate them. Looked up with get (the last of a
// repeated name), it is what json.Unmarshal into a map[string]
// json.RawMessage gives, in one pass and without copying the values.
func jsonMembers(raw []byte) (jsonObject, bool) {
	i := skipJSONSpace(raw, 0, false)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	members := make(jsonObject, 0, 8)
	for i++; ; {
		i = skipJSONSpace(raw, i, true)
		if i >= len(raw) || raw[i] == '}' {
			return members, true
		}
		end := jsonValueEnd(raw, i)
		name := raw[i+1 : max(i+1, end-1)]
		if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
			s, _ := jsonString(raw[i:end])
			name = []byte(s)
		}
		i = skipJSONSpace(raw, end, false) + 1 // past ':'
		i = skipJSONSpace(raw, i, false)
		end = jsonValueEnd(raw, i)
		members = append(members, jsonMember{name, raw[i:end]})
		i = end
	}
}

// jsonObject is the members of a JSON object in order, as jsonMembers
// finds them.
type jsonObject []jsonMember

type jsonMember struct{ name, value []byte }

// get returns the value of the last member called name, nil if none.
func (o jsonObject) get(name string) []byte {
	for i := len(o) - 1; i >= 0; i-- {
		if string(o[i].name) == name {
			return o[i].value
		}
	}
	return nil
}

// has reports whether o has a member called name.
func (o jsonObject) has(name string) bool { return o.get(name) != nil }

// jsonValueEnd returns the offset after the JSON value that starts at
// raw[i] (raw is JSON; it never returns more than len(raw)).
func jsonValueEnd(raw []byte, i int) int {
	depth := 0
	for ; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			i = jsonStringEnd(raw, i+1) - 1
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth <= 0 {
				return i + 1
			}
		default:
			if depth == 0 { // a number or a literal, up to a delimiter
				for i < len(raw) && strings.IndexByte(",}] \t\r\n", raw[i]) < 0 {
					i++
				}
				return i
			}
		}
	}
	return len(raw)
}

// jsonStringEnd returns the offset after the closing quote of the string
// whose contents start at raw[i] (len(raw) if it has none).
func jsonStringEnd(raw []byte, i int) int {
	for {
		q := bytes.IndexByte(raw[i:], '"')
		if q < 0 {
			return len(raw)
		}
		i += q
		escapes := 0 // the backslashes before the quote
		for j := i - 1; j >= 0 && raw[j] == '\\'; j-- {
			escapes++
		}
		i++
		if escapes%2 == 0 {
			return i
		}
	}
}

// jsonString returns the string a JSON string literal holds, as
// json.Unmarshal does (invalid UTF-8 as U+FFFD), or false if lit is not a
// string.
func jsonString(lit []byte) (string, bool) {
	if len(lit) >= 2 && lit[0] == '"' && bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1]), true
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err == nil
}

// jsonStringMember is the string value of member name, "" if it is absent
// or not a string.
func jsonStringMember(members jsonObject, name string) string {
	s, _ := jsonString(members.get(name))
	return s
}

// cloudEvent checks a structured-mode CloudEvent, raw, whose members are
// top, and re-encodes it: the decoded event holds an invocation's argument
// types, never its values. What it reads of top before decoding (type,
// data, data_base64) is enough to name the subject the event belongs on;
// Decode then checks everything, the subject included, and reports what is
// wrong with these members.
func (r *emitReader) cloudEvent(raw json.RawMessage, top jsonObject) (events.Message, error) {
	var dataBase64 string
	typ := jsonStringMember(top, "type")
	kind := events.KindOfType(typ)
	if kind.Class() == events.ClassVerdicts {
		return events.Message{}, fmt.Errorf("type %q is a verdict, not telemetry: emit publishes telemetry only", typ)
	}
	data := top.get("data")
	if len(data) == 0 && json.Unmarshal(top.get("data_base64"), &dataBase64) == nil && dataBase64 != "" {
		if data, _ = base64.StdEncoding.DecodeString(dataBase64); !json.Valid(data) {
			data = nil // jsonMembers reads JSON only
		}
	}
	d, _ := jsonMembers(data)
	ev, err := r.names.Decode(telemetrySubjectOfMembers(r.names, typ, d), nil, raw)
	if err != nil {
		return events.Message{}, err
	}
	if r.server != "" {
		if err := onServer(&ev, r.server); err != nil {
			return events.Message{}, err
		}
	}
	return r.names.Encode(ev)
}

// onServer makes the tool of a tool-keyed event (an invocation, a contract,
// one tool's schema observation) the --server's: its tool_id is taken as
// the tool's name on that server, and becomes the qualified id
// (events.QualifiedToolID), as the tools of a tools/list of --server are.
// The attribute subject, when set, is the key and follows it. Other events
// (tools/list results, which carry their server, workflows) are left as
// they are.
func onServer(ev *events.Event, server string) error {
	var id *string
	switch {
	case ev.Invocation != nil:
		id = &ev.Invocation.ToolID
	case ev.Contract != nil:
		id = &ev.Contract.ToolID
	case ev.SchemaObserved != nil && !ev.SchemaObserved.IsList():
		obs := ev.SchemaObserved
		if obs.Server != "" && obs.Server != server {
			return fmt.Errorf("the observation's server %q is not --server %q", obs.Server, server)
		}
		obs.Server = server
		id = &obs.ToolID
	default:
		return nil
	}
	*id = events.QualifiedToolID(server, *id)
	if ev.Subject != "" {
		ev.Subject = *id
	}
	return nil
}

// toolsList wraps an MCP tools/list result into a schema observation of
// --server.
func (r *emitReader) toolsList(result json.RawMessage) (events.Message, error) {
	if r.server == "" {
		return events.Message{}, errors.New("an MCP tools/list result needs --server NAME (the MCP server it came from)")
	}
	var b bytes.Buffer
	b.WriteString(`{"specversion":"1.0","id":`)
	writeJSONString(&b, events.NewID())
	b.WriteString(`,"source":`)
	writeJSONString(&b, r.source)
	b.WriteString(`,"type":`)
	writeJSONString(&b, events.TypeSchemaObserved)
	b.WriteString(`,"subject":`)
	writeJSONString(&b, r.server)
	b.WriteString(`,"time":`)
	writeJSONString(&b, r.now().UTC().Format(time.RFC3339Nano))
	b.WriteString(`,"data":{"server":`)
	writeJSONString(&b, r.server)
	b.WriteString(`,"tools":`)
	b.Write(result)
	b.WriteString(`}}`)
	subject, err := r.names.Telemetry(events.KindSchemaObserved, r.server)
	if err != nil {
		return events.Message{}, fmt.Errorf("--server %q: %w", r.server, err)
	}
	ev, err := r.names.Decode(subject, nil, b.Bytes())
	if err != nil {
		return events.Message{}, fmt.Errorf("tools/list result: %w", err)
	}
	return r.names.Encode(ev)
}

// writeJSONString writes s as json.Marshal writes a string.
func writeJSONString(b *bytes.Buffer, s string) {
	b.Write(guards.AppendJSONString(b.AvailableBuffer(), s, guards.MarshalHTML))
}
