package mcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// exitGrace is how long RunCommand goes on reading the server's output
// after the server exited: a process it left behind may hold the output
// open, and the session is over all the same.
const exitGrace = 2 * time.Second

// RunCommand runs cmd (not started yet) as the MCP server of p: it connects
// the command's standard input and output to the proxy, forwards every
// signal received on signals to the command (nil: none), serves the session
// between in and out, and returns the command's exit status once it has
// exited and its output has ended (or, if a process it started keeps the
// output open, exitGrace after it exited): its exit code, or 128 + the
// signal number when a signal ended it. The command's standard error is
// cmd.Stderr as the caller set it. On Linux the command runs in a process
// group of its own (a signal to the proxy's group reaches it once, through
// the proxy) and is killed if the proxy dies. The error is non-nil when the
// command could not be started or waited for.
func RunCommand(ctx context.Context, p *Proxy, cmd *exec.Cmd, in io.Reader, out io.Writer, signals <-chan os.Signal) (int, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer stdout.Close()
	cmd.Stdout = stdoutW
	setProcAttr(cmd)
	err = cmd.Start()
	_ = stdoutW.Close() // the command has its copy
	if err != nil {
		return -1, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	served := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case sig, ok := <-signals:
				if !ok {
					signals = nil
					continue
				}
				_ = cmd.Process.Signal(sig)
			case <-exited:
				select {
				case <-served:
				case <-time.After(exitGrace):
					_ = stdout.SetReadDeadline(time.Now())
				}
				return
			case <-served:
				return
			}
		}
	}()
	serveErr := p.Serve(ctx, in, out, stdout, stdin)
	close(served)
	<-exited
	<-forwarded
	code := 0
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		code = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	default:
		return -1, fmt.Errorf("waiting for %s: %w", cmd.Path, waitErr)
	}
	if serveErr != nil && !errors.Is(serveErr, os.ErrDeadlineExceeded) {
		return code, fmt.Errorf("reading %s's output: %w", cmd.Path, serveErr)
	}
	return code, nil
}
