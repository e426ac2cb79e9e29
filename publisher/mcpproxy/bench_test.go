package mcpproxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
)

// countSink counts events and keeps nothing.
type countSink struct{ n atomic.Int64 }

func (s *countSink) Send(events.Message) { s.n.Add(1) }

// echoServer answers every tools/call line on in with a result on out,
// echoing the id: a server that costs next to nothing, so that the
// benchmark measures the proxy.
func echoServer(in io.Reader, out io.WriteCloser) {
	defer out.Close()
	br := bufio.NewReaderSize(in, 64<<10)
	bw := bufio.NewWriter(out)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(line, &m)
			fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"found"}],"isError":false}}`+"\n", m.ID)
			if br.Buffered() == 0 {
				_ = bw.Flush()
			}
		}
		if err != nil {
			_ = bw.Flush()
			return
		}
	}
}

// BenchmarkForward measures tools/call round trips between a client and a
// server, directly and through the proxy with its telemetry (an invocation
// event per call, built and handed to a sink): pipelined (throughput) and
// one at a time (the latency the proxy adds to a call).
func BenchmarkForward(b *testing.B) {
	names, _ := events.NewNames("")
	for _, mode := range []string{"pipelined", "sequential"} {
		for _, path := range []string{"direct", "proxy"} {
			b.Run("mode="+mode+"/path="+path, func(b *testing.B) {
				benchForward(b, names, path, mode == "pipelined")
			})
		}
	}
}

func benchForward(b *testing.B, names events.Names, path string, pipelined bool) {
	ctx := context.Background()
	clientR, clientW := io.Pipe() // client → (proxy →) server
	serverR, serverW := io.Pipe() // server → (proxy →) client
	var sink countSink
	var p *mcpproxy.Proxy
	served := make(chan struct{})
	if path == "direct" {
		go echoServer(clientR, serverW)
		close(served)
	} else {
		var err error
		p, err = mcpproxy.New(mcpproxy.Config{Names: names, Sink: &sink, RelistAfter: -1})
		if err != nil {
			b.Fatal(err)
		}
		toServerR, toServerW := io.Pipe()
		fromServerR, fromServerW := io.Pipe()
		go echoServer(toServerR, fromServerW)
		go func() {
			_ = p.Serve(ctx, clientR, serverW, fromServerR, toServerW)
			_ = serverW.Close()
			close(served)
		}()
	}
	request := func(w io.Writer, i int) {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"lookup_user","arguments":{"user_id":"u-%d","options":{"limit":10,"fields":["name","email"]}}}}`+"\n", i, i)
	}
	br := bufio.NewReaderSize(serverR, 64<<10)
	b.ResetTimer()
	if pipelined {
		go func() {
			bw := bufio.NewWriter(clientW)
			for i := range b.N {
				request(bw, i)
			}
			_ = bw.Flush()
		}()
	}
	for i := range b.N {
		if !pipelined {
			request(clientW, i)
		}
		if _, err := br.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	_ = clientW.Close()
	go func() { _, _ = io.Copy(io.Discard, serverR) }()
	<-served
	if p != nil {
		st := p.Stats()
		if sink.n.Load()+st.TelemetryDrops != int64(b.N) {
			b.Fatalf("%d invocations and %d dropped for %d calls", sink.n.Load(), st.TelemetryDrops, b.N)
		}
		b.ReportMetric(float64(st.TelemetryDrops)/float64(b.N), "dropped/call")
	}
}
