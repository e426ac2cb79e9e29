package mcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/events"
)

// ErrInvalidConfig is returned by New for an unusable Config.
var ErrInvalidConfig = errors.New("invalid proxy configuration")

// ErrServedTwice is returned by Serve when the proxy already served a
// session: a Proxy holds the state of one session.
var ErrServedTwice = errors.New("proxy already served a session")

// Defaults of Config.
const (
	// DefaultSource is the CloudEvents source of the proxy's events.
	DefaultSource = "toolsentry-mcp-proxy"
	// DefaultRelistAfter is how long the proxy waits, after the server
	// said its tools changed, for the client to list them again before
	// it lists them itself.
	DefaultRelistAfter = 2 * time.Second
	// DefaultAgent is the agent id when neither Config.Agent nor the
	// client's clientInfo names one.
	DefaultAgent = "mcp-client"
	// DefaultServer is the server key when neither Config.Server, the
	// server's serverInfo nor Config.FallbackServer names one.
	DefaultServer = "mcp-server"
)

// maxPending bounds the requests awaiting a response that the proxy
// remembers; beyond it the oldest are forgotten (a forgotten call sends no
// invocation), so that a server that never answers cannot make the proxy
// grow without end.
const maxPending = 10000

// Config is what a Proxy needs. Zero fields take defaults.
type Config struct {
	// Names gives the subjects of the events (the zero value: prefix
	// "toolsentry").
	Names events.Names
	// Agent is the agent id of the invocations. Default: the client's
	// clientInfo.name from initialize (or from a request's _meta with
	// protocol 2026-07-28), else DefaultAgent.
	Agent string
	// Server is the key of the schema observations and the server part
	// of every tool's qualified id (events.QualifiedToolID: server/tool).
	// Default: the server's serverInfo.name, else FallbackServer, else
	// DefaultServer.
	Server string
	// FallbackServer names the server when it does not name itself
	// (RunCommand's callers pass the command's base name).
	FallbackServer string
	// Source is the CloudEvents source of the events (default
	// DefaultSource).
	Source string
	// Sink receives the telemetry; nil sends none (the proxy still
	// forwards and calls Hook).
	Sink Sink
	// Hook, when set, sees every tools/call before it is forwarded.
	Hook CallHook
	// ListHook, when set, sees every tools/list result page the server
	// answers (the client's and the proxy's own), before the client gets
	// it and so before the agent's next call: a guard judges a version it
	// has just been shown (agent.Agent.Listed) without waiting for
	// serve's verdict. It runs on the server's reading goroutine: keep it
	// quick.
	ListHook ListHook
	// RelistAfter is how long to wait, after notifications/tools/list_changed,
	// for the client to list the tools again before the proxy does
	// (default DefaultRelistAfter; negative: never list on its own).
	RelistAfter time.Duration
	// Now is the clock of latencies and event times (default time.Now).
	Now func() time.Time
}

// ListHook sees the tools of one tools/list result page of server.
type ListHook func(ctx context.Context, server string, tools []events.MCPTool)

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.RelistAfter == 0 {
		c.RelistAfter = DefaultRelistAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Agent != "" && !validAgent(c.Agent) {
		return fmt.Errorf("%w: agent %q: want 1 to %d characters of UTF-8", ErrInvalidConfig, c.Agent, maxAgentLen)
	}
	if c.Server != "" {
		if _, err := c.Names.Telemetry(events.KindSchemaObserved, c.Server); err != nil {
			return fmt.Errorf("%w: server %q: %v", ErrInvalidConfig, c.Server, err)
		}
	}
	return nil
}

// maxAgentLen is the longest agent id an invocation may carry.
const maxAgentLen = 128

func validAgent(s string) bool {
	return s != "" && utf8.ValidString(s) && utf8.RuneCountInString(s) <= maxAgentLen
}

