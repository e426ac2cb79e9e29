package consumer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// Defaults of Config.
const (
	DefaultPrefix     = "toolsentry"
	DefaultReplicas   = 1
	DefaultMaxAge     = 30 * 24 * time.Hour
	DefaultDuplicates = 2 * time.Minute
	DefaultMaxDeliver = 5
	DefaultKVHistory  = 1
)

// Config names and sizes the NATS resources of one toolsentry deployment.
// Zero fields take the defaults above (see DefaultConfig); Provision applies
// them and validates.
type Config struct {
	// Prefix is the first subject token of every subject and the root of
	// every resource name: streams are upper case (TOOLSENTRY_TELEMETRY),
	// buckets lower case (toolsentry-baselines). 1 to 32 lower-case
	// letters, digits, '-' and '_', starting with a letter (events.NewNames).
	Prefix string
	// Replicas of the streams, the consumer and the buckets: 1 for a
	// single server, 3 for a cluster.
	Replicas int
	// TelemetryMaxAge is how long the telemetry stream, the audit log that
	// replay reads, keeps messages. Default 30 days; negative keeps them
	// forever.
	TelemetryMaxAge time.Duration
	// VerdictsMaxAge is the same for the verdict stream (default 30 days,
	// negative forever).
	VerdictsMaxAge time.Duration
	// DLQMaxAge is the same for the dead-letter stream (default 30 days,
	// negative forever).
	DLQMaxAge time.Duration
	// Duplicates is the window in which every stream drops a message whose
	// Nats-Msg-Id it has already stored (default 2 minutes). It must cover
	// the longest redelivery delay, or a republished verdict is stored twice.
	Duplicates time.Duration
	// Durable is the name of the durable consumer that workers before
	// lanes shared on the telemetry stream (default "<prefix>-workers"):
	// a lane never committed starts after its ack floor.
	Durable string
	// MaxDeliver is how often a transiently failing input is handed to the
	// handler before it is dead-lettered (default 5; the engine's
	// MaxAttempts).
	MaxDeliver int
	// KVHistory is how many revisions per key the state buckets keep
	// (default 1, at most 64). Compare-and-set needs only the latest.
	KVHistory int
	// Partitions is how many tool partitions the telemetry stream stores
	// (default 1, at most MaxPartitions): each is a lane, as is the
	// composition lane; see the package doc.
	Partitions int
	// LeaseTTL is how long a lane's lease lasts without renewal (default
	// 10s, at least 3s; renewed every LeaseTTL/3): a dead worker's lanes
	// are taken over within it.
	LeaseTTL time.Duration
	// MemberTTL is how long a worker counts as alive after its last
	// heartbeat in the members bucket (default 10s, at least 1s).
	MemberTTL time.Duration
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{}.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.TelemetryMaxAge == 0 {
		c.TelemetryMaxAge = DefaultMaxAge
	}
	if c.VerdictsMaxAge == 0 {
		c.VerdictsMaxAge = DefaultMaxAge
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = DefaultMaxAge
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.Durable == "" {
		c.Durable = c.Prefix + "-workers"
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.KVHistory == 0 {
		c.KVHistory = DefaultKVHistory
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = DefaultMemberTTL
	}
	return c
}

var durableRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Validate reports the first setting that cannot work, wrapping
// ErrInvalidConfig. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := c.names(); err != nil {
		return err
	}
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("%w: replicas %d: want 1 to 5", ErrInvalidConfig, c.Replicas)
	case c.Duplicates < 0:
		return fmt.Errorf("%w: duplicates %s: want positive", ErrInvalidConfig, c.Duplicates)
	case !durableRE.MatchString(c.Durable):
		return fmt.Errorf("%w: durable %q: want letters, digits, '-' or '_'", ErrInvalidConfig, c.Durable)
	case c.MaxDeliver < 1:
		return fmt.Errorf("%w: max deliver %d: want at least 1", ErrInvalidConfig, c.MaxDeliver)
	case c.KVHistory < 1 || c.KVHistory > 64:
		return fmt.Errorf("%w: kv history %d: want 1 to 64", ErrInvalidConfig, c.KVHistory)
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d: want 1 to %d", ErrInvalidConfig, c.Partitions, MaxPartitions)
	case c.LeaseTTL < 3*time.Second:
		return fmt.Errorf("%w: lease ttl %s: want at least 3s", ErrInvalidConfig, c.LeaseTTL)
	case c.MemberTTL < time.Second:
		return fmt.Errorf("%w: member ttl %s: want at least 1s", ErrInvalidConfig, c.MemberTTL)
	}
	for _, s := range []struct {
		name   string
		maxAge time.Duration
	}{
		{"telemetry", c.TelemetryMaxAge},
		{"verdicts", c.VerdictsMaxAge},
		{"dlq", c.DLQMaxAge},
	} {
		if s.maxAge > 0 && s.maxAge < c.Duplicates {
			return fmt.Errorf("%w: %s max age %s is shorter than the duplicate window %s", ErrInvalidConfig, s.name, s.maxAge, c.Duplicates)
		}
	}
	return nil
}

