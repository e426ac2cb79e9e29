package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// defaultConnectTimeout is serve's --nats-connect-timeout: how long a worker
// started before its NATS servers waits for them.
const defaultConnectTimeout = 3 * time.Minute

// startupDetail is what /readyz says while serve starts: waiting for NATS,
// then provisioning. Safe for concurrent use.
type startupDetail struct {
	v       atomic.Pointer[string]
	lastErr atomic.Pointer[error] // the last failed dial while waiting for NATS
}

// provisioningDetail is /readyz's answer once NATS answers and until the
// service is ready.
const provisioningDetail = "streams, buckets and consumer not ready"

func (s *startupDetail) set(d string) { s.v.Store(&d) }

func (s *startupDetail) String() string {
	if p := s.v.Load(); p != nil {
		return *p
	}
	return provisioningDetail
}

// dialFailed is a nats.ReconnectErrHandler: it remembers why the last
// attempt to reach a server failed.
func (s *startupDetail) dialFailed(_ *nats.Conn, err error) {
	if err != nil {
		s.lastErr.Store(&err)
	}
}

func (s *startupDetail) lastDialError() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nats.ErrNoServers
}

// awaitNATS waits until nc, made with nats.RetryOnFailedConnect, is
// connected: at most bound, saying so in the log every few seconds and in
// detail (/readyz). A server that answers and refuses the client (its
// credentials, its TLS) is reported at once: waiting cannot fix it. A
// cancelled ctx returns its error.
func (c *connFlags) awaitNATS(ctx context.Context, nc *nats.Conn, bound time.Duration, detail *startupDetail) error {
	if nc.IsConnected() {
		return nil
	}
	log := zerolog.Ctx(ctx)
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var logged time.Time
	for {
		if nc.IsConnected() {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Dur("waited", time.Since(start).Round(time.Millisecond)).Msg("connected to NATS")
			detail.set(provisioningDetail)
			return nil
		}
		if err := nc.LastError(); err != nil && c.connectHint(err) != hintNotRunning {
			return c.connectError(c.displayURL(), err)
		}
		if nc.IsClosed() {
			return c.connectError(c.displayURL(), cmpErrNoServers(nc.LastError(), detail.lastDialError()))
		}
		waited := time.Since(start)
		if waited >= bound {
			return c.connectError(c.displayURL(), fmt.Errorf("%w within --nats-connect-timeout %s (last: %w)", nats.ErrNoServers, bound, detail.lastDialError()))
		}
		detail.set(fmt.Sprintf("waiting for NATS at %s for %s, at most %s (--nats-connect-timeout): %v",
			c.displayURL(), waited.Round(time.Second), bound, detail.lastDialError()))
		if time.Since(logged) >= 5*time.Second {
			logged = time.Now()
			log.Warn().Str("url", c.displayURL()).Err(detail.lastDialError()).Dur("waited", waited.Round(time.Second)).Dur("connect_timeout", bound).
				Msg("NATS is not reachable yet; trying again")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func cmpErrNoServers(err, dial error) error {
	if err != nil && !errors.Is(err, nats.ErrNoServers) {
		return err
	}
	return fmt.Errorf("%w (last: %w)", nats.ErrNoServers, dial)
}