// Stats counts what a proxy did. Read it with Proxy.Stats.
type Stats struct {
	ClientMessages int64 // lines read from the client
	ServerMessages int64 // lines read from the server
	NotJSON        int64 // lines that were not JSON-RPC (forwarded all the same)
	Observations   int64 // schema observations handed to the sink
	Invocations    int64 // invocation events handed to the sink
	TelemetryFails int64 // events that could not be built (logged)
	TelemetryDrops int64 // invocations dropped: built slower than calls came
	Rewritten      int64 // calls whose arguments a hook rewrote
	Halted         int64 // calls a hook refused
	HookErrors     int64 // hook failures (the call went through unchanged)
	Relists        int64 // tools/list requests the proxy sent on its own
}

type stats struct {
	clientMessages, serverMessages, notJSON   atomic.Int64
	observations, invocations, telemetryFails atomic.Int64
	telemetryDrops                            atomic.Int64
	rewritten, halted, hookErrors, relists    atomic.Int64
}

type reqKind int

const (
	kindOther reqKind = iota
	kindInitialize
	kindDiscover
	kindList
	kindOwnList
	kindCall
)

// pendingReq is a request awaiting its response.
type pendingReq struct {
	kind        reqKind
	seq         uint64
	tool        string // params.name
	toolID      string // the tool's qualified id: the server's and params.name
	args        events.FieldTypes
	fingerprint string
	traceID     string // from the call's _meta.traceparent: the agent's
	parentSpan  string // span around the call, for joining with OTel spans
	start       time.Time
	params      json.RawMessage // kindOwnList: the params, to ask for the next page
}

// Proxy forwards one MCP session between a client and a server and emits
// its telemetry. Create it with New, run it once with Serve (or
// RunCommand). Its methods are safe for concurrent use.
type Proxy struct {
	cfg Config

	served atomic.Bool
	stats  stats

	mu          sync.Mutex
	agent       string // from the session, when cfg.Agent is empty
	server      string // from the session, when cfg.Server is empty
	pending     map[string]*pendingReq
	seq         uint64
	seen        map[string]string // tool → fingerprint the client last saw listed
	listParams  json.RawMessage   // params of the client's last first-page tools/list; nil: none yet
	listedOnce  bool
	relistDue   bool
	relistTimer *time.Timer
	ownPrefix   string
	ownSeq      int

	serverMu     sync.Mutex
	serverIn     io.WriteCloser
	serverClosed bool

	clientMu     sync.Mutex
	clientOut    io.Writer
	clientBroken bool

	// Invocations are built (encoded and checked against their schema) on
	// a goroutine of their own, off the forwarding path.
	invocationMu     sync.RWMutex // guards invocationQ's closing against sends
	invocationClosed bool
	invocationQ      chan invocationJob
	invocationDone   chan struct{}
}

// invocationJob is an answered (or abandoned) call whose event is to be
// built.
type invocationJob struct {
	agent   string
	r       *pendingReq
	outcome *events.Outcome
	end     time.Time
}

// invocationQueue bounds the calls waiting for their event to be built.
const invocationQueue = 4096

// New returns a proxy for one session.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &Proxy{
		cfg:       cfg,
		pending:   map[string]*pendingReq{},
		seen:      map[string]string{},
		ownPrefix: "toolsentry-mcp-proxy-" + hex.EncodeToString(b[:]) + "-",
	}, nil
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	s := &p.stats
	return Stats{
		ClientMessages: s.clientMessages.Load(),
		ServerMessages: s.serverMessages.Load(),
		NotJSON:        s.notJSON.Load(),
		Observations:   s.observations.Load(),
		Invocations:    s.invocations.Load(),
		TelemetryFails: s.telemetryFails.Load(),
		TelemetryDrops: s.telemetryDrops.Load(),
		Rewritten:      s.rewritten.Load(),
		Halted:         s.halted.Load(),
		HookErrors:     s.hookErrors.Load(),
		Relists:        s.relists.Load(),
	}
}

// Agent is the agent id the proxy gives invocations now.
func (p *Proxy) Agent() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agentLocked()
}

