package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// DefaultReadyTimeout bounds how long StartServer waits for the embedded
// server to accept connections.
const DefaultReadyTimeout = 10 * time.Second

// ServerOptions configure an embedded nats-server with JetStream.
type ServerOptions struct {
	// StoreDir is where JetStream keeps its files. Required unless
	// ConfigFile sets store_dir. Restarting on the same directory recovers
	// the streams, the consumer positions and the buckets.
	StoreDir string
	// Host to listen on for clients; default 127.0.0.1 (the config file's
	// value if one is given).
	Host string
	// Port to listen on for clients: 0 takes the config file's value or
	// 4222, -1 a random free port (tests).
	Port int
	// ConfigFile is an optional nats-server configuration file, read with
	// nats-server's own parser (server.ProcessConfigFile). Host, Port and
	// StoreDir above override its values when set; JetStream is always on.
	ConfigFile string
	// ServerName names the server (default: nats-server's generated id).
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections
	// (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
}

// Server is a running embedded nats-server.
type Server struct {
	ns       *server.Server
	storeDir string
	once     sync.Once
}

// StartServer starts an in-process nats-server with JetStream and waits until
// it accepts connections. The server logs through zerolog.Ctx(ctx). Call
// Shutdown to stop it.
func StartServer(ctx context.Context, o ServerOptions) (*Server, error) {
	var opts *server.Options
	if o.ConfigFile != "" {
		fo, err := server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("reading nats-server config %s: %w", o.ConfigFile, err)
		}
		opts = fo
	} else {
		opts = &server.Options{
			Host:                  "127.0.0.1",
			MaxControlLine:        4096,
			DisableShortFirstPing: true,
		}
	}
	if o.Host != "" {
		opts.Host = o.Host
	}
	if o.Port != 0 {
		opts.Port = o.Port
	}
	if o.StoreDir != "" {
		opts.StoreDir = o.StoreDir
	}
	if o.ServerName != "" {
		opts.ServerName = o.ServerName
	}
	if opts.StoreDir == "" {
		return nil, fmt.Errorf("%w: embedded server: store dir is required", ErrInvalidConfig)
	}
	opts.JetStream = true
	opts.NoSigs = true // the embedding process owns its signals

	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating embedded nats-server: %w", err)
	}
	ns.SetLoggerV2(serverLogger{l: zerolog.Ctx(ctx)}, opts.Debug, opts.Trace, false)

	ready := o.ReadyTimeout
	if ready <= 0 {
		ready = DefaultReadyTimeout
	}
	go ns.Start()
	if !ns.ReadyForConnections(ready) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("starting embedded nats-server: %w", errNotReady(ready))
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, errors.New("starting embedded nats-server: JetStream did not start")
	}
	return &Server{ns: ns, storeDir: opts.StoreDir}, nil
}

func errNotReady(d time.Duration) error {
	return fmt.Errorf("not ready for connections within %s", d)
}

// ClientURL is the URL clients connect to (nats://127.0.0.1:port).
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Port is the port the server listens on, useful to restart on the same one.
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	_, p, err := net.SplitHostPort(s.ns.Addr().String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// StoreDir is the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// NATS returns the underlying nats-server, for monitoring and tests.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped. It is
// idempotent and safe to call concurrently.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// serverLogger adapts zerolog to nats-server's Logger.
type serverLogger struct{ l *zerolog.Logger }

func (s serverLogger) Noticef(format string, v ...any) { s.l.Info().Msgf(format, v...) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn().Msgf(format, v...) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s serverLogger) Errorf(format string, v ...any)  { s.l.Error().Msgf(format, v...) }
func (s serverLogger) Debugf(format string, v ...any)  { s.l.Debug().Msgf(format, v...) }
func (s serverLogger) Tracef(format string, v ...any)  { s.l.Trace().Msgf(format, v...) }
