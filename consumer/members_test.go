package consumer_test

import (
	"errors"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/consumer"
)

func TestAssignSharesEveryPartitionOnce(t *testing.T) {
	for _, tc := range []struct {
		members []string
		n       int
		want    map[string][]int
	}{
		{[]string{"a"}, 4, map[string][]int{"a": {0, 1, 2, 3}}},
		{[]string{"b", "a", "c"}, 6, map[string][]int{"a": {0, 3}, "b": {1, 4}, "c": {2, 5}}},
		{[]string{"a", "b", "a"}, 3, map[string][]int{"a": {0, 2}, "b": {1}}},
		{[]string{"a", "b", "c", "d"}, 2, map[string][]int{"a": {0}, "b": {1}, "c": nil, "d": nil}},
	} {
		got := map[string][]int{}
		for m := range tc.want {
			got[m] = consumer.Assign(tc.members, tc.n, m)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Assign(%v, %d) (-want +got):\n%s", tc.members, tc.n, diff)
		}
	}
	if got := consumer.Assign([]string{"a"}, 3, "z"); got != nil {
		t.Errorf("a non-member owns %v", got)
	}
}

func TestConfigValidateScaleOut(t *testing.T) {
	for _, c := range []consumer.Config{
		{Partitions: -1},
		{Partitions: consumer.MaxPartitions + 1},
		{LeaseTTL: 2e9},
		{MemberTTL: 5e8},
	} {
		if err := c.Validate(); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", c, err)
		}
	}
	d := consumer.DefaultConfig()
	if d.Partitions != 1 || d.LeaseTTL != consumer.DefaultLeaseTTL || d.MemberTTL != consumer.DefaultMemberTTL {
		t.Errorf("defaults: %+v", d)
	}
	if d.LeasesBucket() != "toolsentry-leases" || d.MembersBucket() != "toolsentry-members" {
		t.Errorf("buckets %q %q", d.LeasesBucket(), d.MembersBucket())
	}
	if m := consumer.DefaultMember(); !regexp.MustCompile(`^[A-Za-z0-9_=-]+-[0-9]+$`).MatchString(m) {
		t.Errorf("default member %q is not <host>-<pid> in KV key characters", m)
	}
}
