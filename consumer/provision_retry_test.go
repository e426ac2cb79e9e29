package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClusterForming(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 400, ErrorCode: jsErrCodeClusterNoPeers, Description: "no suitable peers for placement, peer offline"}, true},
		{fmt.Errorf("provisioning bucket x: %w", &jetstream.APIError{Code: 503, ErrorCode: jsErrCodeClusterNotAvail}), true},
		{&jetstream.APIError{Code: 500, ErrorCode: jsErrCodeClusterNotLeader}, true},
		{fmt.Errorf("creating stream: %w", nats.ErrNoResponders), false},
		{nats.ErrTimeout, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}, false},
		{context.DeadlineExceeded, false},
		{errors.New("stream TOOLSENTRY_TELEMETRY exists with other subjects"), false},
	} {
		if got := clusterForming(c.err); got != c.want {
			t.Errorf("clusterForming(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

// Provisioning while the JetStream API answers that the cluster is not
// ready tries again until its deadline, then says so; an error that waiting
// cannot fix is returned at once. The API is played by a responder on a
// server without JetStream.
func TestProvisionTriesAgainWhileTheClusterForms(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var answer atomic.Value
	var requests atomic.Int64
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		requests.Add(1)
		_ = m.Respond([]byte(answer.Load().(string)))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	answer.Store(`{"type":"io.nats.jetstream.api.v1.stream_create_response","error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = provision(ctx, js, Config{})
	if err == nil {
		t.Fatal("provisioned on an unavailable cluster")
	}
	if !strings.Contains(err.Error(), "gave up waiting for the cluster after") || !clusterForming(err) {
		t.Errorf("error %q: want the cluster's last answer and the give-up", err)
	}
	if time.Since(start) < time.Second || requests.Load() < 3 {
		t.Errorf("gave up after %s and %d requests: want the deadline and several attempts", time.Since(start), requests.Load())
	}

	answer.Store(`{"type":"io.nats.jetstream.api.v1.stream_create_response","error":{"code":400,"err_code":10058,"description":"stream name already in use with a different configuration"}}`)
	requests.Store(0)
	start = time.Now()
	if _, err := provision(context.Background(), js, Config{}); err == nil || clusterForming(err) || requests.Load() != 1 {
		t.Errorf("a configuration conflict: %v after %d requests: want it at once", err, requests.Load())
	}
}
