package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is one ```sh block of the README.
type readmeBlock struct {
	line int // of the opening fence
	text string
}

// readmeShellBlocks returns the README's ```sh blocks in order.
func readmeShellBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &readmeBlock{line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: the ```sh block of line %d is not closed", path, cur.line)
	}
	return blocks
}

// readmePrelude defines, for every block, the commands the README calls as
// shell functions, so that the blocks run unchanged against the test's
// serve:
//   - toolsentry serve (re)starts the one serve, in the background, on the
//     test's ports: with the arguments of the one running it keeps it; with
//     other arguments it starts a fresh one on a new data directory (each
//     such example stands alone); with --nats-url or --config (an external
//     cluster) it is skipped;
//   - every other toolsentry command waits until serve is ready; watch is
//     bounded with --timeout 3s unless the block bounds it;
//   - go run ./cmd/toolsentry is the built binary; go install, go build and
//     go test are skipped (the test built the binary; go test is the suite);
//   - nats: with the NATS CLI installed, as it is (nats sub bounded to 3s);
//     without it, nats pub --jetstream publishes the same event with
//     toolsentry emit and other nats commands are skipped;
//   - mcp-proxy of an npx server is skipped when npx is absent;
//   - notify is skipped: it runs until interrupted, and the examples'
//     webhooks (Slack, an Alertmanager host) are not the test's.
//
// Every skip is logged on standard error as "readme-test: SKIP ...".
const readmePrelude = `set -e -o pipefail
export PATH="$TS_BIN:$PATH"
export TOOLSENTRY_NATS_URL="nats://127.0.0.1:$TS_NATS_PORT" NATS_URL="nats://127.0.0.1:$TS_NATS_PORT"
__log() { echo "readme-test: $*" >&2; }
__stop_serve() {
  rm -f "$TS_STATE/ready"
  [ -e "$TS_STATE/serve.pid" ] || return 0
  local pid; pid=$(cat "$TS_STATE/serve.pid"); rm -f "$TS_STATE/serve.pid"
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
__serve() {
  local a
  for a in "$@"; do case "$a" in --nats-url*|--config*) __log "SKIP toolsentry serve $* (it needs the NATS cluster its settings name)"; return 0;; esac; done
  if [ -e "$TS_STATE/serve.pid" ] && [ "$(cat "$TS_STATE/serve.args")" = "$*" ] && kill -0 "$(cat "$TS_STATE/serve.pid")" 2>/dev/null; then
    __log "toolsentry serve${*:+ $*}: the one running"; return 0
  fi
  __stop_serve
  local n; n=$(( $(cat "$TS_STATE/serve.n" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$TS_STATE/serve.n"
  echo "$*" > "$TS_STATE/serve.args"
  __log "toolsentry serve${*:+ $*}: started on fresh data directory $n"
  (unset TOOLSENTRY_NATS_URL; exec toolsentry serve "$@" --listen "127.0.0.1:$TS_NATS_PORT" --http "127.0.0.1:$TS_HTTP_PORT" \
    --data-dir "$TS_STATE/data-$n" --log-format json) > "$TS_STATE/serve-$n.log" 2>&1 &
  local pid=$!; echo "$pid" > "$TS_STATE/serve.pid"
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$TS_HTTP_PORT/readyz" > /dev/null; then touch "$TS_STATE/ready"; return 0; fi
    kill -0 "$pid" 2>/dev/null || { __log "serve exited:"; tail -5 "$TS_STATE/serve-$n.log" >&2; return 1; }
    sleep 0.1
  done
  __log "serve not ready in 30s"; return 1
}
__wait_ready() {
  for _ in $(seq 1 300); do [ -e "$TS_STATE/ready" ] && return 0; sleep 0.1; done
  __log "no serve is ready"; return 1
}
toolsentry() {
  case "$1" in
    serve) shift; __serve "$@"; return;;
  esac
  __wait_ready
  case "$1" in
    watch) case " $* " in *" --timeout"*|*" --count"*) ;; *) set -- "$@" --timeout 3s; __log "toolsentry watch: bounded with --timeout 3s";; esac;;
    notify) __log "SKIP toolsentry $* (it runs until interrupted, posting to the example's webhook)"; return 0;;
    mcp-proxy) case " $* " in *" npx "*) if ! type -P npx > /dev/null; then __log "SKIP (npx is not installed): toolsentry $*"; cat > /dev/null; return 0; fi;; esac;;
  esac
  command toolsentry "$@"
}
go() {
  if [ "$1" = run ] && [ "$2" = ./cmd/toolsentry ]; then shift 2; toolsentry "$@"; return; fi
  case "$1" in
    install|build) __log "SKIP go $* (the test built toolsentry and put it on PATH)"; return 0;;
    test) __log "SKIP go $* (the suite this test is part of)"; return 0;;
  esac
  command go "$@"
}
nats() {
  if type -P nats > /dev/null; then
    if [ "$1" = sub ]; then __log "nats sub: bounded to 3s"; timeout 3 nats "$@" || [ $? = 124 ]; return; fi
    command nats "$@"; return
  fi
  if [ "$1" = pub ] && [ "$2" = --jetstream ]; then
    __log "nats CLI absent: publishing the event of nats pub $3 with toolsentry emit"
    printf '%s\n' "$4" | toolsentry emit; return
  fi
  __log "SKIP (the nats CLI is not installed): nats $*"
}
`

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestReadmeShellBlocks runs the README's ```sh blocks in order, as a new
// user pastes them, against a fresh serve: the binary is built once and is
// `toolsentry` on PATH, the blocks run in a directory that links the
// repository's files (so what they write stays out of the clone), and each
// must exit 0 within two minutes. Blocks that start a nats-server cluster
// on fixed ports are skipped (the cluster is tested in consumer/ on free
// ports); lines that need a missing nats CLI or npx are skipped or done
// with toolsentry emit, each logged.
func TestReadmeShellBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the README's blocks build the binary and run serve")
	}
	for _, tool := range []string{"bash", "curl", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the README's blocks need it", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "toolsentry"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	checkBuiltVersion(t, filepath.Join(bin, "toolsentry"), root)

	// The blocks' working directory: the clone's files, by link.
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(tmp, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	prelude := filepath.Join(tmp, "prelude.sh")
	if err := os.WriteFile(prelude, []byte(readmePrelude), 0o644); err != nil {
		t.Fatal(err)
	}
	httpPort := freePort(t)
	var envv []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOOLSENTRY_") && !strings.HasPrefix(kv, "NATS_") {
			envv = append(envv, kv)
		}
	}
	envv = append(envv, "TS_BIN="+bin, "TS_STATE="+state, "TS_NATS_PORT="+strconv.Itoa(freePort(t)), "TS_HTTP_PORT="+strconv.Itoa(httpPort),
		"XDG_CONFIG_HOME="+filepath.Join(tmp, "config"))
	t.Cleanup(func() { stopReadmeServe(t, state) })

	runScript := func(name, script string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", ". "+prelude+"\n"+script)
		cmd.Dir, cmd.Env = work, envv
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		out, err := cmd.CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "readme-test: ") {
				t.Logf("%s: %s", name, strings.TrimPrefix(l, "readme-test: "))
			}
		}
		if err != nil {
			t.Fatalf("%s failed after %s: %v\n%s\n--- output:\n%s", name, time.Since(start).Round(time.Millisecond), err, script, out)
		}
		t.Logf("%s: ran in %s", name, time.Since(start).Round(time.Millisecond))
	}

	runScript("a fresh serve", "toolsentry serve")
	blocks := readmeShellBlocks(t, filepath.Join(root, "README.md"))
	if len(blocks) == 0 {
		t.Fatal("the README has no ```sh block")
	}
	for _, b := range blocks {
		name := fmt.Sprintf("README.md:%d", b.line)
		if strings.Contains(b.text, "nats-server ") {
			t.Logf("%s: SKIP the block: it starts a nats-server cluster on fixed ports", name)
			continue
		}
		script := strings.NewReplacer("localhost:9700", "127.0.0.1:"+strconv.Itoa(httpPort), "127.0.0.1:9700", "127.0.0.1:"+strconv.Itoa(httpPort)).Replace(b.text)
		runScript(name, script)
	}
}

