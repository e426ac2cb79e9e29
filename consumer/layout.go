package consumer

import (
	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/events"
)

// Layout returns the telemetry stream's stored subject layout for c:
// producers publish <prefix>.telemetry.<kind>.<key>, the stream stores
// <prefix>.telemetry.<kind>.<p>.<key> with p the partition (0..N-1, N =
// Partitions) of the key. The kinds are every telemetry kind of package
// events; those that core.OrderingKey puts in the composition lane
// (contract, workflow, quality, observed) are its CompositionKinds, the
// others (schema, invocation, the operators' kinds) its ToolKinds.
// Provision gives the stream this layout's subjects and transform; the
// lanes consume its filters.
func (c Config) Layout() engine.Layout {
	c = c.withDefaults()
	l := engine.Layout{Prefix: c.Prefix, Partitions: c.Partitions}
	for _, k := range events.TelemetryKinds() {
		tok := k.Token()
		if core.OrderingKey(tok, "") == core.CompositionLane {
			l.CompositionKinds = append(l.CompositionKinds, tok)
		} else {
			l.ToolKinds = append(l.ToolKinds, tok)
		}
	}
	return l
}