// Server is the server key the proxy gives observations now.
func (p *Proxy) Server() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.serverLocked()
}

func (p *Proxy) agentLocked() string {
	switch {
	case p.cfg.Agent != "":
		return p.cfg.Agent
	case p.agent != "":
		return p.agent
	}
	return DefaultAgent
}

func (p *Proxy) serverLocked() string {
	switch {
	case p.cfg.Server != "":
		return p.cfg.Server
	case p.server != "":
		return p.server
	case p.cfg.FallbackServer != "":
		return p.cfg.FallbackServer
	}
	return DefaultServer
}

// Serve forwards messages from clientIn to serverIn and from serverOut to
// clientOut until serverOut ends, and returns then (nil at EOF, else the
// read error). The end of clientIn, a failed write to clientOut or the end
// of ctx closes serverIn, as a client that hangs up does, and the server is
// expected to end its output. A read of clientIn still blocked when Serve
// returns is abandoned; Serve closes neither clientIn nor clientOut.
// Requests still unanswered at the end are sent as invocations without an
// outcome.
func (p *Proxy) Serve(ctx context.Context, clientIn io.Reader, clientOut io.Writer, serverOut io.Reader, serverIn io.WriteCloser) error {
	if p.served.Swap(true) {
		return ErrServedTwice
	}
	p.serverIn, p.clientOut = serverIn, clientOut
	p.invocationQ, p.invocationDone = make(chan invocationJob, invocationQueue), make(chan struct{})
	go p.buildInvocations(ctx)
	stop := context.AfterFunc(ctx, p.closeServerIn)
	defer stop()
	go p.pumpClient(ctx, clientIn)
	err := p.pumpServer(ctx, serverOut)
	p.finish(ctx)
	return err
}

// readLines calls fn with each newline-terminated line of r (the last one
// may lack its newline), of any length. The line is valid until fn returns.
func readLines(r io.Reader, fn func(line []byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if long != nil {
			long = append(long, chunk...)
			line = long
		}
		if len(line) > 0 {
			fn(line)
		}
		long = nil
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (p *Proxy) pumpClient(ctx context.Context, clientIn io.Reader) {
	err := readLines(clientIn, func(line []byte) {
		p.stats.clientMessages.Add(1)
		forward, reply := p.fromClient(ctx, line)
		if reply != nil {
			p.writeClient(ctx, reply)
		}
		if forward != nil {
			p.writeServer(ctx, forward)
		}
	})
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("mcp-proxy: reading the client")
	}
	p.closeServerIn()
}

func (p *Proxy) pumpServer(ctx context.Context, serverOut io.Reader) error {
	return readLines(serverOut, func(line []byte) {
		p.stats.serverMessages.Add(1)
		if p.fromServer(ctx, line) {
			p.writeClient(ctx, line)
		}
	})
}

func (p *Proxy) writeServer(ctx context.Context, b []byte) {
	p.serverMu.Lock()
	defer p.serverMu.Unlock()
	if p.serverClosed {
		return
	}
	if _, err := p.serverIn.Write(b); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("mcp-proxy: writing to the server")
	}
}

func (p *Proxy) closeServerIn() {
	p.serverMu.Lock()
	defer p.serverMu.Unlock()
	if !p.serverClosed {
		p.serverClosed = true
		_ = p.serverIn.Close()
	}
}

func (p *Proxy) writeClient(ctx context.Context, b []byte) {
	p.clientMu.Lock()
	if p.clientBroken {
		p.clientMu.Unlock()
		return
	}
	_, err := p.clientOut.Write(b)
	if err != nil {
		p.clientBroken = true
	}
	p.clientMu.Unlock()
	if err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("mcp-proxy: writing to the client; closing the server's input")
		p.closeServerIn()
	}
}

