package consumer

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

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
	var answer, updateAnswer, infoAnswer atomic.Value
	updateAnswer.Store("")
	infoAnswer.Store("")
	var requests atomic.Int64
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		requests.Add(1)
		if u := updateAnswer.Load().(string); u != "" && strings.HasPrefix(m.Subject, "$JS.API.STREAM.UPDATE.") {
			_ = m.Respond([]byte(u))
			return
		}
		if i := infoAnswer.Load().(string); i != "" && strings.HasPrefix(m.Subject, "$JS.API.STREAM.INFO.") {
			_ = m.Respond([]byte(i))
			return
		}
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
	if !strings.Contains(err.Error(), "gave up waiting for the cluster after") || !engine.ClusterForming(err) {
		t.Errorf("error %q: want the cluster's last answer and the give-up", err)
	}
	if time.Since(start) < time.Second || requests.Load() < 3 {
		t.Errorf("gave up after %s and %d requests: want the deadline and several attempts", time.Since(start), requests.Load())
	}

	// A stream that exists with another configuration is updated; an
	// update the server refuses is said at once: the create, the read of
	// the stream's layout (createOrUpdateTelemetry) and the update, not
	// tried again.
	answer.Store(`{"type":"io.nats.jetstream.api.v1.stream_create_response","error":{"code":400,"err_code":10058,"description":"stream name already in use with a different configuration"}}`)
	updateAnswer.Store(`{"type":"io.nats.jetstream.api.v1.stream_update_response","error":{"code":500,"err_code":10052,"description":"stream configuration update can not change subjects"}}`)
	infoAnswer.Store(`{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"TOOLSENTRY_TELEMETRY","subjects":["toolsentry.telemetry.>"]},"state":{}}`)
	requests.Store(0)
	if _, err := provision(context.Background(), js, Config{}); err == nil || engine.ClusterForming(err) || requests.Load() != 3 ||
		!strings.Contains(err.Error(), "can not change subjects") {
		t.Errorf("a configuration conflict: %v after %d requests: want the update's refusal at once", err, requests.Load())
	}
}
