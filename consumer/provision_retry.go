package consumer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// ProvisionTimeout bounds StartService's provisioning when its context has
// no deadline (engine.ProvisionTimeout).
const ProvisionTimeout = engine.ProvisionTimeout

// provision runs Provision under ProvisionTimeout unless ctx has a
// deadline, and tries again while the cluster cannot place the streams and
// buckets yet or a request went unanswered (engine.ClusterForming): workers
// started together, with each other or with their NATS cluster, as a
// rollout does, wait for it instead of exiting.
func provision(ctx context.Context, js jetstream.JetStream, cfg Config) (*Resources, error) {
	return engine.RetryProvisioning(ctx, func(ctx context.Context) (*Resources, error) {
		return Provision(ctx, js, cfg)
	})
}

// provisionConsumer creates or updates the durable consumer cc on stream as
// provision does the resources of Provision: each request bounded by
// engine.ProvisionRequestTimeout, tried again while engine.ClusterForming.
func provisionConsumer(ctx context.Context, stream jetstream.Stream, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return engine.RetryProvisioning(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
		return engine.ProvisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return stream.CreateOrUpdateConsumer(ctx, cc)
		})
	})
}
