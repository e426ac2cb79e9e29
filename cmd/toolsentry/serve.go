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

Flags (each also read from the environment variable shown):
  --nats-url URL          NATS server or cluster to use; when neither it nor TOOLSENTRY_NATS_URL
                          is set, serve runs an embedded server
  --nats-creds, --nats-nkey, --nats-user, --nats-password, --tls-ca, --tls-cert, --tls-key
                          client authentication and TLS for --nats-url (TOOLSENTRY_NATS_CREDS, ...)
  --data-dir DIR          where the embedded server stores streams and buckets
                          (TOOLSENTRY_DATA_DIR, default "toolsentry-data")
  --listen HOST:PORT      where the embedded server accepts NATS clients; port 0 picks a free one
                          (TOOLSENTRY_LISTEN, default "127.0.0.1:4222")
  --server-config FILE    nats-server configuration file for the embedded server (auth, TLS, limits)
                          (TOOLSENTRY_SERVER_CONFIG, default "")
  --http HOST:PORT        serves /livez, /readyz and /metrics; empty disables it
                          (TOOLSENTRY_HTTP, default "127.0.0.1:9700")
  --prefix NAME           prefix of subjects, streams and buckets (TOOLSENTRY_PREFIX, default "toolsentry")
  --workers N             events handled at once, across keys (TOOLSENTRY_WORKERS, default 0 = 8 x CPUs, at least 16)
  --replicas N            replicas of streams and buckets: 3 on a cluster (TOOLSENTRY_REPLICAS, default 1)
  --ack-wait D            redelivery deadline of an unacknowledged event (TOOLSENTRY_ACK_WAIT, default 30s)
  --max-deliver N         deliveries before a failing event is dead-lettered (TOOLSENTRY_MAX_DELIVER, default 5)
  --telemetry-max-age D   how long telemetry is kept for replay; 0 keeps it forever
                          (TOOLSENTRY_TELEMETRY_MAX_AGE, default 720h)
` + scaleUsage + `  --shutdown-timeout D    how long a shutdown waits for in-flight events (TOOLSENTRY_SHUTDOWN_TIMEOUT, default 10s)
  --log-level LEVEL       debug, info, warn or error (TOOLSENTRY_LOG_LEVEL, default "info")
  --log-format FORMAT     json, console, or auto: console on a terminal (TOOLSENTRY_LOG_FORMAT, default "auto")

Example:
  toolsentry serve
  nats pub --jetstream toolsentry.telemetry.schema.crm=2Elookup "$(cat observation.json)"
  toolsentry watch

  # three workers on a NATS cluster share 6 partitions (R3 streams and buckets)
  toolsentry serve --nats-url nats://n1:4222,nats://n2:4222 --replicas 3 --partitions 6 --member w1
