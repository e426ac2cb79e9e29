package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Lane is one consumption lane of the telemetry stream: a tool partition, or
// the composition lane (one lane, whatever the partition token).
type Lane struct {
	// Composition is true for the composition lane.
	Composition bool
	// Partition is the tool partition, 0..N-1 (unused for the composition lane).
	Partition int
}

// ToolLane returns tool partition i's lane.
func ToolLane(i int) Lane { return Lane{Partition: i} }

// CompositionLane returns the composition lane.
func CompositionLane() Lane { return Lane{Composition: true} }

// Key returns the lane's lease key: "tools.<i>" or "composition".
func (l Lane) Key() string {
	if l.Composition {
		return "composition"
	}
	return "tools." + strconv.Itoa(l.Partition)
}

// String returns the lane's lease key.
func (l Lane) String() string { return l.Key() }

// Filters returns the FilterSubjects of lane on the stored layout
// <prefix>.telemetry.<kind>.<partition>.<key>: <prefix>.telemetry.<k>.<i>.*
// for each kind k of a tool partition i, <prefix>.telemetry.<k>.*.* for the
// composition lane (its kinds' messages of every partition).
func Filters(prefix string, lane Lane, kinds ...string) []string {
	p := "*"
	if !lane.Composition {
		p = strconv.Itoa(lane.Partition)
	}
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, prefix+".telemetry."+k+"."+p+".*")
	}
	return out
}

// Layout is the telemetry stream's stored subject layout. Producers publish
// <prefix>.telemetry.<kind>.<key>; the stream's subject transform stores
// <prefix>.telemetry.<kind>.<p>.<key>, p = {{partition(Partitions,2)}} (a
// hash of the key token). The stream's subjects are the published form of
// the known kinds only, so a subject of another kind or shape is refused at
// publish (no stream answers) instead of being stored where no lane reads
// it. Every stored message is read by exactly one lane.
type Layout struct {
	// Prefix is the subject prefix, e.g. "toolsentry".
	Prefix string
	// Partitions is the number of tool partitions N (≥ 1).
	Partitions int
	// ToolKinds are the kind tokens consumed by the tool partitions.
	ToolKinds []string
	// CompositionKinds are the kind tokens consumed by the composition lane.
	CompositionKinds []string
}

// ErrBadLayout is returned by Layout.Validate for an unusable layout.
var ErrBadLayout = errors.New("bad subject layout")

// Validate reports an unusable layout: an empty or wildcard prefix, N < 1,
// no kinds, a kind that is not one subject token, or a kind listed twice.
func (l Layout) Validate() error {
	if l.Prefix == "" || strings.ContainsAny(l.Prefix, "*> \t") || strings.HasPrefix(l.Prefix, ".") || strings.HasSuffix(l.Prefix, ".") {
		return fmt.Errorf("%w: prefix %q", ErrBadLayout, l.Prefix)
	}
	if l.Partitions < 1 {
		return fmt.Errorf("%w: %d partitions, want at least 1", ErrBadLayout, l.Partitions)
	}
	if len(l.ToolKinds) == 0 {
		return fmt.Errorf("%w: no tool kinds", ErrBadLayout)
	}
	seen := map[string]bool{}
	for _, k := range append(append([]string(nil), l.ToolKinds...), l.CompositionKinds...) {
		if k == "" || strings.ContainsAny(k, ".*> \t") {
			return fmt.Errorf("%w: kind %q is not one subject token", ErrBadLayout, k)
		}
		if seen[k] {
			return fmt.Errorf("%w: kind %q listed twice", ErrBadLayout, k)
		}
		seen[k] = true
	}
	return nil
}

// Name identifies the partitioning that lanes' checkpoints belong to, stored
// as the lease's layout, e.g. "partition(4)".
func (l Layout) Name() string { return "partition(" + strconv.Itoa(l.Partitions) + ")" }

func (l Layout) telemetry() string { return l.Prefix + ".telemetry" }

// StreamSubjects returns the telemetry stream's subjects: the published
// form <prefix>.telemetry.<kind>.* of every known kind.
func (l Layout) StreamSubjects() []string {
	out := make([]string, 0, len(l.ToolKinds)+len(l.CompositionKinds))
	for _, k := range append(append([]string(nil), l.ToolKinds...), l.CompositionKinds...) {
		out = append(out, l.telemetry()+"."+k+".*")
	}
	return out
}

// Transform returns the stream's subject transform from the published to
// the stored form.
func (l Layout) Transform() *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      l.telemetry() + ".*.*",
		Destination: l.telemetry() + ".{{wildcard(1)}}.{{partition(" + strconv.Itoa(l.Partitions) + ",2)}}.{{wildcard(2)}}",
	}
}

