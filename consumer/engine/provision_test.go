package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
		if got := ClusterForming(c.err); got != c.want {
			t.Errorf("ClusterForming(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

// A provisioning request that gets no answer fails with ErrNoAnswer after
// provisionRequestTimeout, whatever the deadline of its context, and is
// tried again; a context that ends first is its own error.
func TestProvisionRequestWithoutAnswer(t *testing.T) {
	defer func(d time.Duration) { provisionRequestTimeout = d }(provisionRequestTimeout)
	provisionRequestTimeout = 100 * time.Millisecond
	silent := func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := ProvisionRequest(ctx, silent)
	if !errors.Is(err, ErrNoAnswer) || !ClusterForming(err) {
		t.Errorf("no answer: %v, want ErrNoAnswer, tried again", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("no answer after %s: want provisionRequestTimeout, not the context's minute", d)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := ProvisionRequest(short, silent); errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context ended first: %v, want its deadline, not ErrNoAnswer", err)
	}

	// Tried again until an answer comes.
	var calls atomic.Int64
	v, err := RetryProvisioning(ctx, func(ctx context.Context) (int, error) {
		if calls.Add(1) < 3 {
			return ProvisionRequest(ctx, silent)
		}
		return 42, nil
	})
	if err != nil || v != 42 || calls.Load() != 3 {
		t.Errorf("retried: %d, %v after %d attempts: want 42 at the third", v, err, calls.Load())
	}
}

// A context can widen the bound of each request: a slow answer is then
// taken, and the error names the bound that passed.
func TestProvisionRequestTimeoutFromContext(t *testing.T) {
	defer func(d time.Duration) { provisionRequestTimeout = d }(provisionRequestTimeout)
	provisionRequestTimeout = 50 * time.Millisecond
	slow := func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
			return 7, nil
		}
	}
	if _, err := ProvisionRequest(context.Background(), slow); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("slow answer under the default bound: %v, want ErrNoAnswer", err)
	}
	ctx := WithProvisionRequestTimeout(context.Background(), 5*time.Second)
	if got := ProvisionRequestTimeout(ctx); got != 5*time.Second {
		t.Errorf("ProvisionRequestTimeout = %s, want the context's 5s", got)
	}
	if v, err := ProvisionRequest(ctx, slow); err != nil || v != 7 {
		t.Errorf("slow answer under a wider bound: %d, %v; want 7", v, err)
	}
}
