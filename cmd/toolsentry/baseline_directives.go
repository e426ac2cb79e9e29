package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/events"
)

// acceptDirectives follows `baseline accept`: the directives of tool's
// agents that migrate to the accepted version are marked accepted and no
// longer held; their action and migration stay, since the agents still send
// what they sent (see consumer.AcceptDirectives). A deployment without the
// directives bucket is left alone.
func acceptDirectives(ctx context.Context, js jetstream.JetStream, names events.Names, baselines jetstream.KeyValue, tool string, sio stdio) error {
	_, rec, err := getBaseline(ctx, baselines, tool)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, names.DirectivesBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", names.DirectivesBucket(), err)
	}
	n, err := consumer.AcceptDirectives(ctx, kv, tool, rec.Baseline.Fingerprint)
	if err != nil {
		return fmt.Errorf("%s: baseline accepted, but updating its directives failed (run accept again): %w", tool, err)
	}
	if n > 0 {
		fmt.Fprintf(sio.out, "%s: %d directive(s) marked accepted; agents that still send the old fields keep their migration\n", tool, n)
	}
	return nil
}
