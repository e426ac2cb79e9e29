package mcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// RunCommand runs cmd (not started yet) as the MCP server of p: it connects
// the command's standard input and output to the proxy, forwards every
// signal received on signals to the command (nil: none), serves the session
// between in and out, and returns the command's exit status once its output
// has ended and it has exited: its exit code, or 128 + the signal number
// when a signal ended it. The command's standard error is cmd.Stderr as the
// caller set it. On Linux the command runs in a process group of its own
// (a signal to the proxy's group reaches it once, through the proxy) and is
// killed if the proxy dies. The error is non-nil when the command could not
// be started or waited for.
func RunCommand(ctx context.Context, p *Proxy, cmd *exec.Cmd, in io.Reader, out io.Writer, signals <-chan os.Signal) (int, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return -1, err
	}
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	stop := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case sig, ok := <-signals:
				if !ok {
					return
				}
				_ = cmd.Process.Signal(sig)
			case <-stop:
				return
			}
		}
	}()
	serveErr := p.Serve(ctx, in, out, stdout, stdin)
	waitErr := cmd.Wait()
	close(stop)
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
	if serveErr != nil && !errors.Is(serveErr, os.ErrClosed) {
		return code, fmt.Errorf("reading %s's output: %w", cmd.Path, serveErr)
	}
	return code, nil
}
