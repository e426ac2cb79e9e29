package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func init() {
	register(&command{
		name:      "notify",
		summary:   "deliver verdicts to a webhook (JSON, Slack or Alertmanager), at least once",
		usageFunc: func() string { return notifyUsage },
		run:       runNotify,
	})
}

var notifyUsage = `Usage: toolsentry notify --webhook URL [flags]

Delivers verdicts from TOOLSENTRY_VERDICTS to a webhook, one POST per
verdict, until interrupted (exit status 0). It reads a durable consumer, so
delivery is at least once: a verdict is acknowledged only once the webhook
answered 2xx, and a restarted notify goes on where the durable stands.
` + "`toolsentry serve --notify-webhook URL`" + ` runs the same in serve's process.

Each POST carries the verdict's CloudEvent id as its idempotency key, in the
Idempotency-Key header and in the body (a receiver drops a key it already
has: a redelivery after a lost answer repeats it). Bodies hold what the
verdict holds: names, directives, field paths and types, digests; never an
argument's value.

Formats (--format):
  json          the verdict's data with idempotency_key, id, type, subject
                (the NATS subject), time, action and summary
  slack         a Slack incoming-webhook message: {"text": ..., "blocks": [...]}
  alertmanager  Alertmanager v2 alerts (point --webhook at
                http://alertmanager:9093/api/v2/alerts): a JSON array of one
                alert whose labels are alertname (Toolsentry<Verdict>), guard,
                verdict, action (PROCEED, MIGRATE, HALT), severity (critical
                for HALT, warning for MIGRATE, info), and tool, tool_id,
                server, agent (schema verdicts) or composition; annotations
                title, summary (the verdict's), description (the directive),
                affected, idempotency_key, manifest_digest; startsAt the
                verdict's time

Which verdicts (--filter): by default the verdicts whose action is not
PROCEED, the ones someone must act on:
  ` + strings.Join(defaultNotifyVerdicts(), ", ") + `
and not the others:
  ` + strings.Join(proceedVerdicts()[:3], ", ") + `,
  ` + strings.Join(proceedVerdicts()[3:], ", ") + `.
A --filter is a subject of the verdict stream,
toolsentry.verdicts.<guard>.<verdict>.<key> with wildcards, e.g.
toolsentry.verdicts.schema.drift_on_used_fields.> or toolsentry.verdicts.>
for every verdict.

Retries: a failed POST (no answer, a timeout, 5xx, 408, 429) is retried
after --retry-wait, doubling up to --retry-max-wait (a Retry-After answer
is honoured up to it); after --max-deliver attempts the verdict is given up
with an error log naming its id and stream sequence (it stays in the
verdict stream: ` + "`toolsentry watch --all --json`" + ` shows it). A 4xx other
than 408 and 429 means the webhook refuses that body: it is logged as an
error and not retried. Verdicts are delivered one at a time, in stream order
except where one waits for its retry.

Flags:
  --webhook URL        where to POST: an http:// or https:// URL
                       (default $TOOLSENTRY_NOTIFY_WEBHOOK; logs show only
                       its scheme and host, as a Slack URL's path is a secret)
  --format NAME        ` + strings.Join(notifyFormats, ", ") + ` (default json)
  --filter SUBJECT     a verdict subject filter; repeat it, or separate with
                       commas, for several (default: see above)
  --durable NAME       the durable consumer's name (default toolsentry-notify-
                       and a digest of the webhook, format and filters, so
                       each destination has its own); two notify processes
                       with one name share the deliveries
  --all                a new durable starts with the first verdict the stream
                       holds (default: with verdicts published from then on);
                       an existing durable goes on where it stands
  --timeout D          how long one POST may take (default 10s)
  --retry-wait D       the first retry's delay (default 1s)
  --retry-max-wait D   the longest delay between retries (default 5m)
  --max-deliver N      attempts per verdict before it is given up (default 10)
  --log-level LEVEL    debug, info, warn or error (default info)
  --log-format FORMAT  json, console, or auto (default auto)

` + connFlagsHelp + `
Examples:
  toolsentry notify --webhook https://hooks.slack.com/services/T000/B000/XXXX --format slack
  toolsentry notify --webhook http://alertmanager:9093/api/v2/alerts --format alertmanager
  toolsentry notify --webhook https://example.com/hook \
      --filter 'toolsentry.verdicts.schema.drift_on_used_fields.>'
`

