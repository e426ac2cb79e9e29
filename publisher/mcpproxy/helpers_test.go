package mcpproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy/mcptest"
)

// The test binary runs again as the MCP server of a test, by role.
const (
	roleEnv     = "MCPPROXY_TEST_ROLE"
	pageSizeEnv = "MCPPROXY_TEST_PAGE_SIZE"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "sdk-server":
		size, _ := strconv.Atoi(os.Getenv(pageSizeEnv))
		if err := mcptest.Serve(context.Background(), mcptest.Options{PageSize: size}); err != nil {
			fmt.Fprintln(os.Stderr, "sdk-server:", err)
		}
		os.Exit(0)
	case "script":
		scriptServer(os.Stdin, os.Stdout)
		os.Exit(0)
	case "exit3":
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	case "orphan": // leaves a process holding its standard output, and exits
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=sleeper")
		cmd.Stdout = os.Stdout
		if err := cmd.Start(); err != nil {
			os.Exit(1)
		}
		os.Exit(5)
	case "sleeper":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "unknown role", os.Getenv(roleEnv))
	os.Exit(2)
}

// scriptServer answers JSON-RPC lines with fixed bytes, formatted as no
// encoder would (spaces, escapes, CRLF), echoing each request's id as it
// was written: a peer whose bytes the proxy must pass on untouched.
func scriptServer(in io.Reader, out io.Writer) {
	br := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			body := bytes.TrimSpace(line)
			if body[0] == '[' {
				var batch []json.RawMessage
				if json.Unmarshal(body, &batch) == nil {
					var resps []string
					for _, el := range batch {
						if r := scriptAnswer(el); r != "" {
							resps = append(resps, r)
						}
					}
					if len(resps) > 0 {
						fmt.Fprintf(w, "[ %s ]\n", strings.Join(resps, " , "))
					}
				}
			} else if r := scriptAnswer(body); r != "" {
				fmt.Fprintf(w, "%s\r\n", r)
			}
			_ = w.Flush()
		}
		if err != nil {
			return
		}
	}
}

func scriptAnswer(raw []byte) string {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments struct {
				Size int `json:"size"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &m) != nil || len(m.ID) == 0 || m.Method == "" {
		return ""
	}
	id := string(m.ID)
	switch m.Method {
	case "initialize":
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"script-server","version":"0"}}}`
	case "tools/list":
		return `{ "jsonrpc" : "2.0", "id" : ` + id + ` , "result" : { "tools" : [ { "name" : "crm.lookup", "description" : "caf\u00e9 ☕ <b>&</b>", "inputSchema" : { "type" : "object", "properties" : { "user_id" : { "type" : "string" } , "opts" : { "type" : "object" } } } } ] } }`
	case "tools/call":
		switch m.Params.Name {
		case "fail":
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"no"}],"isError":true}}`
		case "rpcfail":
			return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32603,"message":"internal"}}`
		case "big":
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("y", m.Params.Arguments.Size) + `"}]}}`
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[]}}`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{}}`
}

// memSink keeps the events the proxy sends.
type memSink struct {
	mu   sync.Mutex
	msgs []events.Message
}

func (s *memSink) Send(msg events.Message) {
	s.mu.Lock()
	s.msgs = append(s.msgs, msg)
	s.mu.Unlock()
}

// events decodes what was sent, as the processor will.
func (s *memSink) events(t *testing.T) []events.Event {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]events.Event, 0, len(s.msgs))
	for _, m := range s.msgs {
		ev, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("the proxy sent an event the processor refuses: %v\n%s", err, m.Data)
		}
		out = append(out, ev)
	}
	return out
}

func (s *memSink) raw() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	for _, m := range s.msgs {
		b.Write(m.Data)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func observations(evs []events.Event) []*events.SchemaObserved {
	var out []*events.SchemaObserved
	for _, ev := range evs {
		if ev.Kind == events.KindSchemaObserved {
			out = append(out, ev.SchemaObserved)
		}
	}
	return out
}

func invocations(evs []events.Event) []*events.Invocation {
	var out []*events.Invocation
	for _, ev := range evs {
		if ev.Kind == events.KindInvocation {
			out = append(out, ev.Invocation)
		}
	}
	return out
}

// recorder keeps a copy of the bytes that went through a pipe.
type recorder struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (r *recorder) add(p []byte) {
	r.mu.Lock()
	r.b.Write(p)
	r.mu.Unlock()
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.b.Bytes())
}

type teeWriteCloser struct {
	w   io.WriteCloser
	rec *recorder
}

func (t teeWriteCloser) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.rec.add(p[:n])
	return n, err
}