// finish stops the re-list timer and sends the calls left unanswered.
func (p *Proxy) finish(ctx context.Context) {
	p.mu.Lock()
	if p.relistTimer != nil {
		p.relistTimer.Stop()
	}
	p.relistDue = false
	var calls []*pendingReq
	for id, r := range p.pending {
		if r.kind == kindCall {
			calls = append(calls, r)
		}
		delete(p.pending, id)
	}
	agent := p.agentLocked()
	p.mu.Unlock()
	sortBySeq(calls)
	for _, r := range calls {
		p.emitInvocation(ctx, agent, r, nil)
	}
	p.invocationMu.Lock()
	p.invocationClosed = true
	close(p.invocationQ)
	p.invocationMu.Unlock()
	<-p.invocationDone
}

func (p *Proxy) buildInvocations(ctx context.Context) {
	defer close(p.invocationDone)
	for job := range p.invocationQ {
		p.buildInvocation(ctx, job)
	}
}

func sortBySeq(rs []*pendingReq) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].seq < rs[j-1].seq; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// wireMsg is what the proxy reads of a JSON-RPC message.
type wireMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func (m *wireMsg) hasID() bool { return len(m.ID) > 0 && string(m.ID) != "null" }

// idKey is the map key of a request id: its JSON text, so 1 and "1" differ.
func idKey(raw json.RawMessage) string { return string(bytes.TrimSpace(raw)) }

// fromClient handles one line from the client. It returns the bytes to
// forward to the server (the line itself unless a hook changed a call; nil
// for nothing) and the bytes to answer the client with (nil for nothing).
func (p *Proxy) fromClient(ctx context.Context, line []byte) (forward, reply []byte) {
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return line, nil
	}
	if body[0] != '[' {
		out, rep, changed := p.clientMessage(ctx, body)
		switch {
		case rep != nil:
			return nil, append(rep, '\n')
		case changed:
			return append(out, '\n'), nil
		}
		return line, nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(body, &batch); err != nil {
		p.stats.notJSON.Add(1)
		return line, nil
	}
	var outs, reps []json.RawMessage
	modified := false
	for _, el := range batch {
		out, rep, changed := p.clientMessage(ctx, el)
		switch {
		case rep != nil:
			reps = append(reps, rep)
			modified = true
		case changed:
			outs = append(outs, out)
			modified = true
		default:
			outs = append(outs, el)
		}
	}
	if !modified {
		return line, nil
	}
	// A halted call's error goes back at once, in an array of its own:
	// the server answers the rest of the batch in its array.
	if len(reps) > 0 {
		reply = append(encodeArray(reps), '\n')
	}
	if len(outs) > 0 {
		forward = append(encodeArray(outs), '\n')
	}
	return forward, reply
}

func encodeArray(els []json.RawMessage) []byte {
	b := []byte{'['}
	for i, el := range els {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, el...)
	}
	return append(b, ']')
}

// clientMessage handles one message from the client: it remembers the
// requests whose responses matter and runs the hook on tools/call. It
// returns the re-encoded message when the hook rewrote it (changed), or the
// error response when the hook halted it (reply).
func (p *Proxy) clientMessage(ctx context.Context, raw json.RawMessage) (out json.RawMessage, reply json.RawMessage, changed bool) {
	var m wireMsg
	if err := json.Unmarshal(raw, &m); err != nil {
		p.stats.notJSON.Add(1)
		return raw, nil, false
	}
	if m.Method == "" {
		return raw, nil, false // a response to the server's request
	}
	p.noteClientMeta(m.Method, m.Params)
	if !m.hasID() {
		if m.Method == "notifications/cancelled" {
			p.cancelled(ctx, m.Params)
		}
		return raw, nil, false
	}
	switch m.Method {
	case "initialize":
		p.track(m.ID, &pendingReq{kind: kindInitialize})
	case "server/discover":
		p.track(m.ID, &pendingReq{kind: kindDiscover})
	case "tools/list":
		p.clientList(m.Params)
		p.track(m.ID, &pendingReq{kind: kindList})
	case "tools/call":
		return p.clientCall(ctx, raw, m)
	}
	return raw, nil, false
}