// notifyServeUsage is the part of serve's help text about notifications.
const notifyServeUsage = `Notifications (the same as ` + "`toolsentry notify`" + `, in serve's process; see its --help):
  --notify-webhook URL    POST verdicts to URL; empty sends none (TOOLSENTRY_NOTIFY_WEBHOOK, default "")
  --notify-format NAME    json, slack or alertmanager (TOOLSENTRY_NOTIFY_FORMAT, default json)
  --notify-filter SUBJ    verdict subject filters, comma separated (TOOLSENTRY_NOTIFY_FILTER,
                          default "" = the verdicts whose action is not PROCEED)
  --notify-durable NAME   the durable consumer, shared by every serve process of a deployment,
                          so that each verdict is sent once (TOOLSENTRY_NOTIFY_DURABLE,
                          default "" = <prefix>-notify: toolsentry-notify, which
                          deploy/nats/accounts.conf allows the worker)
`

// The defaults of the notify settings.
const (
	defaultNotifyTimeout      = 10 * time.Second
	defaultNotifyRetryWait    = time.Second
	defaultNotifyRetryMaxWait = 5 * time.Minute
	defaultNotifyMaxDeliver   = 10
)

// notifyConfig is how a notifier delivers.
type notifyConfig struct {
	webhook      *url.URL
	format       string
	filters      []string // subjects of the verdict stream; resolved by check
	durable      string   // resolved by check
	deliverAll   bool
	timeout      time.Duration
	retryWait    time.Duration
	retryMaxWait time.Duration
	maxDeliver   int
}

// notifyFlags are the flag values a notifyConfig is made of.
type notifyFlags struct {
	webhook, format, durable string
	filters                  filterList
	cfg                      notifyConfig
}

// filterList is a repeatable, comma-separated flag.
type filterList []string

func (f *filterList) String() string { return strings.Join(*f, ",") }

func (f *filterList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f = append(*f, s)
		}
	}
	return nil
}

// config checks the flags and returns the config for prefix names.
// defaultDurable is the durable's name when --durable is empty ("" derives
// one from the destination).
func (f *notifyFlags) config(names events.Names, flagPrefix, defaultDurable string) (notifyConfig, error) {
	c := f.cfg
	u, err := parseWebhook(f.webhook)
	if err != nil {
		return c, usageErrorf("--%swebhook %v", flagPrefix, err)
	}
	c.webhook = u
	if !slices.Contains(notifyFormats, f.format) {
		return c, usageErrorf("--%sformat %q: want %s", flagPrefix, f.format, strings.Join(notifyFormats, ", "))
	}
	c.format = f.format
	c.filters = slices.Clone([]string(f.filters))
	if len(c.filters) == 0 {
		c.filters = defaultNotifyFilters(names)
	}
	for _, s := range c.filters {
		if err := checkVerdictFilter(names, s); err != nil {
			return c, usageErrorf("--%sfilter %q: %v", flagPrefix, s, err)
		}
	}
	slices.Sort(c.filters)
	c.filters = slices.Compact(c.filters)
	switch {
	case f.durable != "":
		c.durable = f.durable
	case defaultDurable != "":
		c.durable = defaultDurable
	default:
		c.durable = derivedDurable(names, c)
	}
	if !durableRE.MatchString(c.durable) {
		return c, usageErrorf("--%sdurable %q: want 1 to 64 of A-Z a-z 0-9 - _", flagPrefix, c.durable)
	}
	switch {
	case c.timeout <= 0:
		return c, usageErrorf("--timeout %s: want more than 0", c.timeout)
	case c.retryWait <= 0 || c.retryMaxWait < c.retryWait:
		return c, usageErrorf("--retry-wait %s, --retry-max-wait %s: want 0 < wait <= max wait", c.retryWait, c.retryMaxWait)
	case c.maxDeliver < 1:
		return c, usageErrorf("--max-deliver %d: want 1 or more", c.maxDeliver)
	}
	return c, nil
}

