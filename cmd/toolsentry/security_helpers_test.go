package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolsentry/toolsentry/consumer"
)

// startSecuredServer starts a real nats-server from a configuration file
// (nats-server's own parser), on a free port with its store in a temp dir.
func startSecuredServer(t *testing.T, configFile string) *consumer.Server {
	t.Helper()
	ctx := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).WithContext(context.Background())
	s, err := consumer.StartServer(ctx, consumer.ServerOptions{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, ConfigFile: configFile})
	if err != nil {
		t.Fatalf("starting nats-server with %s: %v", configFile, err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// serveRun is one in-process `toolsentry serve` started by startServeArgs.
type serveRun struct {
	natsURL, httpAddr string
	logs              *lockedBuffer
	cancel            context.CancelFunc
	done              chan error
}

// startServeArgs runs `toolsentry serve` in-process with args and waits
// until it is ready; it fails the test if serve stops first.
func startServeArgs(t *testing.T, args ...string) *serveRun {
	t.Helper()
	r, err := tryServe(t, args...)
	if err != nil {
		t.Fatalf("serve %v: %v\n%s", args, err, r.logs)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// tryServe runs serve with args and returns once it is ready (nil error)
// or has stopped (its error).
func tryServe(t *testing.T, args ...string) (*serveRun, error) {
	t.Helper()
	started := make(chan [2]string, 1)
	serveStarted = func(n, h string) { started <- [2]string{n, h} }
	defer func() { serveStarted = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	r := &serveRun{logs: &lockedBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- run(ctx, append([]string{"serve"}, args...), stdio{in: strings.NewReader(""), out: io.Discard, err: r.logs})
	}()
	select {
	case a := <-started:
		r.natsURL, r.httpAddr = a[0], a[1]
		return r, nil
	case err := <-r.done:
		cancel()
		r.cancel = nil
		if err == nil {
			t.Fatalf("serve returned nil before it was ready\n%s", r.logs)
		}
		return r, err
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve not ready in 30s\n%s", r.logs)
	}
	return r, nil
}

// stop cancels serve's context (SIGTERM) and waits for it to return.
func (r *serveRun) stop(t *testing.T) error {
	t.Helper()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Errorf("serve did not stop in 30s")
		return nil
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and localhost
// and a client certificate, written as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	otherCA                                              string // a CA that signed nothing here
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	serial := int64(1)
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := newKey()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(serial),
			Subject:               pkix.Name{CommonName: name},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			IsCA:                  true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, k, der
	}
	ca, caKey, caDER := newCA("toolsentry test CA")
	_, _, otherDER := newCA("unrelated CA")
	leaf := func(name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf("nats-server", x509.ExtKeyUsageServerAuth)
	cliDER, cliKey := leaf("toolsentry-worker", x509.ExtKeyUsageClientAuth)
	return testPKI{
		caFile:     write("ca.pem", "CERTIFICATE", caDER),
		otherCA:    write("other-ca.pem", "CERTIFICATE", otherDER),
		serverCert: write("server.pem", "CERTIFICATE", srvDER),
		serverKey:  write("server-key.pem", "PRIVATE KEY", keyDER(srvKey)),
		clientCert: write("client.pem", "CERTIFICATE", cliDER),
		clientKey:  write("client-key.pem", "PRIVATE KEY", keyDER(cliKey)),
	}
}
