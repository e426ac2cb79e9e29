package mcpproxy

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the server in a process group of its own, so that a
// signal to the proxy's group (Ctrl-C in a terminal) reaches it once,
// forwarded by the proxy, and has the kernel kill it if the proxy dies.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