// parseWebhook checks a webhook URL: absolute, http or https, with a host.
func parseWebhook(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("is required: where to POST the verdicts (an http:// or https:// URL)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q: want an http:// or https:// URL with a host", s)
	}
	return u, nil
}

// redactedURL shows a webhook as its scheme and host only: a Slack (or any
// token-in-path) webhook URL is a secret.
func redactedURL(u *url.URL) string {
	s := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		s += "/…"
	}
	return s
}

var durableRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// derivedDurable names the durable of a destination: the prefix,
// "-notify-" and a digest of the webhook, format and filters.
func derivedDurable(names events.Names, c notifyConfig) string {
	h := sha256.Sum256([]byte(c.webhook.String() + "\x00" + c.format + "\x00" + strings.Join(c.filters, "\x00")))
	return names.Prefix() + "-notify-" + hex.EncodeToString(h[:6])
}

// checkVerdictFilter checks a subject filter of the verdict stream.
func checkVerdictFilter(names events.Names, s string) error {
	head := names.Prefix() + ".verdicts."
	if !strings.HasPrefix(s, head) {
		return fmt.Errorf("want a subject of the verdict stream, %s<guard>.<verdict>.<key>", head)
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return errors.New("an empty token")
		case strings.ContainsAny(t, " \t\r\n"):
			return errors.New("white space in a subject")
		case t == ">" && i != len(tokens)-1:
			return errors.New("'>' must be the last token")
		case len(t) > 1 && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("wildcard inside token %q", t)
		}
	}
	if len(tokens) > 5 {
		return fmt.Errorf("too many tokens: want %s<guard>.<verdict>.<key>", head)
	}
	return nil
}

// defaultNotifyVerdicts are the verdicts whose action is not PROCEED, from
// the guards' action table: the ones notify sends by default.
func defaultNotifyVerdicts() []string {
	var out []string
	for _, v := range schemaVerdictNames {
		if a, _ := toolschema.SchemaAction(guards.SchemaVerdict(v), nil, toolschema.MigrationPlan{}); a != guards.ActionProceed {
			out = append(out, v)
		}
	}
	for _, v := range compositionVerdictNames {
		if guards.CompositionAction(guards.CompositionVerdict(v)) != guards.ActionProceed {
			out = append(out, v)
		}
	}
	return out
}

// proceedVerdicts are the others.
func proceedVerdicts() []string {
	var out []string
	for _, v := range slices.Concat(schemaVerdictNames, compositionVerdictNames) {
		if !slices.Contains(defaultNotifyVerdicts(), v) {
			out = append(out, v)
		}
	}
	return out
}

// defaultNotifyFilters are the subject filters of defaultNotifyVerdicts.
func defaultNotifyFilters(names events.Names) []string {
	var out []string
	for _, v := range defaultNotifyVerdicts() {
		kind := events.KindSchemaVerdict
		if slices.Contains(compositionVerdictNames, v) {
			kind = events.KindCompositionVerdict
		}
		f, err := names.VerdictFilter(kind, v, "")
		if err != nil {
			panic(err) // the guards' own names are valid subjects
		}
		out = append(out, f)
	}
	return out
}

// addNotifyFlags defines the standalone command's notification flags.
func addNotifyFlags(fs *flag.FlagSet) *notifyFlags {
	f := &notifyFlags{}
	fs.StringVar(&f.webhook, "webhook", "", "")
	bindEnv(fs, "webhook", "TOOLSENTRY_NOTIFY_WEBHOOK")
	fs.StringVar(&f.format, "format", formatJSON, "")
	fs.Var(&f.filters, "filter", "")
	fs.StringVar(&f.durable, "durable", "", "")
	fs.BoolVar(&f.cfg.deliverAll, "all", false, "")
	fs.DurationVar(&f.cfg.timeout, "timeout", defaultNotifyTimeout, "")
	fs.DurationVar(&f.cfg.retryWait, "retry-wait", defaultNotifyRetryWait, "")
	fs.DurationVar(&f.cfg.retryMaxWait, "retry-max-wait", defaultNotifyRetryMaxWait, "")
	fs.IntVar(&f.cfg.maxDeliver, "max-deliver", defaultNotifyMaxDeliver, "")
	return f
}