func (t teeWriteCloser) Close() error { return t.w.Close() }

type teeReader struct {
	r   io.Reader
	rec *recorder
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.rec.add(p[:n])
	return n, err
}

// session is a proxy between a client (the test, or a go-sdk client) and a
// child process, with every byte on its four sides recorded.
type session struct {
	proxy *mcpproxy.Proxy
	sink  *memSink

	clientIn  *io.PipeWriter // what the client writes
	clientOut *io.PipeReader // what the client reads

	clientSent, clientGot, serverGot, serverSent *recorder

	cmd  *exec.Cmd
	done chan error // Serve's result
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return zerolog.New(zerolog.NewTestWriter(t)).WithContext(ctx)
}

// startSession starts the test binary as the server in role and a proxy
// in front of it.
func startSession(t *testing.T, ctx context.Context, cfg mcpproxy.Config, role string, pageSize int) *session {
	t.Helper()
	s := &session{sink: &memSink{}, clientSent: &recorder{}, clientGot: &recorder{}, serverGot: &recorder{}, serverSent: &recorder{}, done: make(chan error, 1)}
	if cfg.Names.Prefix() == "" {
		names, err := events.NewNames("")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Names = names
	}
	if cfg.Sink == nil {
		cfg.Sink = s.sink
	}
	p, err := mcpproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.proxy = p
	s.cmd = exec.Command(os.Args[0])
	s.cmd.Env = append(os.Environ(), roleEnv+"="+role, pageSizeEnv+"="+strconv.Itoa(pageSize))
	s.cmd.Stderr = os.Stderr
	childIn, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	childOut, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s.clientIn, s.clientOut = inW, outR
	go func() {
		err := p.Serve(ctx, inR, teeWriteCloser{outW, s.clientGot}, teeReader{childOut, s.serverSent}, teeWriteCloser{childIn, s.serverGot})
		_ = outW.Close()
		s.done <- err
	}()
	t.Cleanup(func() { s.close(t) })
	return s
}

// close ends the client's side and waits for the proxy and the server.
func (s *session) close(t *testing.T) {
	t.Helper()
	_ = s.clientIn.Close()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.done <- err // for a second close
	case <-time.After(30 * time.Second):
		t.Error("the proxy did not end within 30s of the client's end")
	}
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Wait()
	}
}

// clientTransport is a go-sdk transport on the session's client side, that
// records what the client sends.
func (s *session) clientTransport() mcp.Transport {
	return &mcp.IOTransport{Reader: s.clientOut, Writer: teeWriteCloser{s.clientIn, s.clientSent}}
}

// connect connects a go-sdk client through the proxy.
func (s *session) connect(t *testing.T, ctx context.Context, copts *mcp.ClientOptions, sopts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "billing-bot", Version: "1.0"}, copts)
	cs, err := c.Connect(ctx, s.clientTransport(), sopts)
	if err != nil {
		t.Fatalf("connecting through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// waitForwarded waits until both directions carried the same bytes on
// both sides of the proxy, and fails if they differ.
func (s *session) waitForwarded(t *testing.T) {
	t.Helper()
	same := func() bool {
		return bytes.Equal(s.clientSent.bytes(), s.serverGot.bytes()) && bytes.Equal(s.serverSent.bytes(), s.clientGot.bytes())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !same() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !same() {
		t.Fatalf("not forwarded byte for byte:\nclient sent   %d bytes %q\nserver got    %d bytes %q\nserver sent   %d bytes %q\nclient got    %d bytes %q",
			len(s.clientSent.bytes()), clip(s.clientSent.bytes()), len(s.serverGot.bytes()), clip(s.serverGot.bytes()),
			len(s.serverSent.bytes()), clip(s.serverSent.bytes()), len(s.clientGot.bytes()), clip(s.clientGot.bytes()))
	}
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:1000]) + " ... " + string(b[len(b)-1000:])
	}
	return string(b)
}

func lines(b []byte) []string {
	return strings.SplitAfter(string(b), "\n")
}

func eventually(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, msg, cond)
}

// textOf is the text of a tool's answer.
func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	text, err := mcptest.Text(res)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

var errNoEvent = errors.New("no such event")

// invocationOf returns the n-th (0-based) invocation of tool (its MCP
// name, of whichever server).
func invocationOf(evs []events.Event, tool string, n int) (*events.Invocation, error) {
	for _, inv := range invocations(evs) {
		if _, name := events.SplitToolID(inv.ToolID); name == tool {
			if n == 0 {
				return inv, nil
			}
			n--
		}
	}
	return nil, errNoEvent
}
