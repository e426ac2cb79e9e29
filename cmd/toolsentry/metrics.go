package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// lagSource reads the lag of the deployment's lanes for /metrics and
// /readyz, at most once a second: the one source of toolsentry_lag_events
// and toolsentry_consumer_pending. A held lane's lag is its holder's own
// measure, stored in its lease; a lane nobody holds is counted from its
// checkpoint. Safe for concurrent use.
type lagSource struct {
	res atomic.Pointer[consumer.Resources] // set once the service is ready

	mu   sync.Mutex
	at   time.Time
	lags []consumer.LaneLag
	err  error
}

// lagMaxAge is how long a lag read serves before it is read again.
const lagMaxAge = time.Second

func (l *lagSource) read(ctx context.Context) ([]consumer.LaneLag, error) {
	res := l.res.Load()
	if res == nil {
		return nil, errors.New("the service is not ready")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) < lagMaxAge {
		return l.lags, l.err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l.lags, l.err = consumer.ReadLag(ctx, res)
	l.at = time.Now()
	return l.lags, l.err
}

// describe is the lag line of /readyz: "lag: 12 events (tools.0: 5 by w1,
// composition: 7 by w2, directives: 0 by w1)".
func (l *lagSource) describe(ctx context.Context) string {
	lags, err := l.read(ctx)
	if err != nil {
		return "lag: unknown: " + err.Error()
	}
	var total uint64
	parts := make([]string, len(lags))
	for i, p := range lags {
		total += p.Lag
		owner := p.Owner
		if owner == "" {
			owner = "nobody"
		}
		parts[i] = fmt.Sprintf("%s: %d by %s", p.Lane, p.Lag, owner)
	}
	return fmt.Sprintf("lag: %d events (%s)", total, strings.Join(parts, ", "))
}

// lagCollector exports lagSource's reads when Prometheus scrapes; -1 when
// the server cannot be asked.
type lagCollector struct {
	src          *lagSource
	lag, pending *prometheus.Desc
}

func registerLag(reg prometheus.Registerer, src *lagSource) {
	reg.MustRegister(&lagCollector{
		src: src,
		lag: prometheus.NewDesc("toolsentry_lag_events",
			"Events stored and not yet applied, by lane (partition: a tool partition 0..N-1, composition, directives). Every worker reports every lane; aggregate with max by (partition).",
			[]string{"partition"}, nil),
		pending: prometheus.NewDesc("toolsentry_consumer_pending",
			"Events stored and not yet applied, all lanes together.", nil, nil),
	})
}

// Describe implements prometheus.Collector.
func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.pending
}

// lagLabel is the partition label of a lane: the tool partition's number,
// or the lane's name.
func lagLabel(lane string) string {
	if p, ok := strings.CutPrefix(lane, "tools."); ok {
		return p
	}
	return lane
}

// Collect implements prometheus.Collector.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	lags, err := c.src.read(context.Background())
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, -1)
		return
	}
	var pending uint64
	for _, p := range lags {
		pending += p.Lag
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(p.Lag), lagLabel(p.Lane))
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
}
