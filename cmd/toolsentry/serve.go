package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the stream processor (with an embedded NATS server unless --nats-url is given)",
		usage: `Usage: toolsentry serve [flags]

Runs toolsentry: consumes tool telemetry from the TOOLSENTRY_TELEMETRY stream,
keeps baselines and usage in JetStream KV, and publishes verdicts to
TOOLSENTRY_VERDICTS (subjects toolsentry.verdicts.<guard>.<verdict>.<key>).
Malformed events go to TOOLSENTRY_DLQ (toolsentry.dlq.<reason>) with the
reason, and processing goes on.

Without --nats-url it starts an embedded NATS server with JetStream, storing
in --data-dir and listening on --listen, so agents and the NATS CLI can
connect. With --nats-url it uses an existing server or cluster.

SIGINT or SIGTERM drains: readiness goes off, in-flight events finish (up to
--shutdown-timeout), pending verdicts are flushed, and it exits 0.

Settings: every flag can also be set with the environment variable shown
(TOOLSENTRY_ and the flag name in upper case, '-' as '_') or as a key of a
YAML config file given with --config. The command line wins over the
environment, which wins over the file, which wins over the default. An
empty environment variable counts as unset.

  --config FILE           YAML file of settings, keys = flag names (TOOLSENTRY_CONFIG, default "");
                          an unknown key is an error naming it and its line. Example:
                              nats-url: nats://nats-1:4222,nats://nats-2:4222
                              replicas: 3
                              log-level: debug

NATS (without --nats-url serve runs an embedded server). The user, NKey and creds
flags exclude each other; with an embedded server they are serve's own credentials
when its --server-config requires authentication.
  --nats-url URLS         NATS server or cluster URLs, comma separated (TOOLSENTRY_NATS_URL,
                          default: none, an embedded server runs; other commands use
                          nats://127.0.0.1:4222)
  --nats-user NAME        user name (TOOLSENTRY_NATS_USER, default "")
  --nats-password PW      password, with --nats-user (TOOLSENTRY_NATS_PASSWORD, default "")
  --nats-nkey FILE        NKey seed file (TOOLSENTRY_NATS_NKEY, default "")
  --nats-creds FILE       user credentials file: JWT and NKey seed (TOOLSENTRY_NATS_CREDS, default "")
  --tls-ca FILE           CA certificates that verify the server (TOOLSENTRY_TLS_CA, default "")
  --tls-cert FILE         client certificate, with --tls-key (TOOLSENTRY_TLS_CERT, default "")
  --tls-key FILE          client private key, with --tls-cert (TOOLSENTRY_TLS_KEY, default "")
  --nats-inbox-prefix P   subject prefix of reply inboxes (TOOLSENTRY_NATS_INBOX_PREFIX,
                          default "" = _INBOX); deploy/nats/accounts.conf gives workers
                          _INBOX_workers
  --prefix NAME           prefix of subjects, streams and buckets (TOOLSENTRY_PREFIX, default "toolsentry")
  --nats-connect-timeout D  with --nats-url, how long a worker started before its NATS servers
                          waits for them, trying every second and saying so in its log and
                          /readyz; 0 exits at once (TOOLSENTRY_NATS_CONNECT_TIMEOUT, default 3m0s)

Embedded server (ignored when --nats-url or TOOLSENTRY_NATS_URL is set, and serve logs so:
a TOOLSENTRY_NATS_URL exported for the other commands points serve there too):
  --data-dir DIR          where streams and buckets are stored (TOOLSENTRY_DATA_DIR, default "toolsentry-data")
  --listen HOST:PORT      where NATS clients connect; port 0 picks a free one
                          (TOOLSENTRY_LISTEN, default "127.0.0.1:4222")
  --server-config FILE    nats-server configuration file: accounts, users, permissions, TLS,
                          limits; --listen and --data-dir override its host, port and store_dir
                          (TOOLSENTRY_SERVER_CONFIG, default "")

Processing:
  --workers N             handler calls at once per lane, across keys; 0 = 64
                          (TOOLSENTRY_WORKERS, default 0)
  --replicas N            replicas of streams and buckets: 3 on a cluster (TOOLSENTRY_REPLICAS, default 1)
  --max-deliver N         attempts at an event failing transiently before it is dead-lettered
                          (TOOLSENTRY_MAX_DELIVER, default 5)
  --ack-wait D            no longer used: lanes read from checkpoints, without acknowledgements;
                          accepted and ignored, with a warning (TOOLSENTRY_ACK_WAIT, default 0s)
  --telemetry-max-age D   how long telemetry is kept for replay; 0 keeps it forever
                          (TOOLSENTRY_TELEMETRY_MAX_AGE, default 720h0m0s)
` + scaleUsage + `  --shutdown-timeout D    how long a shutdown waits for in-flight events
                          (TOOLSENTRY_SHUTDOWN_TIMEOUT, default 10s)
  --signing-key FILE      nkeys seed file (from ` + "`toolsentry keygen`" + `) to sign every verdict with;
                          empty publishes unsigned verdicts (TOOLSENTRY_SIGNING_KEY, default "")

Operations:
  --http HOST:PORT        serves /livez, /readyz (503 with what it waits for while starting,
                          200 with the lag per lane once ready; see toolsentry status),
                          /metrics (Prometheus), POST /v1/traces
                          (OTLP/HTTP traces, protobuf or JSON: GenAI spans become telemetry)
                          and POST /v1/guard (an agent's payload, rewritten by the migration
                          in force, or 409 with the HALT: see toolsentry guard --help), and
                          the HTTP API: GET /v1/tools, /v1/tools/{id}, /v1/verdicts,
                          /v1/verdicts/stream (server-sent events), /v1/compositions,
                          /v1/compositions/{id}, /v1/agents, /v1/deadletters, POST
                          /v1/guard/composition, POST /v1/events (CloudEvents over HTTP),
                          GET /v1/openapi.json (see the README's "HTTP API"), and the
                          read-only dashboard at / (README "Dashboard"); --http "" disables
                          it. A non-loopback address needs --http-token or client
                          certificates, or --http-insecure
                          (TOOLSENTRY_HTTP, default "127.0.0.1:9700")
` + httpAuthUsage + `  --log-level LEVEL       debug, info, warn or error (TOOLSENTRY_LOG_LEVEL, default "info")
  --log-format FORMAT     json, console, or auto: console on a terminal, else JSON
                          (TOOLSENTRY_LOG_FORMAT, default "auto")

` + notifyServeUsage + `
Examples:
  toolsentry serve
  TOOLSENTRY_LOG_LEVEL=debug toolsentry serve --config /etc/toolsentry/serve.yaml --replicas 3
  nats pub --jetstream toolsentry.telemetry.schema.crm=2Elookup "$(cat observation.json)"
  toolsentry watch

  # three workers on a NATS cluster share 6 partitions (R3 streams and buckets)
  toolsentry serve --nats-url nats://n1:4222,nats://n2:4222 --replicas 3 --partitions 6 --member w1
`,
		run: runServe,
	})
}