// noteClientMeta takes the agent's name from initialize's clientInfo, or
// from the per-request _meta of protocol 2026-07-28.
func (p *Proxy) noteClientMeta(method string, params json.RawMessage) {
	if p.cfg.Agent != "" || len(params) == 0 {
		return
	}
	var ps struct {
		ClientInfo struct {
			Name string `json:"name"`
		} `json:"clientInfo"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if method != "initialize" && !bytes.Contains(params, []byte(metaClientInfo)) {
		return
	}
	if json.Unmarshal(params, &ps) != nil {
		return
	}
	name := ps.ClientInfo.Name
	if raw, ok := ps.Meta[metaClientInfo]; ok && name == "" {
		var info struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &info)
		name = info.Name
	}
	if name == "" {
		return
	}
	if !validAgent(name) {
		return // not usable as an id: keep the default
	}
	p.mu.Lock()
	if p.agent == "" {
		p.agent = name
	}
	p.mu.Unlock()
}

// The _meta keys of protocol 2026-07-28 that carry what initialize did.
const (
	metaClientInfo = "io.modelcontextprotocol/clientInfo"
	metaServerInfo = "io.modelcontextprotocol/serverInfo"
)

func (p *Proxy) track(id json.RawMessage, r *pendingReq) {
	p.mu.Lock()
	p.trackLocked(idKey(id), r)
	p.mu.Unlock()
}

func (p *Proxy) trackLocked(key string, r *pendingReq) {
	p.seq++
	r.seq = p.seq
	if len(p.pending) >= maxPending {
		var oldest string
		var min uint64
		for k, q := range p.pending {
			if oldest == "" || q.seq < min {
				oldest, min = k, q.seq
			}
		}
		delete(p.pending, oldest)
	}
	p.pending[key] = r
}

// clientList remembers a first-page tools/list request: the client has
// listed again (no re-list of the proxy's own is due), and its params are
// what the proxy sends when it must list on its own.
func (p *Proxy) clientList(params json.RawMessage) {
	var ps struct {
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		_ = json.Unmarshal(params, &ps)
	}
	if ps.Cursor != "" {
		return
	}
	own := ownListParams(params)
	p.mu.Lock()
	p.listParams, p.listedOnce, p.relistDue = own, true, false
	p.mu.Unlock()
}

// ownListParams is a client's tools/list params without cursor and
// progress token, for the proxy's own request.
func ownListParams(params json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if len(params) == 0 || json.Unmarshal(params, &m) != nil || m == nil {
		return nil
	}
	delete(m, "cursor")
	if meta, ok := m["_meta"]; ok {
		var mm map[string]json.RawMessage
		if json.Unmarshal(meta, &mm) == nil && mm != nil {
			delete(mm, "progressToken")
			m["_meta"], _ = json.Marshal(mm)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// clientCall tracks a tools/call and runs the hook on it.
func (p *Proxy) clientCall(ctx context.Context, raw json.RawMessage, m wireMsg) (json.RawMessage, json.RawMessage, bool) {
	var ps struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      struct {
			Traceparent string `json:"traceparent"`
		} `json:"_meta"`
	}
	if len(m.Params) > 0 {
		_ = json.Unmarshal(m.Params, &ps)
	}
	r := &pendingReq{kind: kindCall, tool: ps.Name, start: p.cfg.Now()}
	r.traceID, r.parentSpan = parseTraceparent(ps.Meta.Traceparent)
	if len(ps.Arguments) > 0 && string(ps.Arguments) != "null" {
		types, err := events.FieldTypesOf(ps.Arguments)
		if err != nil {
			// Not an object: the call is still counted, without paths.
			zerolog.Ctx(ctx).Debug().Str("tool", ps.Name).Msg("mcp-proxy: arguments are not a JSON object; no paths recorded")
		} else {
			r.args = types
		}
	}
	p.mu.Lock()
	r.fingerprint = p.seen[ps.Name]
	server := p.serverLocked()
	r.toolID = events.QualifiedToolID(server, ps.Name)
	call := Call{Agent: p.agentLocked(), Server: server, Tool: ps.Name, ToolID: r.toolID, Arguments: ps.Arguments, SchemaFingerprint: r.fingerprint}
	p.mu.Unlock()
	if ps.Name == "" || p.cfg.Hook == nil {
		p.track(m.ID, r)
		return raw, nil, false
	}
	args, halt, err := p.cfg.Hook(ctx, call)
	switch {
	case err != nil:
		p.stats.hookErrors.Add(1)
		zerolog.Ctx(ctx).Warn().Err(err).Str("tool", ps.Name).Msg("mcp-proxy: call hook failed; forwarding the call unchanged")
	case halt != nil:
		p.stats.halted.Add(1)
		p.mu.Lock()
		agent := p.agentLocked()
		p.mu.Unlock()
		p.emitInvocation(ctx, agent, r, nil) // the agent used the tool; the tool did not fail
		return nil, haltResponse(m.ID, halt), false
	case args != nil:
		out, err := withArguments(raw, args)
		if err != nil {
			p.stats.hookErrors.Add(1)
			zerolog.Ctx(ctx).Warn().Err(err).Str("tool", ps.Name).Msg("mcp-proxy: call hook returned unusable arguments; forwarding the call unchanged")
			break
		}
		p.stats.rewritten.Add(1)
		p.track(m.ID, r)
		return out, nil, true
	}
	p.track(m.ID, r)
	return raw, nil, false
}

// cancelled handles the client's notifications/cancelled: the call it
// names will get no response; it is sent without an outcome.
func (p *Proxy) cancelled(ctx context.Context, params json.RawMessage) {
	var ps struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &ps) != nil || len(ps.RequestID) == 0 {
		return
	}
	p.mu.Lock()
	r, ok := p.pending[idKey(ps.RequestID)]
	if ok {
		delete(p.pending, idKey(ps.RequestID))
	}
	agent := p.agentLocked()
	p.mu.Unlock()
	if ok && r.kind == kindCall {
		p.emitInvocation(ctx, agent, r, nil)
	}
}

// fromServer handles one line from the server and reports whether to
// forward it to the client (false for responses to the proxy's own
// requests).
func (p *Proxy) fromServer(ctx context.Context, line []byte) bool {
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return true
	}
	if body[0] != '[' {
		return p.serverMessage(ctx, body)
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(body, &batch); err != nil {
		p.stats.notJSON.Add(1)
		return true
	}
	for _, el := range batch {
		p.serverMessage(ctx, el)
	}
	return true
}

func (p *Proxy) serverMessage(ctx context.Context, raw json.RawMessage) bool {
	var m wireMsg
	if err := json.Unmarshal(raw, &m); err != nil {
		p.stats.notJSON.Add(1)
		return true
	}
	if m.Method != "" {
		if m.Method == "notifications/tools/list_changed" {
			p.listChanged(ctx)
		}
		return true
	}
	if !m.hasID() {
		return true
	}
	key := idKey(m.ID)
	p.mu.Lock()
	r, ok := p.pending[key]
	if ok {
		delete(p.pending, key)
	}
	p.mu.Unlock()
	if !ok {
		return true
	}
	switch r.kind {
	case kindInitialize:
		p.serverInfo(m.Result, false)
	case kindDiscover:
		p.serverInfo(m.Result, true)
	case kindList:
		if len(m.Error) == 0 && len(m.Result) > 0 {
			p.observe(ctx, m.Result, true)
		}
	case kindOwnList:
		if len(m.Error) == 0 && len(m.Result) > 0 {
			if next := p.observe(ctx, m.Result, false); next != "" {
				p.sendOwnList(ctx, r.params, next)
			}
		} else {
			zerolog.Ctx(ctx).Warn().RawJSON("error", m.Error).Msg("mcp-proxy: the server refused the proxy's own tools/list")
		}
		return false
	case kindCall:
		p.callAnswered(ctx, r, m)
	}
	return true
}

// serverInfo takes the server's name from initialize's serverInfo or
// server/discover's _meta.
func (p *Proxy) serverInfo(result json.RawMessage, discover bool) {
	if p.cfg.Server != "" || len(result) == 0 {
		return
	}
	var res struct {
		ServerInfo struct {
			Name string `json:"name"`
		} `json:"serverInfo"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(result, &res) != nil {
		return
	}
	name := res.ServerInfo.Name
	if raw, ok := res.Meta[metaServerInfo]; ok && discover && name == "" {
		var info struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &info)
		name = info.Name
	}
	if name == "" {
		return
	}
	if _, err := p.cfg.Names.Telemetry(events.KindSchemaObserved, name); err != nil {
		return
	}
	p.mu.Lock()
	p.server = name
	p.mu.Unlock()
}

