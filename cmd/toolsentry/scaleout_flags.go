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
	partitions          int
	member              string
	leaseTTL, memberTTL time.Duration
	pinnedTTL           time.Duration // the flag before leases; an alias of leaseTTL
}

// scaleUsage is the part of serve's help text about scale-out.
const scaleUsage = `  --partitions N          tool partitions of the telemetry stream; every worker must use the same N.
                          The lanes are the N partitions, the composition lane and the directives
                          lane; the serve processes on one --nats-url share them, each lane read
                          by one worker at a time (TOOLSENTRY_PARTITIONS, default 1). The stream
                          stores each input with its partition (<prefix>.telemetry.<kind>.<p>.<key>);
                          to change N stop every worker, then start them with the new N (the
                          stream's transform follows it, and what was stored before is read first)
  --member NAME           this worker's name among them; a restarted worker may keep its name
                          (TOOLSENTRY_MEMBER, default "<hostname>-<pid>")
  --member-ttl D          a worker that stops announcing itself for D loses its lanes
                          (TOOLSENTRY_MEMBER_TTL, default 10s)
  --lease-ttl D           a lane's lease lasts D without renewal: a dead worker's lanes are taken
                          over within D of its last renewal, and a worker that could not renew
                          for D stops writing (TOOLSENTRY_LEASE_TTL, default 10s, at least 3s)
  --pinned-ttl D          the old name of --lease-ttl, used when --lease-ttl is not given
                          (TOOLSENTRY_PINNED_TTL, default 0s)
`

func addScaleFlags(fs *flag.FlagSet) *scaleFlags {
	var s scaleFlags
	fs.IntVar(&s.partitions, "partitions", consumer.DefaultPartitions, "")
	bindEnv(fs, "partitions", "TOOLSENTRY_PARTITIONS")
	fs.StringVar(&s.member, "member", "", "")
	bindEnv(fs, "member", "TOOLSENTRY_MEMBER")
	fs.DurationVar(&s.memberTTL, "member-ttl", consumer.DefaultMemberTTL, "")
	bindEnv(fs, "member-ttl", "TOOLSENTRY_MEMBER_TTL")
	fs.DurationVar(&s.leaseTTL, "lease-ttl", consumer.DefaultLeaseTTL, "")
	bindEnv(fs, "lease-ttl", "TOOLSENTRY_LEASE_TTL")
	fs.DurationVar(&s.pinnedTTL, "pinned-ttl", 0, "")
	bindEnv(fs, "pinned-ttl", "TOOLSENTRY_PINNED_TTL")
	return &s
}

// check reports a setting that cannot work as a usage error.
func (s *scaleFlags) check() error {
	if s.pinnedTTL != 0 && s.leaseTTL == consumer.DefaultLeaseTTL {
		s.leaseTTL = s.pinnedTTL
	}
	cfg := consumer.Config{Partitions: s.partitions, LeaseTTL: s.leaseTTL, MemberTTL: s.memberTTL}
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
	o.Config.LeaseTTL = s.leaseTTL
	o.Config.MemberTTL = s.memberTTL
	o.Member = s.member
}