// addServeNotifyFlags defines serve's --notify-* flags (parseSettings reads
// their environment variables and config keys).
func addServeNotifyFlags(fs *flag.FlagSet) *notifyFlags {
	f := &notifyFlags{cfg: notifyConfig{
		timeout: defaultNotifyTimeout, retryWait: defaultNotifyRetryWait,
		retryMaxWait: defaultNotifyRetryMaxWait, maxDeliver: defaultNotifyMaxDeliver,
	}}
	fs.StringVar(&f.webhook, "notify-webhook", "", "")
	fs.StringVar(&f.format, "notify-format", formatJSON, "")
	fs.Var(&f.filters, "notify-filter", "")
	fs.StringVar(&f.durable, "notify-durable", "", "")
	return f
}

func runNotify(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("notify", flag.ContinueOnError)
	nf := addNotifyFlags(fs)
	logLevel := fs.String("log-level", "info", "")
	logFormat := fs.String("log-format", "auto", "")
	conn := addConnFlags(fs)
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("notify takes no arguments, got %q", rest)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	cfg, err := nf.config(names, "", "")
	if err != nil {
		return err
	}
	log, err := newLogger(sio.err, *logLevel, *logFormat)
	if err != nil {
		return usageErrorf("notify: %v", err)
	}
	ctx = log.WithContext(ctx)

	nc, js, err := conn.connect(ctx, "toolsentry notify", nats.MaxReconnects(-1))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer nc.Close()
	n := newNotifier(names, cfg)
	cons, err := n.consumer(ctx, js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return conn.notProvisioned(err, "stream "+names.VerdictsStream())
	}
	err = n.run(ctx, cons)
	_ = nc.FlushTimeout(time.Second) // the last acks and naks
	s := n.stats.snapshot()
	log.Info().Int64("delivered", s.delivered).Int64("retried", s.retried).Int64("rejected", s.rejected).
		Int64("given_up", s.givenUp).Int64("skipped", s.skipped).Msg("notify stopped")
	return err
}

// check reports bad --notify-* settings of serve as a usage error, before
// serve starts anything.
func (f *notifyFlags) check(prefix string) error {
	_, err := f.serveConfig(prefix)
	return err
}

// serveConfig is the config of serve's notifier; a zero config (no
// webhook) when --notify-webhook is empty.
func (f *notifyFlags) serveConfig(prefix string) (notifyConfig, error) {
	if f.webhook == "" {
		if f.format != formatJSON || len(f.filters) > 0 || f.durable != "" {
			return notifyConfig{}, usageErrorf("--notify-format, --notify-filter and --notify-durable need --notify-webhook")
		}
		return notifyConfig{}, nil
	}
	names, err := events.NewNames(prefix)
	if err != nil {
		return notifyConfig{}, err
	}
	return f.config(names, "notify-", names.Prefix()+"-notify")
}

// startServeNotify starts serve's notifier when --notify-webhook is set:
// its durable is created now (an error stops serve), its deliveries run
// until ctx ends or the returned function is called, which stops them and
// waits.
func startServeNotify(ctx context.Context, nc *nats.Conn, f *notifyFlags, prefix string, reg prometheus.Registerer) (func(), error) {
	cfg, err := f.serveConfig(prefix)
	if err != nil || cfg.webhook == nil {
		return func() {}, err
	}
	names, _ := events.NewNames(prefix) // checked by serveConfig
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	n := newNotifier(names, cfg)
	cons, err := n.consumer(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	n.register(reg)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.run(ctx, cons); err != nil {
			zerolog.Ctx(ctx).Error().Err(err).Msg("notify stopped")
		}
	}()
	return func() { cancel(); <-done }, nil
}

// notifyStats counts deliveries.
type notifyStats struct {
	delivered, retried, rejected, givenUp, skipped atomic.Int64
}

type notifyCounts struct{ delivered, retried, rejected, givenUp, skipped int64 }

