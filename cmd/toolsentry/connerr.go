package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
)

// connectEmbedded connects serve to its embedded server in-process, with
// the authentication flags: a --server-config that requires authentication
// needs serve's own user (--nats-user and --nats-password, --nats-nkey or
// --nats-creds) like any other client.
func (c *connFlags) connectEmbedded(srv *consumer.Server, extra ...nats.Option) (*nats.Conn, error) {
	if _, err := c.options("toolsentry serve"); err != nil {
		return nil, err
	}
	opts, err := c.authOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name("toolsentry serve"), nats.InProcessServer(srv.NATS()))
	opts = append(opts, extra...)
	// In-process, the server asks for no TLS even when its clients must use
	// it: connect with nats:// whatever ClientURL says.
	url := "nats://" + strings.TrimPrefix(strings.TrimPrefix(srv.ClientURL(), "tls://"), "nats://")
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		// An in-process connection that the server refuses sees its pipe
		// closed before the -ERR: say what the server wants.
		if v, verr := srv.NATS().Varz(nil); verr == nil && v.AuthRequired && errors.Is(err, io.ErrClosedPipe) {
			err = fmt.Errorf("%w (%v)", nats.ErrAuthorization, err)
		}
		return nil, c.connectError("the embedded server "+srv.ClientURL(), err)
	}
	if err := c.checkInbox(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// connectError explains a failed connection to where: what the server
// refused, and which flag (and environment variable) to check. The cause
// stays wrapped for errors.Is.
func (c *connFlags) connectError(where string, err error) error {
	return fmt.Errorf("cannot connect to NATS at %s: %w — %s", where, err, c.connectHint(err))
}

func (c *connFlags) connectHint(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return "authorization failed: " + c.authHint()
	case errors.As(err, &unknownCA), errors.As(err, &verify) && errors.As(verify.Err, &unknownCA):
		return "TLS: the server's certificate is not signed by a CA this client trusts: set --tls-ca (TOOLSENTRY_TLS_CA) to the CA file that signed it"
	case errors.As(err, &hostname):
		return "TLS: the server's certificate is not valid for this host name: connect with a name the certificate lists in --nats-url"
	case errors.As(err, &invalid):
		return "TLS: the server's certificate is invalid (expired or not for server use)"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "the server requires TLS: set --tls-ca (TOOLSENTRY_TLS_CA), and --tls-cert and --tls-key if it asks for a client certificate"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "TLS flags are set but the server does not offer TLS: remove --tls-ca, --tls-cert and --tls-key, or enable TLS on the server"
	case isTLSAlert(err, "certificate required"), isTLSAlert(err, "bad certificate"), isTLSAlert(err, "unknown certificate authority"):
		return "TLS: the server refused this client's certificate: set --tls-cert and --tls-key (TOOLSENTRY_TLS_CERT, TOOLSENTRY_TLS_KEY) to a certificate its CA signed"
	case errors.Is(err, nats.ErrTLS) && c.tlsCert == "":
		return "TLS: the server closed the connection after the handshake: it refused this client's certificate, or wants one: set --tls-cert and --tls-key (TOOLSENTRY_TLS_CERT, TOOLSENTRY_TLS_KEY)"
	case errors.Is(err, nats.ErrTLS):
		return "TLS: the server refused this client's certificate: check that --tls-cert and --tls-key (TOOLSENTRY_TLS_CERT, TOOLSENTRY_TLS_KEY) hold a certificate its CA signed"
	}
	return hintNotRunning
}

// hintNotRunning is connectHint's answer to an error that is not a refusal:
// no server answered.
const hintNotRunning = "is `toolsentry serve` running? set --nats-url"

// logAsyncErrors logs the errors the server reports after the connection
// is up (a permission violation, a slow consumer) instead of dropping them:
// they tell an operator which permission a deployment lacks.
func logAsyncErrors(log *zerolog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		ev := log.Error().Err(err)
		if sub != nil {
			ev = ev.Str("subscription", sub.Subject)
		}
		ev.Msg("NATS reported an error")
	})
}

// authHint names the flags of the credentials this client sent.
func (c *connFlags) authHint() string {
	switch {
	case c.creds != "":
		return fmt.Sprintf("the server refused the credentials in --nats-creds %s (TOOLSENTRY_NATS_CREDS): are they for this server's operator and account, and not expired?", c.creds)
	case c.nkey != "":
		return fmt.Sprintf("the server refused the NKey of --nats-nkey %s (TOOLSENTRY_NATS_NKEY): is its public key in the server's users?", c.nkey)
	case c.user != "":
		return fmt.Sprintf("the server refused user %q: check --nats-user and --nats-password (TOOLSENTRY_NATS_USER, TOOLSENTRY_NATS_PASSWORD)", c.user)
	}
	return "the server requires authentication: set --nats-user and --nats-password, --nats-nkey or --nats-creds (or TOOLSENTRY_NATS_USER, ...)"
}

// isTLSAlert reports whether err is a TLS alert the server sent. Go's
// crypto/tls does not export remote alerts as a type, so this one check
// reads the text ("remote error: tls: certificate required").
func isTLSAlert(err error, alert string) bool {
	return err != nil && strings.Contains(err.Error(), "remote error: tls: "+alert)
}

// errInboxDenied marks a connection whose user may not subscribe to its
// reply inboxes: every request (each JetStream and KV call) would wait for
// its timeout and fail with "context deadline exceeded".
var errInboxDenied = errors.New("the server does not let this user receive replies")

// checkInbox subscribes to one of the connection's reply inboxes and waits
// for the server's answer, so that a user whose permissions want another
// --nats-inbox-prefix is told so at connect instead of after a request's
// timeout. Other failures are left to the command's first request.
func (c *connFlags) checkInbox(nc *nats.Conn) error {
	subject := nc.NewInbox()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe() //nolint:errcheck // the probe's result is in LastError
	if err := nc.FlushTimeout(connectTimeout); err != nil {
		return nil
	}
	last := nc.LastError()
	if !errors.Is(last, nats.ErrPermissionViolation) || !strings.Contains(last.Error(), subject) {
		return nil
	}
	prefix := c.inbox
	if prefix == "" {
		prefix = strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	who := "this user"
	if c.user != "" {
		who = fmt.Sprintf("user %q", c.user)
	}
	return fmt.Errorf("%w: %s may not subscribe to its reply inboxes %s.> (%v) — set --nats-inbox-prefix (TOOLSENTRY_NATS_INBOX_PREFIX) to the prefix its permissions allow: with deploy/nats/accounts.conf, _INBOX_workers for serve and _INBOX_subscribers for watch and other subscribers",
		errInboxDenied, who, prefix, last)
}
