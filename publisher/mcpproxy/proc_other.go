//go:build !linux

package mcpproxy

import "os/exec"

// setProcAttr leaves the server in the proxy's process group.
func setProcAttr(*exec.Cmd) {}
