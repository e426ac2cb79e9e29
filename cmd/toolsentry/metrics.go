package main

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsentry/toolsentry/consumer"
)

// metrics are toolsentry's Prometheus metrics. Labels are bounded: event
// kind, outcome, guard, verdict and dead-letter reason; never a tool, agent
// or composition id.
type metrics struct {
	consumed    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	redelivered *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	verdicts    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsentry_events_consumed_total",
			Help: "Telemetry events handled, by kind (schema, invocation, contract, workflow) and outcome (ack, retry, dead_letter, dead_letter_failed, shutdown).",
		}, []string{"kind", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolsentry_processing_seconds",
			Help:    "Time to handle one telemetry event: decode, guard, verdicts stored, state written.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"kind"}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsentry_redeliveries_total",
			Help: "Telemetry events delivered more than once, by kind.",
		}, []string{"kind"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsentry_dead_letters_total",
			Help: "Telemetry events written to the dead-letter stream, by kind and reason.",
		}, []string{"kind", "reason"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsentry_verdicts_total",
			Help: "Verdicts stored, by guard (schema, composition) and verdict; duplicates dropped by the stream are not counted.",
		}, []string{"guard", "verdict"}),
	}
	reg.MustRegister(m.consumed, m.latency, m.redelivered, m.deadLetters, m.verdicts)
	// Series of known labels start at 0, so that rate() and alerts see
	// them before the first event.
	for _, kind := range metricKinds {
		m.redelivered.WithLabelValues(kind)
		for _, o := range []consumer.Outcome{consumer.OutcomeAck, consumer.OutcomeDeadLetter} {
			m.consumed.WithLabelValues(kind, string(o))
		}
	}
	return m
}

// OnOutcome implements consumer.Observer.
func (m *metrics) OnOutcome(kind string, outcome consumer.Outcome, d time.Duration) {
	m.consumed.WithLabelValues(kind, string(outcome)).Inc()
	m.latency.WithLabelValues(kind).Observe(d.Seconds())
}

// OnRedelivery implements consumer.Observer.
func (m *metrics) OnRedelivery(kind string) { m.redelivered.WithLabelValues(kind).Inc() }

// OnDeadLetter implements consumer.Observer.
func (m *metrics) OnDeadLetter(kind, reason string) {
	m.deadLetters.WithLabelValues(kind, reason).Inc()
}

// metricKinds are the values of the kind label (see metricKind).
var metricKinds = []string{"schema", "invocation", "contract", "workflow", "quality", "other"}

// verdictHook, when set (by tests), is called with every verdict stored,
// while its input is still being handled (before its state is written and
// it is acknowledged).
var verdictHook func(guard, verdict string)

// OnVerdict implements consumer.VerdictObserver.
func (m *metrics) OnVerdict(guard, verdict string, duplicate bool) {
	if verdictHook != nil {
		verdictHook(guard, verdict)
	}
	if !duplicate {
		m.verdicts.WithLabelValues(guard, verdict).Inc()
	}
}

// registerPending exports the durable consumer's backlog, read from the
// server when Prometheus scrapes.
func registerPending(reg prometheus.Registerer, cons jetstream.Consumer) {
	info := func() *jetstream.ConsumerInfo {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		i, err := cons.Info(ctx)
		if err != nil {
			return nil
		}
		return i
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolsentry_consumer_pending",
			Help: "Telemetry events in the stream not yet delivered to the workers.",
		}, func() float64 {
			if i := info(); i != nil {
				return float64(i.NumPending)
			}
			return -1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolsentry_consumer_ack_pending",
			Help: "Telemetry events delivered to the workers and not yet acknowledged.",
		}, func() float64 {
			if i := info(); i != nil {
				return float64(i.NumAckPending)
			}
			return -1
		}),
	)
}
