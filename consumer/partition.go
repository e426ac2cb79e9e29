package consumer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of the scale-out settings of Config.
const (
	DefaultPartitions = 1
	DefaultPinnedTTL  = 10 * time.Second
	DefaultMemberTTL  = 10 * time.Second
	// MaxPartitions bounds Config.Partitions: every partition consumer
	// reads the whole telemetry stream (see the package doc).
	MaxPartitions = 64
)

// PriorityGroup is the priority group of the partition consumers (and,
// with partitions, of the directives projector's): each is created with the
// pinned-client policy, so the server delivers its messages to one pull
// client at a time.
const PriorityGroup = "toolsentry"

// pinConsumer makes cc a pinned-client consumer of PriorityGroup: one
// worker at a time gets its messages, until it stops pulling for
// cfg.PinnedTTL.
func pinConsumer(cc *jetstream.ConsumerConfig, cfg Config) {
	cc.PriorityPolicy = jetstream.PriorityPolicyPinned
	cc.PriorityGroups = []string{PriorityGroup}
	cc.PinnedTTL = cfg.PinnedTTL
}

// pinnedEngine sets the options of an engine on a consumer of pinConsumer:
// it pulls in PriorityGroup, each pull lasting PinnedTTL/3 (at least 1s), so
// that a worker that runs keeps its pin.
func pinnedEngine(o *Options, cfg Config) {
	o.PriorityGroup = PriorityGroup
	o.PullExpiry = max(cfg.PinnedTTL/3, time.Second)
}

// PartitionsMetadata is the consumer metadata key under which Provision
// records the partition count and index of a partition consumer
// ("<index>/<count>").
const PartitionsMetadata = "toolsentry.partition"

// PartitionOf returns the partition, in [0, n), of an ordering key: FNV-1a
// of the key modulo n. It is a function of the ordering key only, so every
// message that must be applied in order with another (a tool's schema
// observations and invocations; every contract and workflow, which share
// core.CompositionLane) lands in the same partition. The function is part
// of the deployment's contract: workers with different versions of it
// would split a key between two partitions.
func PartitionOf(orderingKey string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderingKey))
	return int(h.Sum32() % uint32(n))
}

// PartitionConsumer is the name of the durable consumer of partition i of
// n: "<durable>-<i>of<n>", so that a deployment that changes its partition
// count gets a fresh set of consumers instead of reusing ones that split
// the keys differently.
func (c Config) PartitionConsumer(i, n int) string {
	return c.withDefaults().Durable + "-" + strconv.Itoa(i) + "of" + strconv.Itoa(n)
}

// MembersBucket is the bucket in which partitioned workers announce that
// they are alive (toolsentry-members); entries expire after MemberTTL.
func (c Config) MembersBucket() string { return c.withDefaults().Prefix + "-members" }