// listChanged arms the proxy's own re-list, unless the client lists again
// first.
func (p *Proxy) listChanged(ctx context.Context) {
	if p.cfg.RelistAfter < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.listedOnce {
		return // nothing was observed yet: the client's first list will be
	}
	p.relistDue = true
	if p.relistTimer != nil {
		p.relistTimer.Stop()
	}
	p.relistTimer = time.AfterFunc(p.cfg.RelistAfter, func() { p.relist(ctx) })
}

func (p *Proxy) relist(ctx context.Context) {
	p.mu.Lock()
	due, params := p.relistDue, p.listParams
	p.relistDue = false
	p.mu.Unlock()
	if due {
		p.sendOwnList(ctx, params, "")
	}
}

// sendOwnList sends the server a tools/list request of the proxy's own.
func (p *Proxy) sendOwnList(ctx context.Context, params json.RawMessage, cursor string) {
	if cursor != "" {
		var m map[string]json.RawMessage
		if len(params) == 0 || json.Unmarshal(params, &m) != nil || m == nil {
			m = map[string]json.RawMessage{}
		}
		m["cursor"], _ = json.Marshal(cursor)
		params, _ = json.Marshal(m)
	}
	p.mu.Lock()
	p.ownSeq++
	id := strconv.Quote(p.ownPrefix + strconv.Itoa(p.ownSeq))
	p.trackLocked(id, &pendingReq{kind: kindOwnList, params: params})
	p.mu.Unlock()
	req := []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"`)
	if len(params) > 0 {
		req = append(append(append(req, `,"params":`...), params...), '}')
	} else {
		req = append(req, '}')
	}
	p.stats.relists.Add(1)
	p.writeServer(ctx, append(req, '\n'))
}