func (s *notifyStats) snapshot() notifyCounts {
	return notifyCounts{s.delivered.Load(), s.retried.Load(), s.rejected.Load(), s.givenUp.Load(), s.skipped.Load()}
}

// notifier delivers the verdicts of one durable consumer to one webhook.
type notifier struct {
	names  events.Names
	cfg    notifyConfig
	client *http.Client
	stats  notifyStats
}

func newNotifier(names events.Names, cfg notifyConfig) *notifier {
	return &notifier{names: names, cfg: cfg, client: &http.Client{Timeout: cfg.timeout}}
}

// register exports the counts as toolsentry_notify_deliveries_total{outcome}.
func (n *notifier) register(reg prometheus.Registerer) {
	for outcome, c := range map[string]*atomic.Int64{
		"delivered": &n.stats.delivered, "retried": &n.stats.retried, "rejected": &n.stats.rejected,
		"given_up": &n.stats.givenUp, "skipped": &n.stats.skipped,
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "toolsentry_notify_deliveries_total",
			Help:        "Verdicts notify handled, by outcome: delivered (2xx), retried (a failed attempt, retried later), rejected (a 4xx, not retried), given_up (--max-deliver attempts failed), skipped (not a verdict).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 { return float64(c.Load()) }))
	}
}

// ackWait is the consumer's redelivery deadline: longer than one POST, so
// that a slow webhook does not get the verdict twice at once.
func (n *notifier) ackWait() time.Duration { return n.cfg.timeout + 30*time.Second }

// consumer creates or updates the durable. An existing durable keeps its
// deliver policy (and so its place): only a new one starts per --all.
func (n *notifier) consumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	stream := n.names.VerdictsStream()
	cfg := jetstream.ConsumerConfig{
		Durable:        n.cfg.durable,
		Description:    "toolsentry notify to " + redactedURL(n.cfg.webhook) + " (" + n.cfg.format + ")",
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        n.ackWait(),
		MaxDeliver:     n.cfg.maxDeliver,
		MaxAckPending:  256,
		FilterSubjects: n.cfg.filters,
	}
	if n.cfg.deliverAll {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if old, err := js.Consumer(ctx, stream, n.cfg.durable); err == nil {
		info := old.CachedInfo()
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = info.Config.DeliverPolicy, info.Config.OptStartSeq, info.Config.OptStartTime
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("durable consumer %s on %s: %w", n.cfg.durable, stream, err)
	}
	if len(cfg.FilterSubjects) == 1 {
		cfg.FilterSubject, cfg.FilterSubjects = cfg.FilterSubjects[0], nil
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("durable consumer %s on %s: %w", n.cfg.durable, stream, err)
	}
	zerolog.Ctx(ctx).Info().Str("durable", n.cfg.durable).Str("webhook", redactedURL(n.cfg.webhook)).
		Str("format", n.cfg.format).Strs("filters", n.cfg.filters).Msg("notify delivering verdicts")
	return cons, nil
}

// run delivers the consumer's verdicts one at a time until ctx ends.
func (n *notifier) run(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(4))
	if err != nil {
		return fmt.Errorf("following verdicts: %w", err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				handBack(it)
				return nil
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("following verdicts: %w", err)
		}
		n.handle(ctx, msg)
	}
}

// handBack stops pulling and naks what the client holds already, so that
// the next notify on the durable gets it at once instead of after the ack
// wait.
func handBack(it jetstream.MessagesContext) {
	it.Drain()
	for {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			return
		}
		_ = msg.Nak()
	}
}

// attempt is the result of one POST.
type attempt struct {
	status     int           // 0 when no answer came
	err        error         // transport error, or nil
	retryAfter time.Duration // from a Retry-After answer
}

// retryable reports whether a failed attempt may succeed when repeated.
func (a attempt) retryable() bool {
	switch {
	case a.err != nil || a.status >= 500:
		return true
	case a.status == http.StatusRequestTimeout || a.status == http.StatusTooManyRequests:
		return true
	}
	return false
}

func (a attempt) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

func (a attempt) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return "HTTP " + strconv.Itoa(a.status)
}

