package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
)

// defaultNATSURL is where `toolsentry serve`'s embedded server listens by
// default.
const defaultNATSURL = "nats://127.0.0.1:4222"

// connectTimeout bounds the dial of one server.
const connectTimeout = 5 * time.Second

// The environment variables that give the connection flags their defaults.
const (
	envNATSURL      = "TOOLSENTRY_NATS_URL"
	envPrefix       = "TOOLSENTRY_PREFIX"
	envNATSCreds    = "TOOLSENTRY_NATS_CREDS"
	envNATSNkey     = "TOOLSENTRY_NATS_NKEY"
	envNATSUser     = "TOOLSENTRY_NATS_USER"
	envNATSPassword = "TOOLSENTRY_NATS_PASSWORD"
	envTLSCA        = "TOOLSENTRY_TLS_CA"
	envTLSCert      = "TOOLSENTRY_TLS_CERT"
	envTLSKey       = "TOOLSENTRY_TLS_KEY"
	envInboxPrefix  = "TOOLSENTRY_NATS_INBOX_PREFIX"
)

// connFlagsHelp documents addConnFlags' flags, for the commands' help texts.
const connFlagsHelp = `Connection flags (each defaults to its environment variable, if set):
  --nats-url URLS      NATS server URL(s), comma separated
                       (default $TOOLSENTRY_NATS_URL, else ` + defaultNATSURL + `,
                       where ` + "`toolsentry serve`" + `'s embedded server listens)
  --prefix NAME        prefix of every subject, stream and bucket
                       (default $TOOLSENTRY_PREFIX, else toolsentry)
  --nats-creds FILE    user credentials file (JWT and seed) ($TOOLSENTRY_NATS_CREDS)
  --nats-nkey FILE     NKey seed file ($TOOLSENTRY_NATS_NKEY)
  --nats-user NAME     user name ($TOOLSENTRY_NATS_USER)
  --nats-password PW   password, with --nats-user ($TOOLSENTRY_NATS_PASSWORD)
  --tls-ca FILE        CA certificates to verify the server ($TOOLSENTRY_TLS_CA)
  --tls-cert FILE      client certificate, with --tls-key ($TOOLSENTRY_TLS_CERT)
  --tls-key FILE       client private key, with --tls-cert ($TOOLSENTRY_TLS_KEY)
  --nats-inbox-prefix P  subject prefix of reply inboxes, default _INBOX; a server whose
                       permissions give each role its own inboxes needs it
                       ($TOOLSENTRY_NATS_INBOX_PREFIX; deploy/nats/accounts.conf)
`

// connFlags are the flags of every command that talks to NATS. Fields hold
// the parsed values once the flag set has been parsed.
type connFlags struct {
	url      urlFlag
	prefix   string
	creds    string
	nkey     string
	user     string
	password string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	inbox    string
}

// urlFlag is the --nats-url value; it remembers whether the user chose a
// URL (with the flag or the environment), which `serve` needs to know to
// decide between an embedded server and a remote one.
type urlFlag struct {
	value string
	given bool
}

func (u *urlFlag) String() string { return u.value }

func (u *urlFlag) Set(v string) error {
	u.value, u.given = v, true
	return nil
}

// addConnFlags registers the connection flags on fs, each bound to its
// environment variable (see connFlagsHelp).
func addConnFlags(fs *flag.FlagSet) *connFlags {
	c := &connFlags{url: urlFlag{value: defaultNATSURL}}
	fs.Var(&c.url, "nats-url", "")
	bindEnv(fs, "nats-url", envNATSURL)
	fs.StringVar(&c.prefix, "prefix", events.DefaultPrefix, "")
	bindEnv(fs, "prefix", envPrefix)
	fs.StringVar(&c.creds, "nats-creds", "", "")
	bindEnv(fs, "nats-creds", envNATSCreds)
	fs.StringVar(&c.nkey, "nats-nkey", "", "")
	bindEnv(fs, "nats-nkey", envNATSNkey)
	fs.StringVar(&c.user, "nats-user", "", "")
	bindEnv(fs, "nats-user", envNATSUser)
	fs.StringVar(&c.password, "nats-password", "", "")
	bindEnv(fs, "nats-password", envNATSPassword)
	fs.StringVar(&c.tlsCA, "tls-ca", "", "")
	bindEnv(fs, "tls-ca", envTLSCA)
	fs.StringVar(&c.tlsCert, "tls-cert", "", "")
	bindEnv(fs, "tls-cert", envTLSCert)
	fs.StringVar(&c.tlsKey, "tls-key", "", "")
	bindEnv(fs, "tls-key", envTLSKey)
	fs.StringVar(&c.inbox, "nats-inbox-prefix", "", "")
	bindEnv(fs, "nats-inbox-prefix", envInboxPrefix)
	return c
}

