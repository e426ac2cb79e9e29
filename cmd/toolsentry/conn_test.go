package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// cmdTimeout bounds one in-process run of a command that talks to NATS.
const cmdTimeout = 20 * time.Second

// testCtx is t.Context() with a deadline.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// runCtx runs the dispatcher in-process with ctx, like runToolsentry.
func runCtx(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	err := run(ctx, args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// testNATS is a real embedded server with toolsentry's streams and buckets
// provisioned under a prefix.
type testNATS struct {
	url string
	js  jetstream.JetStream
	res *consumer.Resources
}

func startProvisioned(t *testing.T, prefix string) testNATS {
	t.Helper()
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	res, err := consumer.Provision(testCtx(t, 10*time.Second), js, consumer.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return testNATS{url: url, js: js, res: res}
}

// freeURL returns a NATS URL on which nothing listens.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "nats://" + addr
}

func TestConnectErrorNamesTheURL(t *testing.T) {
	url := freeURL(t)
	cases := [][]string{
		{"baseline", "list"},
		{"watch", "--count", "1"},
		{"emit", "testdata/emit/invocation.json"},
	}
	for _, args := range cases {
		t.Run(args[0], func(t *testing.T) {
			_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append(args, "--nats-url", url)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr: %s", code, errOut)
			}
			want := "cannot connect to NATS at " + url + ":"
			if !strings.Contains(errOut, want) || !strings.Contains(errOut, "is `toolsentry serve` running? set --nats-url") {
				t.Errorf("stderr %q does not say %q and how to fix it", errOut, want)
			}
		})
	}
}

func TestConnectErrorHidesThePassword(t *testing.T) {
	url := strings.Replace(freeURL(t), "nats://", "nats://alice:hunter2@", 1)
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "baseline", "list", "--nats-url", url)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, errOut)
	}
	if strings.Contains(errOut, "hunter2") || !strings.Contains(errOut, "nats://alice:xxxxx@127.0.0.1") {
		t.Errorf("stderr %q: want the URL with its password redacted", errOut)
	}
}

func TestConnFlagsDefaults(t *testing.T) {
	for _, name := range []string{envNATSURL, envPrefix, envNATSCreds, envNATSNkey, envNATSUser, envNATSPassword, envTLSCA, envTLSCert, envTLSKey} {
		t.Setenv(name, "")
	}
	parse := func(t *testing.T, args ...string) *connFlags {
		t.Helper()
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		c := addConnFlags(fs)
		if _, err := parseInterleaved(fs, args); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := parse(t)
	if c.url.value != defaultNATSURL || c.urlGiven() || c.prefix != "toolsentry" {
		t.Errorf("no flags, no environment: url %q given %v prefix %q; want %s, false, toolsentry", c.url.value, c.urlGiven(), c.prefix, defaultNATSURL)
	}
	c = parse(t, "--nats-url", "nats://a:1")
	if c.url.value != "nats://a:1" || !c.urlGiven() {
		t.Errorf("--nats-url: url %q given %v", c.url.value, c.urlGiven())
	}

	t.Setenv(envNATSURL, "nats://env:4222")
	t.Setenv(envPrefix, "acme")
	t.Setenv(envNATSUser, "bob")
	t.Setenv(envTLSCA, "/etc/ca.pem")
	c = parse(t)
	if c.url.value != "nats://env:4222" || !c.urlGiven() || c.prefix != "acme" || c.user != "bob" || c.tlsCA != "/etc/ca.pem" {
		t.Errorf("from the environment: %+v", *c)
	}
	c = parse(t, "--prefix", "other", "--nats-url", "nats://flag:1")
	if c.prefix != "other" || c.url.value != "nats://flag:1" {
		t.Errorf("flags over the environment: prefix %q url %q", c.prefix, c.url.value)
	}
	n, err := c.names()
	if err != nil || n.TelemetryStream() != "OTHER_TELEMETRY" {
		t.Errorf("names() = %v, %v; want the OTHER_ streams", n.TelemetryStream(), err)
	}
}

func TestConnFlagsRefuseBadCombinations(t *testing.T) {
	for _, args := range [][]string{
		{"--nats-creds", "a.creds", "--nats-user", "u"},
		{"--nats-nkey", "seed.nk", "--nats-creds", "a.creds"},
		{"--nats-password", "pw"},
		{"--tls-cert", "c.pem"},
		{"--tls-key", "k.pem"},
		{"--nats-url", ""},
		{"--prefix", "Not-Valid"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"baseline", "list"}, args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (usage); stderr: %s", code, errOut)
			}
		})
	}
}

func TestMissingStreamsAndBucketsSayRunServe(t *testing.T) {
	_, url := natstest.RunServer(t) // JetStream on, nothing provisioned
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"baseline", "list"}, "bucket toolsentry-baselines does not exist"},
		{[]string{"watch", "--count", "1"}, "stream TOOLSENTRY_VERDICTS does not exist"},
		{[]string{"emit", "testdata/emit/invocation.json"}, "stream TOOLSENTRY_TELEMETRY does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.args[0], func(t *testing.T) {
			_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append(tc.args, "--nats-url", url)...)
			if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "toolsentry serve") {
				t.Errorf("exit %d, stderr %q; want 1 and %q with advice to run serve", code, errOut, tc.want)
			}
		})
	}
}

func TestNATSCommandsHelp(t *testing.T) {
	for _, name := range []string{"emit", "watch", "baseline"} {
		t.Run(name, func(t *testing.T) {
			out, _, code := runCtx(testCtx(t, cmdTimeout), "", name, "--help")
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			for _, want := range []string{"Usage: toolsentry " + name, "--nats-url", defaultNATSURL, "--prefix", "--nats-creds", "--tls-ca", "Example"} {
				if !strings.Contains(out, want) {
					t.Errorf("help lacks %q", want)
				}
			}
		})
	}
}

// TestHelpNamesEveryFlag: every flag a command defines appears in its help.
func TestHelpNamesEveryFlag(t *testing.T) {
	flagsOf := map[string][]string{
		"emit":     {"server", "source", "keep-going", "dry-run"},
		"watch":    {"guard", "verdict", "key", "agent", "since", "all", "json", "count", "timeout"},
		"baseline": {"json", "fingerprint", "yes"},
	}
	for name, flags := range flagsOf {
		help := commands[name].help()
		for _, f := range flags {
			if !strings.Contains(help, fmt.Sprintf("--%s ", f)) {
				t.Errorf("%s --help does not document --%s", name, f)
			}
		}
	}
}
