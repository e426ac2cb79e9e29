package main

import (
	"fmt"

	"github.com/rs/zerolog"
)

// natsChoice explains a serve that uses an existing NATS server instead of
// its embedded one: which server, why (TOOLSENTRY_NATS_URL exported for the
// clients is the usual surprise), and that the embedded server's settings
// are then ignored.
type natsChoice struct {
	url    string // redacted
	reason string // "TOOLSENTRY_NATS_URL is set" or "--nats-url is set"
}

func remoteNATSChoice(c *connFlags) natsChoice {
	reason := "--nats-url is set"
	if v, ok := lookupEnv(envNATSURL); ok && v == c.url.value {
		reason = envNATSURL + " is set"
	}
	return natsChoice{url: c.displayURL(), reason: reason}
}

const embeddedIgnored = "no embedded NATS server runs, so --listen, --data-dir and --server-config are ignored"

// log says it before serve connects, so that a serve that waits for an
// unreachable server says what it is waiting for.
func (n natsChoice) log(log *zerolog.Logger) {
	ev := log.Info()
	if n.reason == envNATSURL+" is set" {
		ev = log.Warn() // exported for the clients, it also moves serve
	}
	ev.Str("nats", n.url).Str("why", n.reason).
		Msgf("using the NATS server at %s because %s: %s (unset it for serve to run its own)", n.url, n.reason, embeddedIgnored)
}

// wrap adds the choice to a connection error.
func (n natsChoice) wrap(err error) error {
	return fmt.Errorf("%w (serve uses %s because %s; %s: unset it for serve to run its own)", err, n.url, n.reason, embeddedIgnored)
}
