package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// errPortInUse marks a listen address that another process holds.
var errPortInUse = errors.New("the address is in use")

// checkServePorts tells at once when an address serve must listen on is
// taken (another serve, a nats-server, or anything else), before anything
// starts: the embedded server would otherwise log the bind error and wait
// for readiness until its timeout. Port 0 always passes; an address that
// cannot be probed for another reason is left to the real listen.
func checkServePorts(f serveFlags) error {
	if !f.conn.urlGiven() {
		if err := probeListen("--listen", "TOOLSENTRY_LISTEN", f.listen,
			"another `toolsentry serve` or a nats-server is running: stop it, or give this one another --listen (port 0 picks a free one; clients then need --nats-url)"); err != nil {
			return err
		}
	}
	if f.httpAddr != "" {
		return probeListen("--http", "TOOLSENTRY_HTTP", f.httpAddr,
			"another `toolsentry serve` is running: stop it, or give this one another --http (port 0 picks a free one)")
	}
	return nil
}

func probeListen(flagName, envVar, addr, hint string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s %s (%s): %w: %s", flagName, addr, envVar, errPortInUse, hint)
		}
		return nil
	}
	return ln.Close()
}
