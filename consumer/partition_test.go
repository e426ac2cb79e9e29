package consumer_test

import (
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/core"
)

func TestPartitionOfFollowsTheOrderingKey(t *testing.T) {
	const n = 8
	lane := consumer.PartitionOf(core.CompositionLane, n)
	for _, kind := range []string{"contract", "workflow"} {
		for _, key := range []string{"crm=2Elookup", "billing", "wf-1", "x"} {
			if got := consumer.PartitionOf(core.OrderingKey(kind, key), n); got != lane {
				t.Errorf("%s %s: partition %d, want the composition lane's %d", kind, key, got, lane)
			}
		}
	}
	used := map[int]bool{}
	for i := range 200 {
		tool := fmt.Sprintf("tool-%d", i)
		p := consumer.PartitionOf(core.OrderingKey("schema", tool), n)
		if q := consumer.PartitionOf(core.OrderingKey("invocation", tool), n); q != p {
			t.Errorf("%s: schema in partition %d, invocation in %d", tool, p, q)
		}
		if p < 0 || p >= n {
			t.Fatalf("%s: partition %d out of [0, %d)", tool, p, n)
		}
		used[p] = true
	}
	if len(used) != n {
		t.Errorf("200 tools use %d of %d partitions", len(used), n)
	}
	if got := consumer.PartitionOf("anything", 1); got != 0 {
		t.Errorf("one partition: got %d", got)
	}
	// The function is part of the deployment's contract: FNV-1a.
	if got := consumer.PartitionOf("crm=2Elookup", 1000); got != 325 {
		t.Errorf("PartitionOf(crm=2Elookup, 1000) = %d: the partition function changed", got)
	}
}

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
		{PinnedTTL: 2e9},
		{MemberTTL: 5e8},
	} {
		if err := c.Validate(); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", c, err)
		}
	}
	d := consumer.DefaultConfig()
	if d.Partitions != 1 || d.PinnedTTL != consumer.DefaultPinnedTTL || d.MemberTTL != consumer.DefaultMemberTTL {
		t.Errorf("defaults: %+v", d)
	}
	if got := d.PartitionConsumer(2, 6); got != "toolsentry-workers-2of6" {
		t.Errorf("partition consumer name %q", got)
	}
	if m := consumer.DefaultMember(); !regexp.MustCompile(`^[A-Za-z0-9_=-]+-[0-9]+$`).MatchString(m) {
		t.Errorf("default member %q is not <host>-<pid> in KV key characters", m)
	}
}
