package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// browser is headless Chromium driven over the Chrome DevTools Protocol
// on a pipe (--remote-debugging-pipe: JSON messages ended by NUL, read by
// Chromium on fd 3, written on fd 4), so that the test needs no WebSocket
// client. It holds one page.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       *os.File
	session string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpReply
	done    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts chrome and opens a blank page; it is closed when
// the test ends.
func startBrowser(t *testing.T, chrome string) *browser {
	t.Helper()
	toChrome, ourW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ourR, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, w: ourW, pending: map[int]chan cdpReply{}, done: make(chan struct{})}
	b.cmd = exec.Command(chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	b.cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fd 3, fd 4
	logs := &lockedBuffer{}
	b.cmd.Stderr = logs
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	toChrome.Close()
	fromChrome.Close()
	go b.read(bufio.NewReader(ourR))
	t.Cleanup(func() {
		b.send("Browser.close", nil, false)
		exited := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-exited
		}
		ourW.Close()
		ourR.Close()
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", logs)
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.callBrowser("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.callBrowser("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	return b
}

// read hands each reply to its caller; events are ignored.
func (b *browser) read(r *bufio.Reader) {
	defer close(b.done)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// send writes a command, to the page's session when onPage, and
// returns where its reply arrives.
func (b *browser) send(method string, params any, onPage bool) chan cdpReply {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if onPage {
		msg["sessionId"] = b.session
	}
	raw, _ := json.Marshal(msg)
	_, _ = b.w.Write(append(raw, 0))
	return ch
}

func (b *browser) wait(method string, ch chan cdpReply, into any) {
	b.t.Helper()
	select {
	case r := <-ch:
		if r.Error != nil {
			b.t.Fatalf("%s: %s", method, r.Error.Message)
		}
		if into != nil {
			if err := json.Unmarshal(r.Result, into); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-b.done:
		b.t.Fatalf("%s: chromium closed the pipe", method)
	case <-time.After(30 * time.Second):
		b.t.Fatalf("%s: no reply in 30s", method)
	}
}

func (b *browser) callBrowser(method string, params, into any) {
	b.t.Helper()
	b.wait(method, b.send(method, params, false), into)
}

func (b *browser) call(method string, params, into any) {
	b.t.Helper()
	b.wait(method, b.send(method, params, true), into)
}

// navigate loads url in the page.
func (b *browser) navigate(url string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
}

// eval runs a JavaScript expression in the page and returns its value
// (awaited when a promise) as JSON.
func (b *browser) eval(expr string) json.RawMessage {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("%s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	return r.Result.Value
}

// evalString is eval of an expression whose value is a string.
func (b *browser) evalString(expr string) string {
	b.t.Helper()
	var s string
	if raw := b.eval(expr); len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &s); err != nil {
			b.t.Fatalf("%s: not a string: %s", expr, raw)
		}
	}
	return s
}

// waitFor polls the CSS selector until an element matches, and returns
// that element's outerHTML; it fails after 20 s with the page's main.
func (b *browser) waitFor(what, selector string) string {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	expr := fmt.Sprintf("(document.querySelector(%s) || {}).outerHTML || ''", q)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if html := b.evalString(expr); html != "" {
			return html
		}
	}
	b.t.Fatalf("%s not found (%s) in the page:\n%s", what, selector, b.evalString("document.getElementById('main').outerHTML"))
	return ""
}

// click clicks the element the selector matches, as a user would: a
// mouse press and release at its centre.
func (b *browser) click(what, selector string) {
	b.t.Helper()
	b.waitFor(what, selector)
	q, _ := json.Marshal(selector)
	var box struct{ X, Y float64 }
	if err := json.Unmarshal(b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect(); return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`, q)), &box); err != nil {
		b.t.Fatal(err)
	}
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		b.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": box.X, "y": box.Y, "button": "left", "clickCount": 1}, nil)
	}
}

// typeText focuses the element and types text into it.
func (b *browser) typeText(selector, text string) {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	b.eval(fmt.Sprintf("document.querySelector(%s).focus()", q))
	b.call("Input.insertText", map[string]any{"text": text}, nil)
}
