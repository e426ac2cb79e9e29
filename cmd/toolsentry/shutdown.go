package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
)

// The steps of a graceful shutdown, in their order.
const (
	stepReadinessOff = "readiness_off" // /readyz answers 503
	stepDrain        = "drain"         // stop fetching, let in-flight events finish under the deadline, hand the rest back
	stepFlush        = "flush"         // acks and naks in the client's buffer reach the server
	stepClose        = "close"         // the connection drains its subscriptions and closes
)

// shutdownStep, when set (by tests), is called as each step begins.
var shutdownStep func(step string)

// shutdown stops serve in order once its context is done: readiness off,
// the consumer drained (no new deliveries; in-flight events finish within
// --shutdown-timeout, each storing its verdicts and state before its ack;
// queued events are handed back to the server), pending publishes flushed,
// then the connection closed. The embedded server and the HTTP listener
// stop after it returns.
func shutdown(ctx context.Context, stopping *atomic.Bool, s *consumer.Service, runErr <-chan error, nc *nats.Conn, timeout time.Duration) {
	log := zerolog.Ctx(ctx)
	step := func(name string) {
		if shutdownStep != nil {
			shutdownStep(name)
		}
		log.Debug().Str("step", name).Msg("shutdown")
	}

	step(stepReadinessOff)
	stopping.Store(true)

	step(stepDrain)
	if err := s.Close(); err != nil {
		log.Warn().Err(err).Msg("shutdown did not finish every in-flight event; they will be redelivered")
	}
	<-runErr

	step(stepFlush)
	if err := nc.FlushTimeout(flushTimeout(timeout)); err != nil {
		log.Warn().Err(err).Msg("flushing acknowledgements to NATS")
	}

	step(stepClose)
	if !nc.IsClosed() {
		closed := nc.StatusChanged(nats.CLOSED)
		if err := nc.Drain(); err != nil {
			log.Warn().Err(err).Msg("draining the NATS connection")
		} else {
			select {
			case <-closed:
			case <-time.After(flushTimeout(timeout)):
				log.Warn().Msg("NATS connection did not drain in time; closing it")
			}
		}
		nc.Close()
	}
	log.Info().Msg("stopped")
}

// flushTimeout bounds the flush and the drain: a little of the shutdown
// budget, at least a second.
func flushTimeout(shutdown time.Duration) time.Duration {
	return max(time.Second, shutdown/4)
}