// names returns the subjects, streams and buckets of c's prefix (the
// default when empty) as events.Names derives them: the one source of the
// names below. A prefix that events.NewNames refuses is ErrInvalidConfig.
func (c Config) names() (events.Names, error) {
	n, err := events.NewNames(c.withDefaults().Prefix)
	if err != nil {
		return events.Names{}, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.TrimPrefix(err.Error(), "events: "))
	}
	return n, nil
}

// name returns what f names for c's prefix, or "" when the prefix is
// invalid (Validate says why): a name of no resource, never the default
// deployment's.
func (c Config) name(f func(events.Names) string) string {
	n, err := c.names()
	if err != nil {
		return ""
	}
	return f(n)
}

// bucket is a bucket of the runtime's own, suffix after events.Names'
// prefix ("" for an invalid prefix, as every name of Config).
func (c Config) bucket(suffix string) string {
	return c.name(func(n events.Names) string { return n.Prefix() + suffix })
}

// The names below are events.Names' for c's prefix, "" when it is invalid.

// TelemetryStream is the name of the input stream (TOOLSENTRY_TELEMETRY).
func (c Config) TelemetryStream() string { return c.name(events.Names.TelemetryStream) }

// VerdictsStream is the name of the verdict stream (TOOLSENTRY_VERDICTS).
func (c Config) VerdictsStream() string { return c.name(events.Names.VerdictsStream) }

// DLQStream is the name of the dead-letter stream (TOOLSENTRY_DLQ).
func (c Config) DLQStream() string { return c.name(events.Names.DeadLetterStream) }

// TelemetrySubjects is a subject filter of every stored telemetry message
// (toolsentry.telemetry.>), in the stored form and the legacy form stored
// before the stream had its subject transform. The stream's own subjects
// are the published form of the known kinds (Layout().StreamSubjects()).
func (c Config) TelemetrySubjects() string { return c.name(events.Names.TelemetrySubjects) }

// TelemetryPrefix is the subject prefix of telemetry (toolsentry.telemetry).
func (c Config) TelemetryPrefix() string { return filterPrefix(c.TelemetrySubjects()) }

// VerdictsPrefix is the subject prefix of verdicts (toolsentry.verdicts).
func (c Config) VerdictsPrefix() string { return filterPrefix(c.name(events.Names.VerdictsSubjects)) }

// DLQPrefix is the subject prefix of dead letters (toolsentry.dlq).
func (c Config) DLQPrefix() string { return filterPrefix(c.name(events.Names.DeadLetterSubjects)) }

// filterPrefix returns the subjects below a filter "<prefix>.>": its
// prefix ("" for "").
func filterPrefix(filter string) string { return strings.TrimSuffix(filter, ".>") }

// DeadLetterSubject is the subject of a dead letter with the given reason
// code: toolsentry.dlq.<reason>, so that an operator subscribes to one kind
// of failure ("toolsentry.dlq.schema_invalid"); the original subject, stream
// sequence and error are in the headers. A reason that is not a plain
// lower-case token ([a-z0-9_]) is filed under "permanent". The engine's
// reasons are more than events.Reason's, so the subject is DLQPrefix's and
// the reason is checked here.
func (c Config) DeadLetterSubject(reason string) string {
	if reason == "" || strings.IndexFunc(reason, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_'
	}) >= 0 {
		reason = ReasonPermanent
	}
	p := c.DLQPrefix()
	if p == "" {
		return ""
	}
	return p + "." + reason
}

// BaselinesBucket is the bucket of tool schema baselines
// (toolsentry-baselines).
func (c Config) BaselinesBucket() string { return c.name(events.Names.BaselinesBucket) }