// handle delivers one message and settles it.
func (n *notifier) handle(ctx context.Context, msg jetstream.Msg) {
	log := zerolog.Ctx(ctx)
	md, err := msg.Metadata()
	if err != nil {
		log.Warn().Err(err).Str("subject", msg.Subject()).Msg("notify: a message without metadata, skipped")
		n.stats.skipped.Add(1)
		_ = msg.Term()
		return
	}
	ev, err := n.names.Decode(msg.Subject(), msg.Headers(), msg.Data())
	var body []byte
	if err == nil {
		var nt notice
		if nt, err = newNotice(ev, msg.Subject()); err == nil {
			body, err = render(n.cfg.format, nt)
		}
	}
	if err != nil {
		// Not a verdict: a subscriber cannot dead-letter it (only workers
		// publish there); it stays in the stream, and the log says where.
		log.Error().Err(err).Uint64("stream_seq", md.Sequence.Stream).Str("subject", msg.Subject()).Msg("notify: not a verdict, skipped")
		n.stats.skipped.Add(1)
		_ = msg.TermWithReason("not a verdict")
		return
	}
	a := n.post(ctx, ev.ID, body)
	if ctx.Err() != nil && !a.ok() {
		_ = msg.Nak() // stopping: the next notify on the durable sends it
		return
	}
	n.settle(ctx, msg, md, ev.ID, a)
}

// settle maps an attempt to the message's fate, in one place: ack on 2xx;
// a retryable failure naks with backoff until --max-deliver attempts, then
// is given up; any other answer is rejected at once. Give-ups and
// rejections are terminated with a reason and logged as errors.
func (n *notifier) settle(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, id string, a attempt) {
	log := zerolog.Ctx(ctx)
	ev := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("verdict_id", id).Uint64("stream_seq", md.Sequence.Stream).Uint64("attempt", md.NumDelivered).
			Str("webhook", redactedURL(n.cfg.webhook)).Str("result", a.String())
	}
	switch {
	case a.ok():
		// Acked even while stopping: the webhook has it.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := msg.DoubleAck(actx); err != nil {
			log.Warn().Err(err).Str("verdict_id", id).Msg("notify: delivered, but the ack failed: it will be sent again")
		}
		n.stats.delivered.Add(1)
		ev(log.Debug()).Msg("notify: delivered")
	case !a.retryable():
		n.stats.rejected.Add(1)
		ev(log.Error()).Msg("notify: the webhook refused the verdict; not retried")
		_ = msg.TermWithReason("webhook answered " + a.String())
	case md.NumDelivered >= uint64(n.cfg.maxDeliver):
		n.stats.givenUp.Add(1)
		ev(log.Error()).Int("max_deliver", n.cfg.maxDeliver).Msg("notify: giving up on the verdict after the last attempt")
		_ = msg.TermWithReason("webhook failed " + strconv.Itoa(n.cfg.maxDeliver) + " times: " + a.String())
	default:
		n.stats.retried.Add(1)
		delay := n.backoff(md.NumDelivered, a.retryAfter)
		ev(log.Warn()).Dur("retry_in", delay).Msg("notify: delivery failed, will retry")
		_ = msg.NakWithDelay(delay)
	}
}

// backoff is the delay before attempt number n+1: --retry-wait doubled
// per attempt, at least what Retry-After asked, at most --retry-max-wait.
func (n *notifier) backoff(attempts uint64, retryAfter time.Duration) time.Duration {
	d := n.cfg.retryWait
	for i := uint64(1); i < attempts && d < n.cfg.retryMaxWait; i++ {
		d *= 2
	}
	d = max(d, retryAfter)
	return min(d, n.cfg.retryMaxWait)
}

// post sends one body to the webhook.
func (n *notifier) post(ctx context.Context, id string, body []byte) attempt {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.webhook.String(), bytes.NewReader(body))
	if err != nil {
		return attempt{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set("User-Agent", "toolsentry-notify")
	resp, err := n.client.Do(req)
	if err != nil {
		// The URL (a secret, for Slack) is in a *url.Error: say only what failed.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("POST %s: %w", redactedURL(n.cfg.webhook), ue.Err)
		}
		return attempt{err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return attempt{status: resp.StatusCode, retryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
