package main

import (
	"flag"
	"time"

	"github.com/toolsentry/toolsentry/consumer"
)

// scaleFlags are serve's scale-out settings: how many partitions the
// workers share, under which member name this one joins them, and the
// timers of a takeover.
type scaleFlags struct {
	partitions           int
	member               string
	pinnedTTL, memberTTL time.Duration
}

// scaleUsage is the part of serve's help text about scale-out.
const scaleUsage = `  --partitions N          partitions the workers share; every worker must use the same N. 1 runs
                          one durable consumer as a single worker; above 1 several serve processes
                          on one --nats-url share the partitions (TOOLSENTRY_PARTITIONS, default 1).
                          The telemetry stream stores each input with its partition
                          (<prefix>.telemetry.<kind>.<p>.<key>); to change N stop every worker,
                          then start them with the new N (the stream's transform follows it)
  --member NAME           this worker's name among them; a restarted worker may keep its name
                          (TOOLSENTRY_MEMBER, default "<hostname>-<pid>")
  --member-ttl D          a worker that stops announcing itself for D loses its partitions
                          (TOOLSENTRY_MEMBER_TTL, default 10s)
  --pinned-ttl D          a partition's consumer, and with partitions the directives projector's
                          (one worker projects directives at a time), is unpinned from a worker
                          that stopped pulling for D (TOOLSENTRY_PINNED_TTL, default 10s, at least 3s)
`

func addScaleFlags(fs *flag.FlagSet) *scaleFlags {
	var s scaleFlags
	fs.IntVar(&s.partitions, "partitions", consumer.DefaultPartitions, "")
	bindEnv(fs, "partitions", "TOOLSENTRY_PARTITIONS")
	fs.StringVar(&s.member, "member", "", "")
	bindEnv(fs, "member", "TOOLSENTRY_MEMBER")
	fs.DurationVar(&s.memberTTL, "member-ttl", consumer.DefaultMemberTTL, "")
	bindEnv(fs, "member-ttl", "TOOLSENTRY_MEMBER_TTL")
	fs.DurationVar(&s.pinnedTTL, "pinned-ttl", consumer.DefaultPinnedTTL, "")
	bindEnv(fs, "pinned-ttl", "TOOLSENTRY_PINNED_TTL")
	return &s
}

// check reports a setting that cannot work as a usage error.
func (s *scaleFlags) check() error {
	cfg := consumer.Config{Partitions: s.partitions, PinnedTTL: s.pinnedTTL, MemberTTL: s.memberTTL}
	if s.partitions == 0 {
		return usageErrorf("--partitions 0: want 1 to %d", consumer.MaxPartitions)
	}
	if err := cfg.Validate(); err != nil {
		return usageErrorf("serve: %v", err)
	}
	return nil
}

// apply sets the scale-out settings of the service.
func (s *scaleFlags) apply(o *consumer.ServiceOptions) {
	o.Config.Partitions = s.partitions
	o.Config.PinnedTTL = s.pinnedTTL
	o.Config.MemberTTL = s.memberTTL
	o.Member = s.member
}