`,
		run: runServe,
	})
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

type serveFlags struct {
	conn                                      *connFlags
	dataDir, listen, serverConfig, httpAddr   string
	workers, replicas, maxDeliver             int
	ackWait, telemetryMaxAge, shutdownTimeout time.Duration
	logLevel, logFormat                       string
	scale                                     *scaleFlags
}

// serveStarted, when set (by tests), is called once the service is ready
// with the NATS URL and the HTTP address it serves.
var serveStarted func(natsURL, httpAddr string)

func runServe(ctx context.Context, args []string, io stdio) error {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {}
	f.conn = addConnFlags(fs)
	fs.StringVar(&f.dataDir, "data-dir", env("TOOLSENTRY_DATA_DIR", "toolsentry-data"), "")
	fs.StringVar(&f.listen, "listen", env("TOOLSENTRY_LISTEN", "127.0.0.1:4222"), "")
	fs.StringVar(&f.serverConfig, "server-config", env("TOOLSENTRY_SERVER_CONFIG", ""), "")
	fs.StringVar(&f.httpAddr, "http", env("TOOLSENTRY_HTTP", "127.0.0.1:9700"), "")
	fs.IntVar(&f.workers, "workers", envInt("TOOLSENTRY_WORKERS", 0), "")
	fs.IntVar(&f.replicas, "replicas", envInt("TOOLSENTRY_REPLICAS", 1), "")
	fs.DurationVar(&f.ackWait, "ack-wait", envDuration("TOOLSENTRY_ACK_WAIT", 30*time.Second), "")
	fs.IntVar(&f.maxDeliver, "max-deliver", envInt("TOOLSENTRY_MAX_DELIVER", 5), "")
	fs.DurationVar(&f.telemetryMaxAge, "telemetry-max-age", envDuration("TOOLSENTRY_TELEMETRY_MAX_AGE", 720*time.Hour), "")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", envDuration("TOOLSENTRY_SHUTDOWN_TIMEOUT", 10*time.Second), "")
	fs.StringVar(&f.logLevel, "log-level", env("TOOLSENTRY_LOG_LEVEL", "info"), "")
	fs.StringVar(&f.logFormat, "log-format", env("TOOLSENTRY_LOG_FORMAT", "auto"), "")
	f.scale = addScaleFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageErrorf("serve: %v (see toolsentry serve --help)", err)
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
	log, err := newLogger(io.err, f.logLevel, f.logFormat)
	if err != nil {
		return usageErrorf("serve: %v", err)
	}
	ctx = log.WithContext(ctx)
	return serve(ctx, f, io)
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
	var stopping atomic.Bool
	var svc atomic.Pointer[consumer.Service]

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
		if nc, err = nats.Connect(natsURL, nats.Name("toolsentry serve"), nats.InProcessServer(srv.NATS())); err != nil {
			return fmt.Errorf("connecting to the embedded NATS server: %w", err)
		}
		log.Info().Str("url", natsURL).Str("data_dir", f.dataDir).Msg("embedded NATS server with JetStream running")
	} else {
		var err error
		natsURL = f.conn.displayURL()
		nc, _, err = f.conn.connect(ctx, "toolsentry serve", nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn().Err(err).Msg("disconnected from NATS") }),
			nats.ReconnectHandler(func(c *nats.Conn) { log.Info().Str("url", c.ConnectedUrlRedacted()).Msg("reconnected to NATS") }))
		if err != nil {
			return err
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
	mux.HandleFunc("/readyz", readyz(&stopping, &svc))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	httpAddr := ""
	var httpSrv *http.Server
	if f.httpAddr != "" {
		ln, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", f.httpAddr, err)
		}
		httpAddr = ln.Addr().String()
		httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("http server stopped")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = httpSrv.Shutdown(sctx)
		}()
	}

	so := consumer.ServiceOptions{
		Config: consumer.Config{
			Prefix:          f.conn.prefix,
			Replicas:        f.replicas,
			AckWait:         f.ackWait,
			MaxDeliver:      f.maxDeliver,
			TelemetryMaxAge: maxAge(f.telemetryMaxAge),
		},
		Engine:    consumer.Options{Workers: f.workers, ShutdownTimeout: f.shutdownTimeout, Observer: m, Kind: metricKind},
		Processor: consumer.ProcessorOptions{Verdicts: m},
	}
	f.scale.apply(&so)
	s, err := consumer.StartService(ctx, nc, so)
	if err != nil {
		return err
	}
	svc.Store(s)
	registerPending(reg, s.Resources.Consumer)
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
	stopping.Store(true)
	if err := s.Close(); err != nil {
		log.Warn().Err(err).Msg("shutdown did not finish every in-flight event; they will be redelivered")
	}
	<-runErr
	if err := nc.Drain(); err != nil {
		log.Warn().Err(err).Msg("draining the NATS connection")
	}
	log.Info().Msg("stopped")
	return nil
}

// metricKind is the kind label of an input: one of the telemetry kinds, or
// "other" for a subject no producer should use, so that junk subjects
// cannot grow the metrics' label set.
func metricKind(m *consumer.Message) string {
	switch k := consumer.KindToken(m); k {
	case "schema", "invocation", "contract", "workflow":
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

// readyz answers 200 only while the service consumes, and 503 from the
// moment shutdown begins.
func readyz(stopping *atomic.Bool, svc *atomic.Pointer[consumer.Service]) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		s := svc.Load()
		switch {
		case stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s == nil || !s.Ready():
			http.Error(w, "starting: streams, buckets and consumer not ready", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	}
}
