package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/publisher"
)

type env struct {
	nc  *nats.Conn
	res *consumer.Resources
	pub *publisher.Publisher
}

func setup(t *testing.T, opts publisher.Options) *env {
	t.Helper()
	_, url := natstest.RunServer(t)
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := consumer.Provision(ctx, js, consumer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{nc: nc, res: res, pub: pub}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestBatchWaitCountsStoredAndDuplicates(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	b := e.pub.NewBatch()
	hdr := nats.Header{"Ce-Type": []string{"toolsentry.verdict.v1"}}
	for i := range 10 {
		if err := b.Publish(ctx, "toolsentry.verdicts.schema.compatible.search", fmt.Sprintf("v-%d", i%7), hdr, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 10 {
		t.Errorf("Len = %d, want 10", b.Len())
	}
	res, err := b.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != (publisher.Result{Stored: 7, Duplicates: 3}) {
		t.Errorf("Wait = %+v, want 7 stored and 3 duplicates", res)
	}
	if b.Len() != 0 {
		t.Errorf("Len after Wait = %d, want 0", b.Len())
	}
	if len(hdr) != 1 {
		t.Errorf("caller's header was modified: %v", hdr)
	}
	m, err := e.res.Verdicts.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Ce-Type") != "toolsentry.verdict.v1" || m.Header.Get(jetstream.MsgIDHeader) != "v-0" {
		t.Errorf("stored headers = %v", m.Header)
	}
}

func TestBatchWaitReportsFailedAcks(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	b := e.pub.NewBatch()
	if err := b.Publish(ctx, "toolsentry.verdicts.schema.compatible.ok", "ok-1", nil, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "nostream.here", "lost-1", nil, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	res, err := b.Wait(ctx)
	if !errors.Is(err, publisher.ErrNotAcked) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("Wait = %v, want ErrNotAcked wrapping ErrNoStreamResponse", err)
	}
	if res.Stored != 1 {
		t.Errorf("stored = %d, want 1", res.Stored)
	}
}

// TestUnknownTelemetryKindIsRefused: the telemetry stream takes the known
// kinds only (consumer.Config.Layout), so a publish of another kind, or of
// a subject of another shape, is refused by the server, and the error says
// why; a known kind is stored. Both the asynchronous batch (emit,
// mcp-proxy, otlp) and the synchronous publish say so.
func TestUnknownTelemetryKindIsRefused(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	b := e.pub.NewBatch()
	for i, subject := range []string{"toolsentry.telemetry.invocation.crm", "toolsentry.telemetry.bogus.crm", "toolsentry.telemetry.invocation.a.b"} {
		if err := b.Publish(ctx, subject, fmt.Sprintf("e-%d", i), nil, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Wait(ctx)
	if res.Stored != 1 {
		t.Errorf("stored %d, want 1 (the known kind)", res.Stored)
	}
	if !errors.Is(err, publisher.ErrNotAcked) || !errors.Is(err, publisher.ErrNoStream) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("Wait = %v, want ErrNotAcked and ErrNoStream", err)
	}
	for _, want := range []string{
		`subject toolsentry.telemetry.bogus.crm id e-1: no stream takes the subject: kind "bogus" is not a telemetry kind: TOOLSENTRY_TELEMETRY takes toolsentry.telemetry.<kind>.<key> with kind one of schema, invocation, contract,`,
		`subject toolsentry.telemetry.invocation.a.b id e-2: no stream takes the subject: toolsentry.telemetry.invocation.a.b is not a telemetry subject`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Wait = %v\nwant it to say %q", err, want)
		}
	}
	_, err = e.pub.PublishSync(ctx, "toolsentry.telemetry.bogus.crm", "s-1", nil, []byte("{}"))
	if !errors.Is(err, publisher.ErrNoStream) || !strings.Contains(err.Error(), `kind "bogus" is not a telemetry kind`) {
		t.Errorf("PublishSync = %v, want ErrNoStream naming the kind", err)
	}
	_, err = e.pub.PublishSync(ctx, "elsewhere.x", "s-2", nil, []byte("{}"))
	if !errors.Is(err, publisher.ErrNoStream) || !strings.Contains(err.Error(), "no stream's subjects include elsewhere.x") {
		t.Errorf("PublishSync outside telemetry = %v", err)
	}
}

// TestPublishBoundsPending: with MaxPending unacknowledged publishes in
// flight, the next one waits for a slot and fails at the context deadline.
func TestPublishBoundsPending(t *testing.T) {
	e := setup(t, publisher.Options{MaxPending: 2})
	// A plain subscriber that never answers: publishes to it are never acked.
	sub, err := e.nc.Subscribe("silent.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := ctxFor(t)
	for i := range 2 {
		if _, err := e.pub.Publish(ctx, "silent.x", fmt.Sprint(i), nil, nil); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e.pub.Publish(short, "silent.x", "3", nil, nil)
	if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		t.Errorf("third publish = %v, want ErrTooManyStalledMsgs", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("third publish failed after %s, want it to wait for a slot", waited)
	}
}

func TestPublishRequiresID(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	if _, err := e.pub.Publish(ctx, "toolsentry.verdicts.x", "", nil, nil); !errors.Is(err, publisher.ErrNoMsgID) {
		t.Errorf("Publish without id = %v, want ErrNoMsgID", err)
	}
	if _, err := e.pub.PublishSync(ctx, "toolsentry.verdicts.x", "", nil, nil); !errors.Is(err, publisher.ErrNoMsgID) {
		t.Errorf("PublishSync without id = %v, want ErrNoMsgID", err)
	}
	if _, err := publisher.New(e.nc, publisher.Options{MaxPending: -1}); !errors.Is(err, publisher.ErrInvalidConfig) {
		t.Errorf("New with negative max pending = %v, want ErrInvalidConfig", err)
	}
}

func TestPublishSyncDeduplicates(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	a, err := e.pub.PublishSync(ctx, "toolsentry.telemetry.invocation.search", "ce-1", nil, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.pub.PublishSync(ctx, "toolsentry.telemetry.invocation.search", "ce-1", nil, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Duplicate || !b.Duplicate || a.Sequence != b.Sequence || a.Stream != "TOOLSENTRY_TELEMETRY" {
		t.Errorf("acks %+v then %+v, want one stored message and a duplicate", a, b)
	}
	if _, err := e.pub.PublishSync(ctx, "nostream.here", "x", nil, nil); !errors.Is(err, publisher.ErrNotAcked) {
		t.Errorf("PublishSync without a stream = %v, want ErrNotAcked", err)
	}
}

func TestEmitter(t *testing.T) {
	e := setup(t, publisher.Options{})
	ctx := ctxFor(t)
	em := publisher.NewEmitter(e.pub, e.res.Config.TelemetryPrefix())
	for _, bad := range []string{
		"toolsentry.telemetry",
		"toolsentry.telemetry.",
		"toolsentry.telemetryx.a",
		"toolsentry.verdicts.schema.x",
		"toolsentry.telemetry.invocation.*",
		"toolsentry.telemetry.>",
		"toolsentry.telemetry.invocation..k",
		"toolsentry.telemetry.invocation.a b",
	} {
		if err := em.Emit(ctx, bad, "id", nil, nil); !errors.Is(err, publisher.ErrInvalidSubject) {
			t.Errorf("Emit(%q) = %v, want ErrInvalidSubject", bad, err)
		}
	}
	for i, id := range []string{"ce-1", "ce-2", "ce-1"} {
		if err := em.Emit(ctx, "toolsentry.telemetry.invocation.search", id, nats.Header{"Ce-Id": []string{id}}, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	res, err := em.Flush(ctx)
	if err != nil || res != (publisher.Result{Stored: 2, Duplicates: 1}) {
		t.Errorf("Flush = %+v, %v; want 2 stored, 1 duplicate", res, err)
	}
	m, err := e.res.Telemetry.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "1" || m.Header.Get("Ce-Id") != "ce-2" {
		t.Errorf("stored message 2 = %q %v", m.Data, m.Header)
	}
}