// UsageBucket is the bucket of the fields agents use per tool
// (toolsentry-usage).
func (c Config) UsageBucket() string { return c.name(events.Names.UsageBucket) }

// QualityBucket is the bucket of tool quality (toolsentry-quality).
func (c Config) QualityBucket() string { return c.name(events.Names.QualityBucket) }

// OutcomesBucket is the bucket of tool outcome counters
// (toolsentry-outcomes).
func (c Config) OutcomesBucket() string { return c.name(events.Names.OutcomesBucket) }

// WorkflowsBucket is the bucket of workflow compositions
// (toolsentry-workflows).
func (c Config) WorkflowsBucket() string { return c.name(events.Names.WorkflowsBucket) }

// DirectivesBucket is the bucket of operator directives
// (toolsentry-directives).
func (c Config) DirectivesBucket() string { return c.name(events.Names.DirectivesBucket) }

// Resources are the handles Provision created or updated.
type Resources struct {
	Config    Config // with defaults applied
	Telemetry jetstream.Stream
	// Layout is the telemetry stream's recorded layout (Config.Layout):
	// the lanes read from Layout.Since, and what is stored below it in
	// stream order first (see createOrUpdateTelemetry).
	Layout     engine.StreamLayout
	Verdicts   jetstream.Stream
	DLQ        jetstream.Stream
	Members    jetstream.KeyValue // the workers alive
	Leases     jetstream.KeyValue // the lanes' leases and checkpoints
	Baselines  jetstream.KeyValue
	Usage      jetstream.KeyValue
	Quality    jetstream.KeyValue
	Outcomes   jetstream.KeyValue
	Workflows  jetstream.KeyValue
	Directives jetstream.KeyValue
}

// Provision creates the streams, the durable consumer and the KV buckets of
// cfg, or updates them to cfg if they exist. It is idempotent and safe to
// run from several workers at once; every process runs it at start. Each of
// its requests is bounded by engine.ProvisionRequestTimeout: one that got no
// answer (ErrNoAnswer: another worker was creating the same resource on a
// cluster) or that the cluster could not serve yet is for the caller to
// try again, as StartService does.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) (*Resources, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	res := &Resources{Config: cfg}

	layout := cfg.Layout()
	streams := []struct {
		dst       *jetstream.Stream
		name      string
		subjects  []string
		transform *jetstream.SubjectTransformConfig
		maxAge    time.Duration
		desc      string
	}{
		{&res.Telemetry, cfg.TelemetryStream(), layout.StreamSubjects(), layout.Transform(), cfg.TelemetryMaxAge, "toolsentry input: agents' tool-call telemetry (audit log)"},
		{&res.Verdicts, cfg.VerdictsStream(), []string{cfg.VerdictsPrefix() + ".>"}, nil, cfg.VerdictsMaxAge, "toolsentry output: guard verdicts"},
		{&res.DLQ, cfg.DLQStream(), []string{cfg.DLQPrefix() + ".>"}, nil, cfg.DLQMaxAge, "toolsentry dead letters: original bytes and reason headers"},
	}
	for _, s := range streams {
		sc := jetstream.StreamConfig{
			Name:             s.name,
			Description:      s.desc,
			Subjects:         s.subjects,
			SubjectTransform: s.transform,
			Retention:        jetstream.LimitsPolicy,
			Discard:          jetstream.DiscardOld,
			Storage:          jetstream.FileStorage,
			Replicas:         cfg.Replicas,
			MaxAge:           max(s.maxAge, 0),
			Duplicates:       cfg.Duplicates,
		}
		var st jetstream.Stream
		var err error
		if s.dst == &res.Telemetry {
			st, res.Layout, err = createOrUpdateTelemetry(ctx, js, sc, layout)
		} else {
			st, err = engine.CreateOrUpdateStream(ctx, js, sc)
		}
		if err != nil {
			return nil, fmt.Errorf("provisioning stream %s: %w", s.name, err)
		}
		*s.dst = st
	}

	if err := provisionLaneBuckets(ctx, js, res); err != nil {
		return nil, err
	}

	buckets := []struct {
		dst  *jetstream.KeyValue
		name string
		desc string
	}{
		{&res.Baselines, cfg.BaselinesBucket(), "toolsentry state: tool schema baselines"},
		{&res.Usage, cfg.UsageBucket(), "toolsentry state: fields agents use per tool"},
		{&res.Quality, cfg.QualityBucket(), "toolsentry state: tool contracts and checkpointed quality (composition lane)"},
		{&res.Outcomes, cfg.OutcomesBucket(), "toolsentry state: tool outcome counters (tool lanes)"},
		{&res.Workflows, cfg.WorkflowsBucket(), "toolsentry state: workflow compositions"},
		{&res.Directives, cfg.DirectivesBucket(), "toolsentry state: operator directives"},
	}
	for _, b := range buckets {
		kc := jetstream.KeyValueConfig{
			Bucket:      b.name,
			Description: b.desc,
			History:     uint8(cfg.KVHistory),
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		}
		kv, err := engine.CreateOrUpdateKeyValue(ctx, js, kc)
		if err != nil {
			return nil, fmt.Errorf("provisioning bucket %s: %w", b.name, err)
		}
		*b.dst = kv
	}
	return res, nil
}