// stopReadmeServe stops the serve the blocks left running.
func stopReadmeServe(t *testing.T, state string) {
	raw, err := os.ReadFile(filepath.Join(state, "serve.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("serve %d did not stop on SIGTERM in 15s", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// checkBuiltVersion runs `toolsentry version` of the built binary: it names
// the Go version and, when the build stamped VCS information, the clone's
// commit.
func checkBuiltVersion(t *testing.T, binary, root string) {
	t.Helper()
	out, err := exec.Command(binary, "version", "--json").Output()
	if err != nil {
		t.Fatalf("toolsentry version: %v", err)
	}
	text := string(out)
	if !strings.Contains(text, `"go":"go1.`) {
		t.Errorf("toolsentry version --json = %s, want the Go version", text)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	switch {
	case err != nil:
		t.Logf("toolsentry version: %s (no git to compare the commit with)", strings.TrimSpace(text))
	case !strings.Contains(text, `"commit"`):
		t.Logf("toolsentry version: %s: the build stamped no commit (GOFLAGS=-buildvcs=false, or a git worktree, which go build does not recognise)", strings.TrimSpace(text))
	case !strings.Contains(text, strings.TrimSpace(string(head))):
		t.Errorf("toolsentry version --json = %s, want commit %s", text, head)
	}
}
