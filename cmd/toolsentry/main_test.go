package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestFlagErrorPrintedOnce gives every command a flag it does not have:
// the error names the flag once, on standard error, and the exit status
// is 2. (serve and mcp-proxy printed it twice, once from the flag package.)
func TestFlagErrorPrintedOnce(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			err := run(ctx, []string{name, "--no-such-flag"}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
			code := exitCode(err, &errOut)
			if code != 2 {
				t.Errorf("exit status %d, want 2 (err %v)", code, err)
			}
			if n := strings.Count(errOut.String(), "no-such-flag"); n != 1 {
				t.Errorf("standard error names the flag %d times, want once:\n%s", n, errOut.String())
			}
			if out.Len() > 0 {
				t.Errorf("standard output is not empty:\n%s", out.String())
			}
		})
	}
}
