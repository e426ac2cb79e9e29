package mcpproxy_test

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher/mcpproxy"
)

// A server that exits while a process it started holds its output open:
// RunCommand still returns the server's status.
func TestRunCommandServerLeavesAProcessBehind(t *testing.T) {
	ctx := testContext(t)
	names, _ := events.NewNames("")
	p, err := mcpproxy.New(mcpproxy.Config{Names: names, RelistAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=orphan")
	inR, inW := io.Pipe()
	defer inW.Close()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := mcpproxy.RunCommand(ctx, p, cmd, inR, io.Discard, nil)
		done <- result{code, err}
	}()
	select {
	case r := <-done:
		// The server ran in a process group of its own: end what it left.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if r.err != nil || r.code != 5 {
			t.Fatalf("RunCommand: %d, %v; want the server's status 5", r.code, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunCommand did not return after the server exited")
	}
}
