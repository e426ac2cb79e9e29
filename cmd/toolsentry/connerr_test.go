package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMissingInboxPrefixIsNamed connects the roles of
// deploy/nats/accounts.conf without the --nats-inbox-prefix their
// permissions want: the command fails at once naming the flag, instead of
// waiting 5s for "context deadline exceeded".
func TestMissingInboxPrefixIsNamed(t *testing.T) {
	unsetServeEnv(t)
	pw := setDeployPasswords(t)
	srv := startSecuredServer(t, accountsConf)
	url := srv.ClientURL()

	t.Run("watch as subscriber", func(t *testing.T) {
		start := time.Now()
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "watch", "--all", "--nats-url", url, "--nats-user", "subscriber", "--nats-password", pw["subscriber"])
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("watch took %s to fail", took)
		}
		if code == 0 || !strings.Contains(errOut, "--nats-inbox-prefix") || !strings.Contains(errOut, "_INBOX_subscribers") || !strings.Contains(errOut, `user "subscriber"`) {
			t.Errorf("watch: exit %d, stderr %q; want it to name --nats-inbox-prefix and _INBOX_subscribers", code, errOut)
		}
		if strings.Contains(errOut, "deadline exceeded") {
			t.Errorf("watch still reports a timeout: %q", errOut)
		}
	})
	t.Run("serve as worker", func(t *testing.T) {
		start := time.Now()
		_, err := tryServe(t, "--nats-url", url, "--nats-user", "worker", "--nats-password", pw["worker"], "--http", "", "--log-format", "json")
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("serve took %s to fail", took)
		}
		if !errors.Is(err, errInboxDenied) || !strings.Contains(err.Error(), "_INBOX_workers") {
			t.Errorf("serve: %v, want %v naming _INBOX_workers", err, errInboxDenied)
		}
	})
	t.Run("with the prefix the subscriber connects", func(t *testing.T) {
		c := &connFlags{url: urlFlag{value: url, given: true}, prefix: "toolsentry", user: "subscriber", password: pw["subscriber"], inbox: "_INBOX_subscribers"}
		nc, _, err := c.connect(testCtx(t, cmdTimeout), "test")
		if err != nil {
			t.Fatalf("connect with the prefix: %v", err)
		}
		nc.Close()
	})
}