// sameStream reports whether the stored config old already is want with
// the layout metadata md: the settings Provision chooses are equal.
func sameStream(old, want jetstream.StreamConfig, md map[string]string) bool {
	for k, v := range md {
		if old.Metadata[k] != v {
			return false
		}
	}
	return old.Description == want.Description && slices.Equal(old.Subjects, want.Subjects) &&
		old.SubjectTransform != nil && want.SubjectTransform != nil && *old.SubjectTransform == *want.SubjectTransform &&
		old.Retention == want.Retention && old.Discard == want.Discard && old.Storage == want.Storage &&
		old.Replicas == want.Replicas && old.MaxAge == want.MaxAge && old.Duplicates == want.Duplicates
}

// createOrUpdateTelemetry is createOrUpdateStream for the telemetry stream
// sc, which stores under layout (its subjects and transform) and records
// it in its metadata with the first sequence stored under it
// (engine.StreamLayout): 1 for a new stream. A stream that stores under
// another layout (one provisioned before the transform, or with another
// partition count) is updated in place in two steps: first the transform,
// with no layout recorded, then the record, Since = the last sequence
// after the update + 1. Everything stored before the transform changed
// is below Since (and so is what a producer published in between, stored
// under the new one: reading it with the older messages is harmless), so
// the lanes of the new layout start at Since and what is below it is read
// in stream order first. A start interrupted between the two steps leaves
// no record, and the next one records a later Since.
func createOrUpdateTelemetry(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, layout engine.Layout) (jetstream.Stream, engine.StreamLayout, error) {
	fresh := sc
	fresh.Metadata = layout.Metadata(1)
	st, err := engine.ProvisionRequest(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateStream(ctx, fresh)
	})
	if err == nil {
		return st, engine.ReadStreamLayout(st.CachedInfo().Config), nil
	}
	if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, engine.StreamLayout{}, err
	}
	update := func(md map[string]string) (jetstream.Stream, error) {
		sc.Metadata = md
		return engine.ProvisionRequest(ctx, func(ctx context.Context) (jetstream.Stream, error) {
			return js.UpdateStream(ctx, sc)
		})
	}
	st, err = engine.ProvisionRequest(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		return js.Stream(ctx, sc.Name)
	})
	if err != nil {
		return nil, engine.StreamLayout{}, err
	}
	if old := st.CachedInfo().Config; layout.Stores(old) {
		md := layout.Metadata(engine.ReadStreamLayout(old).Since)
		if sameStream(old, sc, md) {
			// Nothing to change: no update, which a cluster that is still
			// placing the stream (workers started together) may leave
			// unanswered.
			return st, engine.ReadStreamLayout(old), nil
		}
		st, err = update(md)
		if err != nil {
			return nil, engine.StreamLayout{}, err
		}
		return st, engine.ReadStreamLayout(st.CachedInfo().Config), nil
	}
	if st, err = update(nil); err != nil {
		return nil, engine.StreamLayout{}, err
	}
	info, err := engine.ProvisionRequest(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return st.Info(ctx)
	})
	if err != nil {
		return nil, engine.StreamLayout{}, err
	}
	if st, err = update(layout.Metadata(info.State.LastSeq + 1)); err != nil {
		return nil, engine.StreamLayout{}, err
	}
	return st, engine.ReadStreamLayout(st.CachedInfo().Config), nil
}