// provisionConsumers creates the consumers of cfg on the telemetry stream:
// the one durable consumer of a single worker, or one pinned consumer per
// partition and the members bucket.
func provisionConsumers(ctx context.Context, js jetstream.JetStream, res *Resources) error {
	cfg := res.Config
	if cfg.Partitions <= 1 {
		cons, err := provisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return res.Telemetry.CreateOrUpdateConsumer(ctx, baseConsumerConfig(cfg, cfg.Durable))
		})
		if err != nil {
			return fmt.Errorf("provisioning consumer %s on %s: %w", cfg.Durable, cfg.TelemetryStream(), err)
		}
		res.Consumer = cons
		res.Partitions = []jetstream.Consumer{cons}
		return nil
	}
	res.Partitions = make([]jetstream.Consumer, cfg.Partitions)
	var start uint64 // 0: not computed yet
	for i := range cfg.Partitions {
		name := cfg.PartitionConsumer(i, cfg.Partitions)
		cc := baseConsumerConfig(cfg, name)
		cc.Description = fmt.Sprintf("toolsentry workers: partition %d of %d", i, cfg.Partitions)
		cc.Metadata[PartitionsMetadata] = strconv.Itoa(i) + "/" + strconv.Itoa(cfg.Partitions)
		pinConsumer(&cc, cfg)
		cc.Replicas = cfg.Replicas // as the stream's, which the single durable inherits
		cons, err := provisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return res.Telemetry.Consumer(ctx, name)
		})
		switch {
		case err == nil:
			// Keep where it starts; update what may change.
			old := cons.CachedInfo().Config
			cc.DeliverPolicy, cc.OptStartSeq = old.DeliverPolicy, old.OptStartSeq
			cons, err = provisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
				return res.Telemetry.CreateOrUpdateConsumer(ctx, cc)
			})
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			if start == 0 {
				if start, err = resumeSequence(ctx, res.Telemetry, cfg); err != nil {
					return err
				}
			}
			if start > 1 {
				cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
			}
			cons, err = provisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
				return res.Telemetry.CreateConsumer(ctx, cc)
			})
			if errors.Is(err, jetstream.ErrConsumerExists) { // another worker created it first
				cons, err = provisionRequest(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
					return res.Telemetry.Consumer(ctx, name)
				})
			}
		}
		if err != nil {
			return fmt.Errorf("provisioning consumer %s on %s: %w", name, cfg.TelemetryStream(), err)
		}
		res.Partitions[i] = cons
	}
	res.Consumer = res.Partitions[0]
	kv, err := createOrUpdateKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.MembersBucket(),
		Description: "toolsentry workers alive, for the assignment of partitions",
		History:     1,
		TTL:         cfg.MemberTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("provisioning bucket %s: %w", cfg.MembersBucket(), err)
	}
	res.Members = kv
	return nil
}

func baseConsumerConfig(cfg Config, name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "toolsentry workers: guards over telemetry",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: cfg.TelemetrySubjects(),
		Metadata:      map[string]string{MaxDeliverMetadata: strconv.Itoa(cfg.MaxDeliver)},
	}
}

// resumeSequence is where a new set of partition consumers starts: after
// the lowest ack floor of the toolsentry consumers already on the stream
// (the single worker's durable consumer, or partition consumers of another
// partition count), so that switching to partitions does not process the
// stream's history again; 1 (everything) when there are none. Messages
// above that floor that were already handled are applied again, which the
// state's last-applied sequence per key makes harmless. Stop every worker
// of the old layout before starting the new one.
func resumeSequence(ctx context.Context, stream jetstream.Stream, cfg Config) (uint64, error) {
	return provisionRequest(ctx, func(ctx context.Context) (uint64, error) { return lowestAckFloor(ctx, stream, cfg) })
}

func lowestAckFloor(ctx context.Context, stream jetstream.Stream, cfg Config) (uint64, error) {
	var floor uint64
	found := false
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Name != cfg.Durable && !strings.HasPrefix(info.Name, cfg.Durable+"-") {
			continue
		}
		if _, ours := info.Config.Metadata[MaxDeliverMetadata]; !ours {
			continue
		}
		if !found || info.AckFloor.Stream < floor {
			floor = info.AckFloor.Stream
		}
		found = true
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("listing consumers of %s: %w", cfg.TelemetryStream(), err)
	}
	return floor + 1, nil
}

// Assign returns the partitions, out of n, that member owns when members
// (the live ones, in any order, member included or not) share them:
// partition i goes to the i-th member, round robin over the sorted names,
// so a change of membership moves only the partitions it must when n is a
// multiple of the member count. A member that is not in members owns none.
func Assign(members []string, n int, member string) []int {
	sorted := uniqueSorted(members)
	idx := -1
	for i, m := range sorted {
		if m == member {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	var own []int
	for p := range n {
		if p%len(sorted) == idx {
			own = append(own, p)
		}
	}
	return own
}

func uniqueSorted(l []string) []string {
	s := slices.Clone(l)
	slices.Sort(s)
	return slices.Compact(s)
}
