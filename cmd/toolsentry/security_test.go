package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// nkeyPair returns a user NKey's public key and the path of its seed file.
func nkeyPair(t *testing.T) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	return pub, writeFile(t, "user.nk", string(seed))
}

// operatorConfig is a nats-server configuration in operator mode (JWT
// accounts, memory resolver) with one JetStream account, and the creds
// file of a user of that account and of a user of an unknown account.
func operatorConfig(t *testing.T) (conf, creds, strangerCreds string) {
	t.Helper()
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	op, _ := nkeys.CreateOperator()
	opPub := must(op.PublicKey())
	opJWT := must(jwt.NewOperatorClaims(opPub).Encode(op))

	account := func(name string, js bool) (nkeys.KeyPair, string, string) {
		kp, _ := nkeys.CreateAccount()
		pub := must(kp.PublicKey())
		c := jwt.NewAccountClaims(pub)
		c.Name = name
		if js {
			c.Limits.JetStreamLimits.DiskStorage = -1
			c.Limits.JetStreamLimits.MemoryStorage = -1
		}
		return kp, pub, must(c.Encode(op))
	}
	_, sysPub, sysJWT := account("SYS", false)
	acc, accPub, accJWT := account("TOOLSENTRY", true)
	stranger, _ := nkeys.CreateAccount() // never registered with the server

	userCreds := func(signer nkeys.KeyPair) string {
		u, _ := nkeys.CreateUser()
		uc := jwt.NewUserClaims(must(u.PublicKey()))
		seed, _ := u.Seed()
		b, err := jwt.FormatUserConfig(must(uc.Encode(signer)), seed)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, "user.creds", string(b))
	}
	conf = writeFile(t, "operator.conf", fmt.Sprintf(`operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, opJWT, sysPub, sysPub, sysJWT, accPub, accJWT))
	return conf, userCreds(acc), userCreds(stranger)
}

// TestServeConnectsWithEveryAuthFlag runs `serve --nats-url` against real
// servers that require a password, an NKey, a JWT creds file, or TLS with a
// client certificate: the right flags get it ready, wrong ones fail with a
// message naming the flag to check.
func TestServeConnectsWithEveryAuthFlag(t *testing.T) {
	unsetServeEnv(t)
	pub, seed := nkeyPair(t)
	_, otherSeed := nkeyPair(t)
	opConf, creds, strangerCreds := operatorConfig(t)
	pki := newTestPKI(t)

	cases := []struct {
		name   string
		config string
		good   []string
		bad    []string
		want   []string // in the error of bad
	}{
		{
			name:   "user and password",
			config: "authorization { users = [ {user: worker, password: \"s3cret pw\"} ] }\n",
			good:   []string{"--nats-user", "worker", "--nats-password", "s3cret pw"},
			bad:    []string{"--nats-user", "worker", "--nats-password", "wrong"},
			want:   []string{"authorization failed", `refused user "worker"`, "--nats-password", "TOOLSENTRY_NATS_PASSWORD"},
		},
		{
			name:   "no credentials for a server that wants them",
			config: "authorization { users = [ {user: worker, password: pw} ] }\n",
			good:   []string{"--nats-user", "worker", "--nats-password", "pw"},
			bad:    nil,
			want:   []string{"authorization failed", "requires authentication", "--nats-user"},
		},
		{
			name:   "nkey",
			config: fmt.Sprintf("authorization { users = [ {nkey: %s} ] }\n", pub),
			good:   []string{"--nats-nkey", seed},
			bad:    []string{"--nats-nkey", otherSeed},
			want:   []string{"authorization failed", "--nats-nkey " + otherSeed, "public key"},
		},
		{
			name:   "JWT creds",
			config: "operator",
			good:   []string{"--nats-creds", creds},
			bad:    []string{"--nats-creds", strangerCreds},
			want:   []string{"authorization failed", "--nats-creds " + strangerCreds},
		},
		{
			name: "TLS with client certificates",
			config: fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n",
				pki.serverCert, pki.serverKey, pki.caFile),
			good: []string{"--tls-ca", pki.caFile, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey},
			bad:  []string{"--tls-ca", pki.otherCA, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey},
			want: []string{"not signed by a CA this client trusts", "--tls-ca"},
		},
		{
			name: "TLS without a client certificate",
			config: fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n",
				pki.serverCert, pki.serverKey, pki.caFile),
			good: []string{"--tls-ca", pki.caFile, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey},
			bad:  []string{"--tls-ca", pki.caFile},
			want: []string{"refused this client's certificate", "--tls-cert"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := opConf
			if tc.config != "operator" {
				cfg = writeFile(t, "server.conf", tc.config)
			}
			srv := startSecuredServer(t, cfg)
			base := []string{"--nats-url", srv.ClientURL(), "--http", "127.0.0.1:0", "--log-format", "json"}

			r, err := tryServe(t, append(base, tc.bad...)...)
			if err == nil {
				r.stop(t)
				t.Fatalf("serve connected with %v", tc.bad)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}

			r = startServeArgs(t, append(base, tc.good...)...)
			code, _ := get(t, "http://"+r.httpAddr+"/readyz")
			if code != 200 {
				t.Errorf("/readyz %d with %v", code, tc.good)
			}
			if err := r.stop(t); err != nil {
				t.Errorf("serve returned %v", err)
			}
		})
	}
}

// TestServeEmbeddedServerConfigRequiresAuth: an embedded server whose
// --server-config requires users refuses serve's own connection without
// credentials, with a clear message, and accepts it with them.
func TestServeEmbeddedServerConfigRequiresAuth(t *testing.T) {
	unsetServeEnv(t)
	pki := newTestPKI(t)
	cfg := writeFile(t, "embedded.conf", fmt.Sprintf(`
authorization { users = [ {user: worker, password: w0rker}, {user: agent, password: ag3nt, permissions: {publish: ["toolsentry.telemetry.>", "$JS.API.STREAM.INFO.TOOLSENTRY_TELEMETRY"], subscribe: "_INBOX.>"}} ] }
tls { cert_file: %q, key_file: %q }
`, pki.serverCert, pki.serverKey))
	base := []string{"--server-config", cfg, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"}

	_, err := tryServe(t, base...)
	if err == nil || !strings.Contains(err.Error(), "authorization failed") || !strings.Contains(err.Error(), "--nats-user") {
		t.Fatalf("serve without credentials: %v; want authorization failed naming --nats-user", err)
	}

	r := startServeArgs(t, append(base, "--nats-user", "worker", "--nats-password", "w0rker")...)
	// A remote client needs TLS and a user: the agent publishes with both.
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "emit", "--nats-url", r.natsURL, "--tls-ca", pki.caFile,
		"--nats-user", "agent", "--nats-password", "wrong", "testdata/emit/invocation.json")
	if code != 1 || !strings.Contains(errOut, "authorization failed") {
		t.Errorf("emit with a wrong password: exit %d, %s", code, errOut)
	}
	_, errOut, code = runCtx(testCtx(t, cmdTimeout), "", "emit", "--nats-url", r.natsURL,
		"--nats-user", "agent", "--nats-password", "ag3nt", "testdata/emit/invocation.json")
	if code != 1 || !strings.Contains(errOut, "--tls-ca") {
		t.Errorf("emit without --tls-ca to a TLS server: exit %d, %s; want the advice to set --tls-ca", code, errOut)
	}
	_, errOut, code = runCtx(testCtx(t, cmdTimeout), "", "emit", "--nats-url", r.natsURL, "--tls-ca", pki.caFile,
		"--nats-user", "agent", "--nats-password", "ag3nt", "testdata/emit/invocation.json")
	if code != 0 {
		t.Errorf("emit with TLS and the agent's password: exit %d, %s", code, errOut)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("serve returned %v", err)
	}
}

func TestInboxPrefixFlag(t *testing.T) {
	for _, bad := range []string{"_INBOX.>", "a.*.b", "trailing."} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "baseline", "list", "--nats-url", freeURL(t), "--nats-inbox-prefix", bad)
		if code != 2 || !strings.Contains(errOut, "--nats-inbox-prefix") {
			t.Errorf("--nats-inbox-prefix %q: exit %d, %s; want 2 naming the flag", bad, code, errOut)
		}
	}
}