type serveFlags struct {
	conn                                      *connFlags
	dataDir, listen, serverConfig, httpAddr   string
	workers, replicas, maxDeliver             int
	ackWait, telemetryMaxAge, shutdownTimeout time.Duration
	connectTimeout                            time.Duration
	logLevel, logFormat                       string
	signingKey                                string
	scale                                     *scaleFlags
	notify                                    *notifyFlags
	httpAuth                                  *httpAuthFlags
}

// serveStarted, when set (by tests), is called once the service is ready
// with the NATS URL and the HTTP address it serves.
var serveStarted func(natsURL, httpAddr string)

func runServe(ctx context.Context, args []string, io stdio) error {
	var f serveFlags
	fs := newServeFlagSet(&f, io.err)
	if err := parseSettings(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("serve takes no arguments, got %q", fs.Args())
	}
	if _, err := f.conn.names(); err != nil {
		return err
	}
	if err := f.scale.check(); err != nil {
		return err
	}
	if err := f.notify.check(f.conn.prefix); err != nil {
		return err
	}
	if _, err := f.httpAuth.load(f.httpAddr); err != nil {
		return err
	}
	log, err := newLogger(io.err, f.logLevel, f.logFormat)
	if err != nil {
		return usageErrorf("serve: %v", err)
	}
	ctx = log.WithContext(ctx)
	return serve(ctx, f, io)
}

