package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ProvisionTimeout bounds RetryProvisioning when its context has no
// deadline. Creating a replicated stream or bucket waits for its RAFT
// group to elect a leader, which takes seconds on a cluster; a cluster that
// is still forming takes longer.
const ProvisionTimeout = 2 * time.Minute

// provisionRequestTimeout bounds each JetStream API request of
// provisioning, whatever the deadline of the caller's context (nats.go
// applies its own 5s default only to a context without one). A request
// that gets no answer within it fails with ErrNoAnswer, and StartService
// tries again. A JetStream cluster does not answer every request of
// creators racing each other (see CreateOrUpdateStream; nats-server
// #3677 was another case): without this bound a worker waited for all of
// ProvisionTimeout and exited with "context deadline exceeded".
var provisionRequestTimeout = 5 * time.Second

// ProvisionRequestTimeout is the bound of one provisioning request under
// ctx (WithProvisionRequestTimeout, else 5s), for a caller that bounds a
// few requests of its own the same way.
func ProvisionRequestTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(requestTimeoutKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return provisionRequestTimeout
}

type requestTimeoutKey struct{}

// WithProvisionRequestTimeout returns ctx under which ProvisionRequest
// bounds each request by d instead of 5s: for a caller whose JetStream API
// is known to answer slowly, and for a test that tells a slow answer from
// none.
func WithProvisionRequestTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, requestTimeoutKey{}, d)
}

// The delays between provisioning attempts while the cluster forms.
const (
	provisionRetryMin = 250 * time.Millisecond
	provisionRetryMax = 5 * time.Second
)

// ErrNoAnswer is returned (wrapped, with the request's error) by
// ProvisionRequest when a JetStream API request got no answer within
// provisionRequestTimeout, as happens to all but one of several workers
// creating the same stream, bucket or consumer on a cluster at the same
// time. Asking again succeeds: the resource exists by then.
// RetryProvisioning asks again by itself.
var ErrNoAnswer = errors.New("no answer from the JetStream API")

// JetStream API error codes of a cluster that is not ready (nats.go has no
// constants for them).
const (
	jsErrCodeClusterNoPeers   jetstream.ErrorCode = 10005 // no suitable peers for placement (a peer offline)
	jsErrCodeClusterNotAvail  jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	jsErrCodeClusterNotLeader jetstream.ErrorCode = 10009 // JetStream cluster can not handle request (no meta leader)
)

// RetryProvisioning runs attempt, under ProvisionTimeout unless ctx has a
// deadline, until it succeeds, fails with an error that waiting cannot fix,
// or the deadline passes; between attempts it waits, doubling from
// provisionRetryMin to provisionRetryMax, and logs why.
func RetryProvisioning[T any](ctx context.Context, attempt func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ProvisionTimeout)
		defer cancel()
	}
	wait := provisionRetryMin
	for n := 1; ; n++ {
		v, err := attempt(ctx)
		if err == nil || !ClusterForming(err) || ctx.Err() != nil {
			return v, err
		}
		msg := "the JetStream cluster cannot place the streams and buckets yet (a node still starting?); trying again"
		if errors.Is(err, ErrNoAnswer) {
			msg = "a provisioning request got no answer (the cluster still electing its leader, or another worker creating the same resource at the same time?); trying again"
		}
		zerolog.Ctx(ctx).Warn().Err(err).Int("attempt", n).Dur("retry_in", wait).Msg(msg)
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w (gave up waiting for the cluster after %d attempts: %w)", err, n, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, provisionRetryMax)
	}
}

// ProvisionRequest runs call, one JetStream API request, with a deadline
// of ProvisionRequestTimeout(ctx) (or ctx's, if sooner). When that
// deadline passes before ctx's, the error wraps ErrNoAnswer.
func ProvisionRequest[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	bound := ProvisionRequestTimeout(ctx)
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	v, err := call(rctx)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		var zero T
		return zero, fmt.Errorf("%w within %s: %w", ErrNoAnswer, bound, err)
	}
	return v, err
}

// CreateOrUpdateStream creates the stream of cfg, or updates it when it
// exists with another configuration: nats.go's CreateOrUpdateStream in the
// other order. Asking for an update first answers "not found" to every
// worker of a new deployment, which all then create; an update that reaches
// the meta leader while another worker's create is in flight replaces the
// create's assignment, and neither request is ever answered (nats-server
// v2.15.3: jsClusteredStreamUpdateRequestLocked takes the in-flight
// assignment). Concurrent creates of one configuration are all answered,
// and a create of the configuration a stream has is answered as a success.
func CreateOrUpdateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return createThenUpdate(ctx, cfg, js.CreateStream, js.UpdateStream, jetstream.ErrStreamNameAlreadyInUse)
}

// CreateOrUpdateKeyValue is CreateOrUpdateStream for a bucket.
func CreateOrUpdateKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return createThenUpdate(ctx, cfg, js.CreateKeyValue, js.UpdateKeyValue, jetstream.ErrBucketExists)
}

// createThenUpdate creates cfg's resource, or updates it when create fails
// with exists; each request is a ProvisionRequest.
func createThenUpdate[C, T any](ctx context.Context, cfg C, create, update func(context.Context, C) (T, error), exists error) (T, error) {
	v, err := ProvisionRequest(ctx, func(ctx context.Context) (T, error) { return create(ctx, cfg) })
	if errors.Is(err, exists) {
		v, err = ProvisionRequest(ctx, func(ctx context.Context) (T, error) { return update(ctx, cfg) })
	}
	return v, err
}

// ClusterForming reports whether err is one that a JetStream cluster
// returns while it forms or a node is down, or a request that got no
// answer: trying again later may succeed. No placement for the replicas
// asked is among them; if the cluster has fewer nodes than replicas it
// stays so, and provisioning fails at ProvisionTimeout with that error.
func ClusterForming(err error) bool {
	if errors.Is(err, ErrNoAnswer) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsErrCodeClusterNoPeers, jsErrCodeClusterNotAvail, jsErrCodeClusterNotLeader:
			return true
		}
		return false
	}
	// A request that timed out (no meta leader to answer yet) is tried
	// again; no responder at all means JetStream is not enabled: said at
	// once.
	return errors.Is(err, nats.ErrTimeout)
}
