package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestServeSaysAtOnceThatAPortIsTaken holds the NATS or the HTTP address
// serve is told to listen on: serve fails within a second naming the flag
// and the address (it used to wait 10s and report "not ready for
// connections").
func TestServeSaysAtOnceThatAPortIsTaken(t *testing.T) {
	unsetServeEnv(t)
	for _, flagName := range []string{"--listen", "--http"} {
		t.Run(flagName, func(t *testing.T) {
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			addr := held.Addr().String()
			args := []string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", flagName, addr}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			start := time.Now()
			err = run(ctx, args, stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
			if took := time.Since(start); took > time.Second {
				t.Errorf("serve took %s to fail", took)
			}
			if !errors.Is(err, errPortInUse) {
				t.Fatalf("serve: %v, want %v", err, errPortInUse)
			}
			if msg := err.Error(); !strings.Contains(msg, flagName+" "+addr) {
				t.Errorf("error %q does not name %s %s", msg, flagName, addr)
			}
		})
	}
}