// newServeFlagSet defines serve's flags on a new flag set that fills f.
// parseSettings adds --config and reads each flag's environment variable
// and config-file key.
func newServeFlagSet(f *serveFlags, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {}
	f.conn = addConnFlags(fs)
	fs.StringVar(&f.dataDir, "data-dir", "toolsentry-data", "")
	bindEnv(fs, "data-dir", "TOOLSENTRY_DATA_DIR")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "")
	bindEnv(fs, "listen", "TOOLSENTRY_LISTEN")
	fs.StringVar(&f.serverConfig, "server-config", "", "")
	bindEnv(fs, "server-config", "TOOLSENTRY_SERVER_CONFIG")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:9700", "")
	bindEnv(fs, "http", "TOOLSENTRY_HTTP")
	fs.IntVar(&f.workers, "workers", 0, "")
	bindEnv(fs, "workers", "TOOLSENTRY_WORKERS")
	fs.IntVar(&f.replicas, "replicas", 1, "")
	bindEnv(fs, "replicas", "TOOLSENTRY_REPLICAS")
	fs.DurationVar(&f.ackWait, "ack-wait", 0, "")
	bindEnv(fs, "ack-wait", "TOOLSENTRY_ACK_WAIT")
	fs.IntVar(&f.maxDeliver, "max-deliver", 5, "")
	bindEnv(fs, "max-deliver", "TOOLSENTRY_MAX_DELIVER")
	fs.DurationVar(&f.telemetryMaxAge, "telemetry-max-age", 720*time.Hour, "")
	bindEnv(fs, "telemetry-max-age", "TOOLSENTRY_TELEMETRY_MAX_AGE")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "")
	bindEnv(fs, "shutdown-timeout", "TOOLSENTRY_SHUTDOWN_TIMEOUT")
	fs.StringVar(&f.logLevel, "log-level", "info", "")
	bindEnv(fs, "log-level", "TOOLSENTRY_LOG_LEVEL")
	fs.StringVar(&f.logFormat, "log-format", "auto", "")
	bindEnv(fs, "log-format", "TOOLSENTRY_LOG_FORMAT")
	fs.StringVar(&f.signingKey, "signing-key", "", "")
	bindEnv(fs, "signing-key", envSigningKey)
	fs.DurationVar(&f.connectTimeout, "nats-connect-timeout", defaultConnectTimeout, "")
	bindEnv(fs, "nats-connect-timeout", "TOOLSENTRY_NATS_CONNECT_TIMEOUT")
	f.scale = addScaleFlags(fs)
	f.notify = addServeNotifyFlags(fs)
	f.httpAuth = addHTTPAuthFlags(fs)
	return fs
}

