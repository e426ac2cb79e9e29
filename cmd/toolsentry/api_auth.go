package main

// Authentication of serve's HTTP port: a bearer token, TLS client
// certificates, or both. /livez, /readyz and /metrics stay open, so that
// probes and a Prometheus scraper need no secret, and so do the
// dashboard's static files (/ and /ui/, dashboard.go); every other path
// (the /v1 API, the OTLP receiver, the agents' guard) needs the token or a
// client certificate once either is configured.

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// httpAuthUsage is the part of serve's help text about the HTTP port's
// authentication.
const httpAuthUsage = `  --http-token TOKEN      bearer token every request but /livez, /readyz, /metrics and the
                          dashboard's static files (/, /ui/) must carry (Authorization: Bearer
                          TOKEN; the dashboard asks for it) (TOOLSENTRY_HTTP_TOKEN, default "")
  --http-token-file FILE  file holding the token, instead of --http-token (TOOLSENTRY_HTTP_TOKEN_FILE,
                          default "")
  --http-tls-cert FILE    serve HTTPS with this certificate, with --http-tls-key
                          (TOOLSENTRY_HTTP_TLS_CERT, default "")
  --http-tls-key FILE     the certificate's private key (TOOLSENTRY_HTTP_TLS_KEY, default "")
  --http-client-ca FILE   with --http-tls-cert: CA certificates that verify clients; every request but
                          /livez, /readyz and /metrics must present a client certificate they sign
                          (TOOLSENTRY_HTTP_CLIENT_CA, default "")
  --http-insecure         allow --http on a non-loopback address with neither a token nor client
                          certificates; without it serve refuses to start (TOOLSENTRY_HTTP_INSECURE,
                          default false)
`

// errHTTPInsecure is returned when --http listens beyond this machine with
// no authentication and without --http-insecure.
var errHTTPInsecure = errors.New("refusing to serve the HTTP API unauthenticated on a non-loopback address")

// httpAuthFlags are serve's settings of the HTTP port's authentication.
type httpAuthFlags struct {
	token, tokenFile          string
	tlsCert, tlsKey, clientCA string
	insecure                  bool
}

func addHTTPAuthFlags(fs *flag.FlagSet) *httpAuthFlags {
	var a httpAuthFlags
	fs.StringVar(&a.token, "http-token", "", "")
	bindEnv(fs, "http-token", "TOOLSENTRY_HTTP_TOKEN")
	fs.StringVar(&a.tokenFile, "http-token-file", "", "")
	bindEnv(fs, "http-token-file", "TOOLSENTRY_HTTP_TOKEN_FILE")
	fs.StringVar(&a.tlsCert, "http-tls-cert", "", "")
	bindEnv(fs, "http-tls-cert", "TOOLSENTRY_HTTP_TLS_CERT")
	fs.StringVar(&a.tlsKey, "http-tls-key", "", "")
	bindEnv(fs, "http-tls-key", "TOOLSENTRY_HTTP_TLS_KEY")
	fs.StringVar(&a.clientCA, "http-client-ca", "", "")
	bindEnv(fs, "http-client-ca", "TOOLSENTRY_HTTP_CLIENT_CA")
	fs.BoolVar(&a.insecure, "http-insecure", false, "") // parseSettings reads TOOLSENTRY_HTTP_INSECURE
	return &a
}

// httpAuth is the checked form of httpAuthFlags.
type httpAuth struct {
	token   string      // "" for none
	tls     *tls.Config // nil: plain HTTP
	clients bool        // client certificates required on protected paths
}

// load checks the settings against the --http address and reads the
// files. All errors are usage errors.
func (a *httpAuthFlags) load(addr string) (httpAuth, error) {
	var out httpAuth
	switch {
	case a.token != "" && a.tokenFile != "":
		return out, usageErrorf("--http-token and --http-token-file exclude each other")
	case (a.tlsCert == "") != (a.tlsKey == ""):
		return out, usageErrorf("--http-tls-cert and --http-tls-key go together")
	case a.clientCA != "" && a.tlsCert == "":
		return out, usageErrorf("--http-client-ca needs --http-tls-cert and --http-tls-key: client certificates are checked over TLS")
	}
	out.token = a.token
	if a.tokenFile != "" {
		raw, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return out, usageErrorf("--http-token-file: %v", err)
		}
		out.token = strings.TrimSpace(string(raw))
		if out.token == "" {
			return out, usageErrorf("--http-token-file %s is empty", a.tokenFile)
		}
	}
	if a.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(a.tlsCert, a.tlsKey)
		if err != nil {
			return out, usageErrorf("--http-tls-cert/--http-tls-key: %v", err)
		}
		out.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if a.clientCA != "" {
			pem, err := os.ReadFile(a.clientCA)
			if err != nil {
				return out, usageErrorf("--http-client-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return out, usageErrorf("--http-client-ca %s holds no PEM certificate", a.clientCA)
			}
			// Verified when given, required per path (see wrap): the
			// probes stay reachable without a certificate.
			out.tls.ClientCAs = pool
			out.tls.ClientAuth = tls.VerifyClientCertIfGiven
			out.clients = true
		}
	}
	if addr != "" && out.token == "" && !out.clients && !a.insecure && !loopbackAddr(addr) {
		return out, fmt.Errorf("%w: --http %s: %w: give --http-token (or --http-token-file), or --http-tls-cert, --http-tls-key and --http-client-ca; or --http-insecure to serve it to anyone who can reach the port", errUsage, addr, errHTTPInsecure)
	}
	return out, nil
}

// loopbackAddr reports whether a HOST:PORT listens on this machine only:
// a loopback IP or "localhost". An empty host listens everywhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// openPath reports whether a path is served without authentication: the
// probes, the metrics, and the dashboard's static files (which hold no
// data: the page calls the API with the token or certificate).
func openPath(p string) bool {
	return p == "/livez" || p == "/readyz" || p == "/metrics" || dashboardPath(p)
}

// wrap returns h behind the authentication: a request to a protected path
// without a verified client certificate (when required) or the bearer
// token (when set) is answered 401 with a JSON error.
func (a httpAuth) wrap(h http.Handler) http.Handler {
	if a.token == "" && !a.clients {
		return h
	}
	want := []byte("Bearer " + a.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		if a.clients && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "a client certificate signed by --http-client-ca is required"})
			return
		}
		if a.token != "" {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolsentry"`)
				writeJSON(w, http.StatusUnauthorized, apiError{Error: "missing or wrong bearer token (Authorization: Bearer TOKEN)"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// listener wraps ln in TLS when configured.
func (a httpAuth) listener(ln net.Listener) net.Listener {
	if a.tls == nil {
		return ln
	}
	return tls.NewListener(ln, a.tls)
}

// scheme is "https" with TLS, else "http".
func (a httpAuth) scheme() string {
	if a.tls != nil {
		return "https"
	}
	return "http"
}

// httpErrorLog routes the HTTP server's own errors (a failed TLS
// handshake: a client without a certificate, or speaking plain HTTP) to
// serve's log, as JSON lines like the rest.
func httpErrorLog(log *zerolog.Logger) *stdlog.Logger {
	l := log.With().Str("component", "http").Logger()
	return stdlog.New(l, "", 0)
}