// observe publishes a tools/list result as a schema observation and
// returns its nextCursor. visible says the client sees the result: its
// fingerprints become those the agent integrates against.
func (p *Proxy) observe(ctx context.Context, result json.RawMessage, visible bool) string {
	var page struct {
		NextCursor string `json:"nextCursor"`
	}
	_ = json.Unmarshal(result, &page)
	server := p.Server()
	meta := events.Meta{ID: events.NewID(), Source: p.cfg.Source, Time: p.cfg.Now()}
	msg, obs, err := p.cfg.Names.NewToolsListObserved(meta, server, result)
	if err != nil {
		p.stats.telemetryFails.Add(1)
		zerolog.Ctx(ctx).Warn().Err(err).Str("server", server).Msg("mcp-proxy: tools/list result not observed")
		return page.NextCursor
	}
	if p.cfg.ListHook != nil {
		p.cfg.ListHook(ctx, server, obs.Tools)
	}
	if visible {
		fps := make(map[string]string, len(obs.Tools))
		for _, t := range obs.Tools {
			if fp, err := events.ToolFingerprint(t); err == nil {
				fps[t.Name] = fp
			}
		}
		p.mu.Lock()
		for name, fp := range fps {
			p.seen[name] = fp
		}
		p.mu.Unlock()
	}
	p.send(msg)
	p.stats.observations.Add(1)
	return page.NextCursor
}