// urlGiven reports whether a NATS URL was chosen with --nats-url or
// TOOLSENTRY_NATS_URL rather than left at its default.
func (c *connFlags) urlGiven() bool { return c.url.given }

// names returns the subjects, streams and buckets of --prefix.
func (c *connFlags) names() (events.Names, error) {
	n, err := events.NewNames(c.prefix)
	if err != nil {
		return events.Names{}, usageErrorf("--prefix: %s", strings.TrimPrefix(err.Error(), "events: "))
	}
	return n, nil
}

// options checks the flags' combinations and returns the nats.go options
// they stand for.
func (c *connFlags) options(name string) ([]nats.Option, error) {
	auth := 0
	for _, set := range []bool{c.creds != "", c.nkey != "", c.user != ""} {
		if set {
			auth++
		}
	}
	switch {
	case auth > 1:
		return nil, usageErrorf("--nats-creds, --nats-nkey and --nats-user exclude each other")
	case c.password != "" && c.user == "":
		return nil, usageErrorf("--nats-password needs --nats-user")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return nil, usageErrorf("--tls-cert and --tls-key go together")
	case strings.TrimSpace(c.url.value) == "":
		return nil, usageErrorf("--nats-url is empty")
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(connectTimeout),
		// A command-line tool reports a lost server instead of waiting.
		nats.MaxReconnects(2),
		nats.ReconnectWait(100 * time.Millisecond),
	}
	authOpts, err := c.authOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, authOpts...)
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	return opts, nil
}

// authOptions are the nats.go options of the authentication and inbox
// flags alone: serve's in-process connection to its embedded server uses
// them (it needs no TLS: the server does not ask it of in-process clients).
func (c *connFlags) authOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if c.inbox != "" {
		if strings.ContainsAny(c.inbox, "*> ") || strings.HasSuffix(c.inbox, ".") || strings.HasPrefix(c.inbox, ".") {
			return nil, usageErrorf("--nats-inbox-prefix %q: want subject tokens without wildcards, like _INBOX_workers", c.inbox)
		}
		opts = append(opts, nats.CustomInboxPrefix(c.inbox))
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", c.nkey, err)
		}
		opts = append(opts, o)
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	return opts, nil
}

// connect connects to --nats-url as client name (shown in the server's
// connection list) and returns the connection and its JetStream context.
// extra options go after the flags' (a long-running command passes
// nats.MaxReconnects(-1) to ride out a server restart). The caller closes
// the connection.
func (c *connFlags) connect(ctx context.Context, name string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := c.options(name)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, extra...)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(c.url.value, opts...)
		done <- result{nc, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() { // the dial ends within connectTimeout; close what it opens
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
	if r.err != nil {
		return nil, nil, c.connectError(c.displayURL(), r.err)
	}
	if err := c.checkInbox(r.nc); err != nil {
		r.nc.Close()
		return nil, nil, err
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		r.nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", c.displayURL(), err)
	}
	return r.nc, js, nil
}

// displayURL is --nats-url with passwords redacted, for messages.
func (c *connFlags) displayURL() string {
	parts := strings.Split(c.url.value, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			p = u.Redacted()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// notProvisioned turns a missing stream or bucket into the advice to run
// serve, which provisions them; other errors pass through wrapped.
func (c *connFlags) notProvisioned(err error, what string) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%s does not exist on %s: has `toolsentry serve` run against this server with --prefix %s? (it creates the streams and buckets)", what, c.displayURL(), c.prefix)
	}
	return fmt.Errorf("%s on %s: %w", what, c.displayURL(), err)
}
