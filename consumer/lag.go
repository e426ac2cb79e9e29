package consumer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// LaneLag is one lane's progress, as its lease records it.
type LaneLag struct {
	// Lane is the lease key: tools.<i>, composition or directives.
	Lane string
	// Owner is the worker that holds the lease; empty when it is free
	// (released, or never taken).
	Owner string
	// Epoch counts the lease's holders so far.
	Epoch uint64
	// Checkpoint is the lowest stream sequence not yet applied: where the
	// lane resumes after a restart or a takeover.
	Checkpoint uint64
	// Lag is the number of the lane's stored messages not yet applied.
	Lag uint64
	// Measured is true when Lag is the holder's own count, stored with its
	// last renewal (At, about once a second): ReadLag's answer for a held
	// lane. Otherwise the reader counted the messages at or after the
	// checkpoint itself, as ReadStatus always does.
	Measured bool
	At       time.Time
}

// Status is a deployment's progress, read from the server without changing
// anything: what `toolsentry status` shows.
type Status struct {
	Stream string
	// Messages and LastSeq are the telemetry stream's stored message count
	// and last sequence.
	Messages, LastSeq uint64
	// Partitions is the stream's tool partition count (its subject
	// transform; 1 without one).
	Partitions int
	// Members are the live workers, sorted.
	Members []string
	// Lanes has one entry per lane: the tool partitions in order, the
	// composition lane, the directives lane.
	Lanes []LaneLag
	// Stale names the durable consumers that workers before lanes left on
	// the telemetry stream: no worker reads them (nats consumer rm).
	Stale []string
}

// TotalLag is the sum of the lanes' lag.
func (s *Status) TotalLag() uint64 {
	var n uint64
	for _, l := range s.Lanes {
		n += l.Lag
	}
	return n
}

// ReadStatus reads the status of the deployment of cfg (its Prefix and
// Durable; the partition count is the stream's) from the server. A missing
// telemetry stream is jetstream.ErrStreamNotFound; an invalid prefix
// ErrInvalidConfig.
func ReadStatus(ctx context.Context, js jetstream.JetStream, cfg Config) (*Status, error) {
	cfg = cfg.withDefaults()
	if _, err := cfg.names(); err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, cfg.TelemetryStream())
	if err != nil {
		return nil, err
	}
	si := stream.CachedInfo()
	st := &Status{Stream: cfg.TelemetryStream(), Messages: si.State.Msgs, LastSeq: si.State.LastSeq, Partitions: streamPartitions(si.Config)}
	cfg.Partitions = st.Partitions
	if st.Members, err = liveMembers(ctx, js, cfg); err != nil {
		return nil, err
	}
	leases, err := js.KeyValue(ctx, cfg.LeasesBucket())
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("opening bucket %s: %w", cfg.LeasesBucket(), err)
	}
	verdicts, err := js.Stream(ctx, cfg.VerdictsStream())
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("reading stream %s: %w", cfg.VerdictsStream(), err)
	}
	if st.Lanes, err = readLanes(ctx, leases, stream, verdicts, cfg, false); err != nil {
		return nil, err
	}
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if _, ours := info.Config.Metadata[oldConsumerMetadata]; ours {
			st.Stale = append(st.Stale, info.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing consumers of %s: %w", cfg.TelemetryStream(), err)
	}
	slices.Sort(st.Stale)
	return st, nil
}

// ReadLag reads the lag of every lane of res (serve's /metrics and
// /readyz): the holders' own measures from the leases (one KV read each),
// counted from the checkpoint for a lane that has no holder.
func ReadLag(ctx context.Context, res *Resources) ([]LaneLag, error) {
	return readLanes(ctx, res.Leases, res.Telemetry, res.Verdicts, res.Config, true)
}

// Unapplied counts the stored messages of every lane of res at or after its
// committed checkpoint: 0 once everything stored is applied and committed.
func Unapplied(ctx context.Context, res *Resources) (uint64, error) {
	lanes, err := readLanes(ctx, res.Leases, res.Telemetry, res.Verdicts, res.Config, false)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, l := range lanes {
		n += l.Lag
	}
	return n, nil
}

// laneSources lists the lanes of cfg with what each reads.
func laneSources(cfg Config) ([]string, []engine.Source, error) {
	names, err := events.NewNames(cfg.Prefix)
	if err != nil {
		return nil, nil, err
	}
	layout := cfg.Layout()
	var keys []string
	var srcs []engine.Source
	for _, lane := range layout.Lanes() {
		f, err := layout.Filters(lane)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, lane.Key())
		// The messages stored before the transform count too (a tool
		// lane of N > 1 counts every partition's).
		f = append(f, layout.LaneLegacyFilters(lane)...)
		srcs = append(srcs, engine.Source{Stream: cfg.TelemetryStream(), FilterSubjects: f})
	}
	keys = append(keys, DirectivesLane)
	srcs = append(srcs, engine.Source{Stream: cfg.VerdictsStream(), FilterSubjects: []string{names.VerdictsSubjects()}})
	return keys, srcs, nil
}

func readLanes(ctx context.Context, leases jetstream.KeyValue, telemetry, verdicts jetstream.Stream, cfg Config, measured bool) ([]LaneLag, error) {
	keys, srcs, err := laneSources(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]LaneLag, 0, len(keys))
	for i, key := range keys {
		l := LaneLag{Lane: key}
		var state engine.LeaseState
		found := false
		if leases != nil {
			if state, found, err = engine.ReadLease(ctx, leases, key); err != nil {
				return nil, err
			}
		}
		if found {
			l.Owner, l.Epoch, l.Checkpoint, l.At = state.Owner, state.Epoch, state.Checkpoint, state.At
		}
		if measured && found && state.Owner != "" && state.HasLag {
			l.Lag, l.Measured = state.Lag, true
		} else {
			stream := telemetry
			if srcs[i].Stream == cfg.VerdictsStream() {
				stream = verdicts
			}
			if stream != nil {
				if l.Lag, err = countFrom(ctx, stream, srcs[i].FilterSubjects, l.Checkpoint); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// countFrom counts the messages of stream matching filters at or after
// sequence from, with a short-lived consumer the server deletes itself.
func countFrom(ctx context.Context, stream jetstream.Stream, filters []string, from uint64) (uint64, error) {
	cc := jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		FilterSubjects: filters, InactiveThreshold: 5 * time.Second, MemoryStorage: true, Replicas: 1,
	}
	if from > 1 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	c, err := stream.CreateConsumer(ctx, cc)
	if err != nil {
		return 0, fmt.Errorf("counting the messages of %s after %d: %w", stream.CachedInfo().Config.Name, from, err)
	}
	n := c.CachedInfo().NumPending
	_ = stream.DeleteConsumer(ctx, c.CachedInfo().Name)
	return n, nil
}

var partitionRE = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)\s*,`)

// streamPartitions is the tool partition count of a telemetry stream's
// subject transform (1 without one).
func streamPartitions(sc jetstream.StreamConfig) int {
	if sc.SubjectTransform == nil {
		return 1
	}
	m := partitionRE.FindStringSubmatch(sc.SubjectTransform.Destination)
	if m == nil {
		return 1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// liveMembers lists the live workers of cfg's members bucket, sorted.
func liveMembers(ctx context.Context, js jetstream.JetStream, cfg Config) ([]string, error) {
	kv, err := js.KeyValue(ctx, cfg.MembersBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", cfg.MembersBucket(), err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing bucket %s: %w", cfg.MembersBucket(), err)
	}
	var members []string
	for k := range lister.Keys() {
		members = append(members, k)
	}
	slices.Sort(members)
	return members, nil
}