func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	case "auto":
		if fi, ok := w.(*os.File); ok {
			if st, err := fi.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
			}
		}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json, console or auto", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func serve(ctx context.Context, f serveFlags, io stdio) error {
	log := zerolog.Ctx(ctx)
	if err := checkServePorts(f); err != nil {
		return err
	}
	var stopping atomic.Bool
	var svc atomic.Pointer[consumer.Service]
	var starting startupDetail
	signer, err := loadServeSigner(ctx, f.signingKey)
	if err != nil {
		return err
	}

	// NATS: embedded unless a URL is given.
	var nc *nats.Conn
	var natsURL string
	if !f.conn.urlGiven() {
		host, portText, err := net.SplitHostPort(f.listen)
		if err != nil {
			return usageErrorf("--listen %q: %v", f.listen, err)
		}
		port, err := strconv.Atoi(portText)
		if err != nil || port < 0 || port > 65535 {
			return usageErrorf("--listen %q: bad port", f.listen)
		}
		if port == 0 {
			port = -1 // nats-server's "any free port"
		}
		if err := os.MkdirAll(f.dataDir, 0o755); err != nil {
			return fmt.Errorf("creating --data-dir: %w", err)
		}
		srv, err := consumer.StartServer(ctx, consumer.ServerOptions{
			StoreDir:   filepath.Join(f.dataDir, "jetstream"),
			Host:       host,
			Port:       port,
			ConfigFile: f.serverConfig,
			ServerName: "toolsentry",
		})
		if err != nil {
			return fmt.Errorf("starting the embedded NATS server: %w", err)
		}
		defer srv.Shutdown()
		natsURL = srv.ClientURL()
		if nc, err = f.conn.connectEmbedded(srv, logAsyncErrors(log)); err != nil {
			return err
		}
		log.Info().Str("url", natsURL).Str("data_dir", f.dataDir).Msg("embedded NATS server with JetStream running")
	} else {
		var err error
		natsURL = f.conn.displayURL()
		choice := remoteNATSChoice(f.conn)
		choice.log(log)
		nc, _, err = f.conn.connect(ctx, "toolsentry serve", nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), logAsyncErrors(log),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn().Err(err).Msg("disconnected from NATS") }),
			nats.ReconnectHandler(func(c *nats.Conn) { log.Info().Str("url", c.ConnectedUrlRedacted()).Msg("reconnected to NATS") }),
			// Started before its servers, it waits for them (awaitNATS).
			nats.RetryOnFailedConnect(f.connectTimeout > 0), nats.ReconnectErrHandler(starting.dialFailed))
		if err != nil {
			return choice.wrap(err)
		}
	}
	defer nc.Close()

	// HTTP: probes and metrics, up before the service so /livez answers
	// while state loads.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(reg)
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	lag := &lagSource{}
	mux.HandleFunc("/readyz", readyz(&stopping, &svc, &starting, lag))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle(otlpReceiver(ctx, nc, f.conn))
	guard := newGuardHandler(ctx, nc, f.conn.prefix)
	mux.Handle("/v1/guard", guard)
	if err := mountAPI(mux, nc, f.conn.prefix, guard); err != nil {
		return err
	}
	mountDashboard(mux)
	auth, err := f.httpAuth.load(f.httpAddr)
	if err != nil {
		return err
	}
	httpAddr := ""
	var httpSrv *http.Server
	if f.httpAddr != "" {
		ln, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", f.httpAddr, err)
		}
		httpAddr = ln.Addr().String()
		httpSrv = &http.Server{Handler: auth.wrap(mux), ReadHeaderTimeout: 5 * time.Second, ErrorLog: httpErrorLog(log)}
		go func() {
			if err := httpSrv.Serve(auth.listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("http server stopped")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = httpSrv.Shutdown(sctx)
		}()
	}

	if f.conn.urlGiven() {
		if err := f.conn.awaitNATS(ctx, nc, f.connectTimeout, &starting); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting: a requested stop
			}
			return err
		}
	}
	if f.ackWait != 0 {
		log.Warn().Dur("ack_wait", f.ackWait).Msg("--ack-wait (TOOLSENTRY_ACK_WAIT) no longer applies and is ignored: lanes read from checkpoints, without acknowledgements; remove it")
	}
	so := consumer.ServiceOptions{
		Config: consumer.Config{
			Prefix:          f.conn.prefix,
			Replicas:        f.replicas,
			MaxDeliver:      f.maxDeliver,
			TelemetryMaxAge: maxAge(f.telemetryMaxAge),
		},
		Engine:    engine.Options{Workers: f.workers, ShutdownTimeout: f.shutdownTimeout},
		Observer:  m,
		Kind:      metricKind,
		Processor: consumer.ProcessorOptions{Verdicts: m, Signer: signer},
	}
	f.scale.apply(&so)
	s, err := consumer.StartService(ctx, nc, so)
	if err != nil {
		return err
	}
	svc.Store(s)
	lag.res.Store(s.Resources)
	registerLag(reg, lag)
	notifyDone, err := startServeNotify(ctx, nc, f.notify, f.conn.prefix, reg)
	if err != nil {
		_ = s.Close()
		return err
	}
	defer notifyDone()
	log.Info().Str("nats", natsURL).Str("http", httpAddr).Msg("toolsentry ready")
	if serveStarted != nil {
		serveStarted(natsURL, httpAddr)
	}

	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down: readiness off, draining")
	case err := <-runErr:
		stopping.Store(true)
		_ = s.Close()
		return fmt.Errorf("consuming stopped: %w", err)
	}
	shutdown(ctx, &stopping, s, runErr, nc, f.shutdownTimeout)
	return nil
}

// metricKind is the kind label of an input: one of the telemetry kinds, or
// "other" for a subject no producer should use, so that junk subjects
// cannot grow the metrics' label set.
func metricKind(m *engine.Message) string {
	switch k := consumer.KindToken(m); k {
	case "schema", "invocation", "contract", "workflow", "quality", "observed":
		return k
	}
	return "other"
}

// maxAge maps the flag's 0 (keep forever) to the config's negative value.
func maxAge(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// readyz answers 200 only while the service consumes, with the lag of its
// partitions, and 503 from the moment shutdown begins; while serve starts,
// 503 with what it waits for (NATS, then provisioning).
func readyz(stopping *atomic.Bool, svc *atomic.Pointer[consumer.Service], starting *startupDetail, lag *lagSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := svc.Load()
		switch {
		case stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s == nil || !s.Ready():
			http.Error(w, "starting: "+starting.String(), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
			fmt.Fprintln(w, lag.describe(r.Context()))
		}
	}
}
