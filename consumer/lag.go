package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// PartitionLag is how far one partition's consumer is behind the
// telemetry stream, as the server counts it. A deployment of one worker has
// one partition, 0.
type PartitionLag struct {
	Partition int
	// Consumer is the durable consumer's name.
	Consumer string
	// Pending is the number of stored messages not yet delivered.
	Pending uint64
	// AckPending is the number delivered and not yet finished (applied or
	// dead-lettered, then acknowledged).
	AckPending uint64
	// AckFloor is the stream sequence up to which every message is
	// finished: where the partition resumes after a restart, its
	// checkpoint.
	AckFloor uint64
	// Delivered is the last stream sequence delivered.
	Delivered uint64
	// Owner is the member that owns the partition (Assign over the live
	// members); empty for a single worker, or when no live member does.
	Owner string
}

// Lag is the number of stored messages the partition's workers have not
// yet finished: Pending + AckPending.
func (p PartitionLag) Lag() uint64 { return p.Pending + p.AckPending }

func partitionLag(p int, info *jetstream.ConsumerInfo) PartitionLag {
	return PartitionLag{
		Partition:  p,
		Consumer:   info.Name,
		Pending:    info.NumPending,
		AckPending: uint64(max(info.NumAckPending, 0)),
		AckFloor:   info.AckFloor.Stream,
		Delivered:  info.Delivered.Stream,
	}
}

// ReadLag reads the lag of every partition consumer of res from the server
// (one consumer info request each), in partition order.
func ReadLag(ctx context.Context, res *Resources) ([]PartitionLag, error) {
	lags := make([]PartitionLag, 0, len(res.Partitions))
	for p, c := range res.Partitions {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading consumer %s: %w", c.CachedInfo().Name, err)
		}
		lags = append(lags, partitionLag(p, info))
	}
	return lags, nil
}

// Status is a deployment's progress, read from the server without changing
// anything: what `toolsentry status` shows.
type Status struct {
	Stream string
	// Messages and LastSeq are the telemetry stream's stored message count
	// and last sequence.
	Messages, LastSeq uint64
	// Partitions is the partition count of the deployment: the live
	// members' (1 for a single worker), or, with none alive, that of the
	// consumers that progressed furthest.
	Partitions int
	// Members are the live members of a partitioned deployment, sorted.
	Members []string
	// Lag has one entry per partition of the deployment, in order.
	Lag []PartitionLag
	// Stale names the toolsentry consumers of another partition count:
	// left by a change of layout, no worker reads them.
	Stale []string
}

// TotalLag is the sum of the partitions' lag.
func (s *Status) TotalLag() uint64 {
	var n uint64
	for _, p := range s.Lag {
		n += p.Lag()
	}
	return n
}

// ReadStatus reads the status of the deployment of cfg (its Prefix and
// Durable; the partition count is discovered) from the server. A missing
// telemetry stream is jetstream.ErrStreamNotFound.
func ReadStatus(ctx context.Context, js jetstream.JetStream, cfg Config) (*Status, error) {
	cfg = cfg.withDefaults()
	stream, err := js.Stream(ctx, cfg.TelemetryStream())
	if err != nil {
		return nil, err
	}
	st := &Status{Stream: cfg.TelemetryStream()}
	si := stream.CachedInfo()
	st.Messages, st.LastSeq = si.State.Msgs, si.State.LastSeq

	// The toolsentry consumers, by partition count.
	layouts := map[int]map[int]*jetstream.ConsumerInfo{}
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if _, ours := info.Config.Metadata[MaxDeliverMetadata]; !ours {
			continue
		}
		p, n := 0, 1
		if v, ok := info.Config.Metadata[PartitionsMetadata]; ok {
			if p, n, ok = parsePartition(v); !ok {
				continue
			}
		} else if info.Name != cfg.Durable {
			continue
		}
		if layouts[n] == nil {
			layouts[n] = map[int]*jetstream.ConsumerInfo{}
		}
		layouts[n][p] = info
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing consumers of %s: %w", cfg.TelemetryStream(), err)
	}

	members, n, err := liveMembers(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	st.Members = members
	if n == 0 { // no live member says: the layout that progressed furthest
		var best uint64
		for count, cs := range layouts {
			for _, info := range cs {
				if n == 0 || info.AckFloor.Stream > best || info.AckFloor.Stream == best && count < n {
					n, best = count, info.AckFloor.Stream
				}
			}
		}
	}
	st.Partitions = max(n, 1)
	owner := map[int]string{}
	if st.Partitions > 1 {
		for _, m := range members {
			for _, p := range Assign(members, st.Partitions, m) {
				owner[p] = m
			}
		}
	}
	for p := range st.Partitions {
		info := layouts[st.Partitions][p]
		if info == nil {
			st.Lag = append(st.Lag, PartitionLag{Partition: p, Consumer: consumerName(cfg, p, st.Partitions), Pending: st.Messages, Owner: owner[p]})
			continue
		}
		l := partitionLag(p, info)
		l.Owner = owner[p]
		st.Lag = append(st.Lag, l)
	}
	for count, cs := range layouts {
		if count == st.Partitions {
			continue
		}
		for _, info := range cs {
			st.Stale = append(st.Stale, info.Name)
		}
	}
	slices.Sort(st.Stale)
	return st, nil
}

func consumerName(cfg Config, p, n int) string {
	if n <= 1 {
		return cfg.Durable
	}
	return cfg.PartitionConsumer(p, n)
}

// parsePartition parses PartitionsMetadata ("<index>/<count>").
func parsePartition(v string) (p, n int, ok bool) {
	ps, ns, found := strings.Cut(v, "/")
	p, perr := strconv.Atoi(ps)
	n, nerr := strconv.Atoi(ns)
	if !found || perr != nil || nerr != nil || n < 1 || p < 0 || p >= n {
		return 0, 0, false
	}
	return p, n, true
}

// liveMembers lists the live members of cfg's members bucket and the
// partition count they announce (0 with none, or no bucket: a single
// worker's deployment has none).
func liveMembers(ctx context.Context, js jetstream.JetStream, cfg Config) ([]string, int, error) {
	kv, err := js.KeyValue(ctx, cfg.MembersBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("opening bucket %s: %w", cfg.MembersBucket(), err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("listing bucket %s: %w", cfg.MembersBucket(), err)
	}
	var members []string
	for k := range lister.Keys() {
		members = append(members, k)
	}
	n := 0
	for _, m := range members {
		e, err := kv.Get(ctx, m)
		if err != nil {
			continue // expired meanwhile
		}
		if c, ok := strings.CutPrefix(string(e.Value()), "partitions="); ok {
			if v, err := strconv.Atoi(c); err == nil && v > n {
				n = v
			}
		}
	}
	slices.Sort(members)
	return members, n, nil
}