// StoredSubject returns the subject under which the stream's transform
// stores a message published on subject (<prefix>.telemetry.<kind>.<key>):
// <prefix>.telemetry.<kind>.<KeyPartition(key, N)>.<key>. It is false for a
// subject of another shape. Callers that derive what a stored message
// yields without reading it back (a benchmark's expected verdicts) use it.
func (l Layout) StoredSubject(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, l.telemetry()+".")
	if !ok {
		return "", false
	}
	kind, key, ok := strings.Cut(rest, ".")
	if !ok || kind == "" || key == "" || strings.Contains(key, ".") {
		return "", false
	}
	return l.telemetry() + "." + kind + "." + strconv.Itoa(KeyPartition(key, l.Partitions)) + "." + key, true
}

// Lanes returns every lane: the tool partitions 0..N-1, then the
// composition lane if there are composition kinds.
func (l Layout) Lanes() []Lane {
	out := make([]Lane, 0, l.Partitions+1)
	for i := range l.Partitions {
		out = append(out, ToolLane(i))
	}
	if len(l.CompositionKinds) > 0 {
		out = append(out, CompositionLane())
	}
	return out
}

// Filters returns lane's FilterSubjects (see the package function Filters).
func (l Layout) Filters(lane Lane) ([]string, error) {
	if lane.Composition {
		if len(l.CompositionKinds) == 0 {
			return nil, fmt.Errorf("%w: no composition kinds", ErrBadLayout)
		}
		return Filters(l.Prefix, lane, l.CompositionKinds...), nil
	}
	if lane.Partition < 0 || lane.Partition >= l.Partitions {
		return nil, fmt.Errorf("%w: tool partition %d of %d", ErrBadLayout, lane.Partition, l.Partitions)
	}
	return Filters(l.Prefix, lane, l.ToolKinds...), nil
}

// KeyPartition is the partition, in [0, n), that the stream's transform
// gives a key token: nats-server's {{partition(n,...)}}, FNV-1a (32 bits)
// of the token modulo n. A reader of messages stored before the transform
// (their subjects have no partition token) uses it to tell which lane's
// they are.
func KeyPartition(keyToken string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(keyToken))
	return int(h.Sum32() % uint32(n))
}

// LaneLegacyFilters returns the filters of lane's kinds in the published
// 4-token form, as messages stored before the transform keep it. For a
// tool lane of N > 1 they select every partition's messages: its reader
// skips those whose KeyPartition is another lane's.
func (l Layout) LaneLegacyFilters(lane Lane) []string {
	kinds := l.ToolKinds
	if lane.Composition {
		kinds = l.CompositionKinds
	}
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, l.telemetry()+"."+k+".*")
	}
	return out
}

// LegacyFilters returns the filters of messages stored before the
// transform, in the published 4-token form, of every known kind: the
// upgrade catch-up reads them, in stream order, before the lanes start.
func (l Layout) LegacyFilters() []string { return l.StreamSubjects() }

// The telemetry stream's metadata that records its layout (see
// StreamLayout).
const (
	// LayoutMetadata is the Name of the layout the stream stores under,
	// e.g. "partition(4)".
	LayoutMetadata = "toolsentry.layout"
	// LayoutSinceMetadata is the first stream sequence stored under it,
	// in decimal.
	LayoutSinceMetadata = "toolsentry.layout_since"
)

// StreamLayout is the layout a telemetry stream stores under, as its
// configuration records it. Every message at or above Since is stored
// under Name; those below may be stored under an earlier layout (the
// 4-token published form of a stream that had no transform, or another
// partition count) and are read in stream order, whatever their subject,
// before the lanes start at Since.
type StreamLayout struct {
	// Name is the Layout.Name recorded, "" when none is (a stream
	// provisioned before layouts, or whose layout change was interrupted).
	Name string
	// Since is the first sequence stored under Name (0 when Name is "").
	Since uint64
}

// Metadata returns the stream metadata that records l as stored from
// sequence since.
func (l Layout) Metadata(since uint64) map[string]string {
	return map[string]string{LayoutMetadata: l.Name(), LayoutSinceMetadata: strconv.FormatUint(since, 10)}
}

// ReadStreamLayout reads the layout recorded in a telemetry stream's
// configuration. A record that does not parse counts as none.
func ReadStreamLayout(cfg jetstream.StreamConfig) StreamLayout {
	name, since := cfg.Metadata[LayoutMetadata], cfg.Metadata[LayoutSinceMetadata]
	n, err := strconv.ParseUint(since, 10, 64)
	if name == "" || err != nil || n == 0 {
		return StreamLayout{}
	}
	return StreamLayout{Name: name, Since: n}
}

// Stores reports whether cfg, a telemetry stream's configuration, stores
// under l: its transform is l's and its recorded layout is l's.
func (l Layout) Stores(cfg jetstream.StreamConfig) bool {
	t := l.Transform()
	return cfg.SubjectTransform != nil && *cfg.SubjectTransform == *t && ReadStreamLayout(cfg).Name == l.Name()
}
