package consumer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
)

// Defaults of the scale-out settings of Config.
const (
	DefaultPartitions = 1
	DefaultLeaseTTL   = 10 * time.Second
	DefaultMemberTTL  = 10 * time.Second
	// MaxPartitions bounds Config.Partitions.
	MaxPartitions = 64
)

var memberRE = regexp.MustCompile(`^[A-Za-z0-9_=-][A-Za-z0-9_=.-]*$`)

// DefaultMember is the member name of this process when none is given: the
// host name and the process id ("worker-7-1234"), reduced to the characters
// a KV key allows.
func DefaultMember() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	host = strings.Map(func(r rune) rune {
		if r < 128 && memberRE.MatchString(string(r)) && r != '.' {
			return r
		}
		return '-'
	}, host)
	return host + "-" + strconv.Itoa(os.Getpid())
}

// MembersBucket is the bucket in which workers announce that they are
// alive, for the assignment of lanes (<prefix>-members).
func (c Config) MembersBucket() string { return c.bucket("-members") }

// LeasesBucket is the bucket of the lanes' leases and checkpoints
// (<prefix>-leases): one entry per lane, tools.<i>, composition and
// directives.
func (c Config) LeasesBucket() string { return c.bucket("-leases") }

// provisionLaneBuckets creates or updates the members bucket (entries
// expire after MemberTTL) and the leases bucket.
func provisionLaneBuckets(ctx context.Context, js jetstream.JetStream, res *Resources) error {
	cfg := res.Config
	for _, b := range []struct {
		dst *jetstream.KeyValue
		kc  jetstream.KeyValueConfig
	}{
		{&res.Members, jetstream.KeyValueConfig{Bucket: cfg.MembersBucket(), Description: "toolsentry workers alive, for the assignment of lanes",
			History: 1, TTL: cfg.MemberTTL, Storage: jetstream.FileStorage, Replicas: cfg.Replicas}},
		{&res.Leases, jetstream.KeyValueConfig{Bucket: cfg.LeasesBucket(), Description: "toolsentry lanes: owner, epoch and checkpoint of each lane",
			History: 1, Storage: jetstream.FileStorage, Replicas: cfg.Replicas}},
	} {
		kv, err := engine.CreateOrUpdateKeyValue(ctx, js, b.kc)
		if err != nil {
			return fmt.Errorf("provisioning bucket %s: %w", b.kc.Bucket, err)
		}
		*b.dst = kv
	}
	return nil
}

// resumeSequence is where a telemetry lane whose lease was never committed
// starts: after the lowest ack floor of the durable consumers that the
// per-message-ack workers left on the stream (an upgrade), 1 when there
// are none. Inputs above that floor that were applied are skipped by the
// state's last-applied sequence per key.
func resumeSequence(ctx context.Context, stream jetstream.Stream, cfg Config) (uint64, error) {
	return engine.ProvisionRequest(ctx, func(ctx context.Context) (uint64, error) { return lowestAckFloor(ctx, stream, cfg.Durable) })
}

// ackFloorAfter is the sequence after the ack floor of the durable consumer
// named durable on stream, 1 when it does not exist.
func ackFloorAfter(ctx context.Context, stream jetstream.Stream, durable string) (uint64, error) {
	return engine.ProvisionRequest(ctx, func(ctx context.Context) (uint64, error) {
		c, err := stream.Consumer(ctx, durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 1, nil
		}
		if err != nil {
			return 0, err
		}
		return c.CachedInfo().AckFloor.Stream + 1, nil
	})
}

// oldConsumerMetadata marks the durable consumers of the per-message-ack
// workers (their dead-letter threshold was kept there).
const oldConsumerMetadata = "toolsentry.max_deliver"

func lowestAckFloor(ctx context.Context, stream jetstream.Stream, durable string) (uint64, error) {
	var floor uint64
	found := false
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Name != durable && !strings.HasPrefix(info.Name, durable+"-") {
			continue
		}
		if _, ours := info.Config.Metadata[oldConsumerMetadata]; !ours {
			continue
		}
		if !found || info.AckFloor.Stream < floor {
			floor = info.AckFloor.Stream
		}
		found = true
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("listing consumers of %s: %w", stream.CachedInfo().Config.Name, err)
	}
	return floor + 1, nil
}

// Assign is engine.Assign: the lanes, out of n, that member owns.
func Assign(members []string, n int, member string) []int { return engine.Assign(members, n, member) }