func (p *Proxy) send(msg events.Message) {
	if p.cfg.Sink != nil {
		p.cfg.Sink.Send(msg)
	}
}

// callAnswered sends the invocation of an answered tools/call.
func (p *Proxy) callAnswered(ctx context.Context, r *pendingReq, m wireMsg) {
	var out events.Outcome
	if len(m.Error) > 0 && string(m.Error) != "null" {
		var e struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(m.Error, &e)
		out = events.Outcome{Status: "error", ErrorType: "jsonrpc_" + strconv.Itoa(e.Code)}
	} else {
		var res struct {
			IsError    bool   `json:"isError"`
			ResultType string `json:"resultType"`
		}
		_ = json.Unmarshal(m.Result, &res)
		if res.ResultType == "input_required" {
			// Not over: the client completes it with another tools/call,
			// which is the one that counts.
			return
		}
		out = events.Outcome{Status: "ok"}
		if res.IsError {
			out = events.Outcome{Status: "error", ErrorType: "tool_error"}
		}
	}
	p.mu.Lock()
	agent := p.agentLocked()
	p.mu.Unlock()
	p.emitInvocation(ctx, agent, r, &out)
}

// emitInvocation queues the invocation of a call; outcome nil when the
// call got no answer from the tool (cancelled, halted, the session ended).
// It never waits: a full queue drops the event.
func (p *Proxy) emitInvocation(ctx context.Context, agent string, r *pendingReq, outcome *events.Outcome) {
	if r.tool == "" {
		return
	}
	p.invocationMu.RLock()
	defer p.invocationMu.RUnlock()
	if p.invocationClosed {
		// The session is over (the server's output ended) and a client
		// message came late: nothing answers it any more.
		p.stats.telemetryDrops.Add(1)
		return
	}
	select {
	case p.invocationQ <- invocationJob{agent: agent, r: r, outcome: outcome, end: p.cfg.Now()}:
	default:
		if p.stats.telemetryDrops.Add(1) == 1 {
			zerolog.Ctx(ctx).Warn().Msg("mcp-proxy: invocations arrive faster than they are encoded; dropping some")
		}
	}
}

func (p *Proxy) buildInvocation(ctx context.Context, job invocationJob) {
	r, agent, outcome := job.r, job.agent, job.outcome
	inv := events.Invocation{
		AgentID:           agent,
		ToolID:            r.toolID,
		SchemaFingerprint: r.fingerprint,
		ArgumentTypes:     r.args,
		Outcome:           outcome,
		TraceID:           r.traceID,
		ParentSpanID:      r.parentSpan,
	}
	if outcome != nil {
		ms := float64(job.end.Sub(r.start).Microseconds()) / 1000
		inv.LatencyMS = &ms
	}
	meta := events.Meta{ID: events.NewID(), Source: p.cfg.Source, Time: r.start}
	msg, err := p.cfg.Names.NewInvocation(meta, inv)
	if err != nil {
		p.stats.telemetryFails.Add(1)
		zerolog.Ctx(ctx).Warn().Err(err).Str("tool", r.tool).Msg("mcp-proxy: invocation not sent")
		return
	}
	p.send(msg)
	p.stats.invocations.Add(1)
}

// parseTraceparent reads a W3C traceparent ("00-<trace id>-<span id>-<flags>",
// as OpenTelemetry's MCP instrumentation puts in a request's _meta) and
// returns its trace and span ids, or "" for anything else.
func parseTraceparent(tp string) (traceID, spanID string) {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || (len(tp) > 55 && tp[55] != '-') || tp[:2] == "ff" {
		return "", ""
	}
	traceID, spanID = tp[3:35], tp[36:52]
	if !lowerHex(tp[:2]) || !lowerHex(traceID) || !lowerHex(spanID) || !lowerHex(tp[53:55]) ||
		traceID == "00000000000000000000000000000000" || spanID == "0000000000000000" {
		return "", ""
	}
	return traceID, spanID
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
