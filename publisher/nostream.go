package publisher

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
)

// ErrNoStream is returned (wrapped, with jetstream.ErrNoStreamResponse)
// when no stream took a published message: no stream's subjects include
// its subject. The telemetry stream takes <prefix>.telemetry.<kind>.<key>
// of the telemetry kinds only (the stream's subjects are one per kind,
// provisioned by `toolsentry serve`), so a telemetry subject of another
// kind or shape is refused at publish instead of being stored where no
// worker reads it; and nothing is stored before the streams exist.
var ErrNoStream = errors.New("no stream takes the subject")

// NoStream explains err, the failure of a publish to subject, when it says
// that no stream answered (jetstream.ErrNoStreamResponse): the error then
// matches ErrNoStream and says why, from the subject's shape (a kind that
// is not a telemetry kind, a subject that is not <prefix>.telemetry.<kind>.
// <key>, or a stream that does not exist or is older than the kind). Any
// other err is returned as it is.
func NoStream(subject string, err error) error {
	if err == nil || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrNoStream, whyNoStream(subject), err)
}

func whyNoStream(subject string) string {
	prefix, rest, _ := strings.Cut(subject, ".")
	tokens := strings.Split(rest, ".")
	if tokens[0] != "telemetry" {
		return fmt.Sprintf("no stream's subjects include %s (are the streams provisioned? `toolsentry serve` creates them)", subject)
	}
	var kinds []string
	known := false
	kind := ""
	if len(tokens) > 1 {
		kind = tokens[1]
	}
	for _, k := range events.TelemetryKinds() {
		kinds = append(kinds, k.Token())
		known = known || k.Token() == kind
	}
	n, nerr := events.NewNames(prefix)
	stream := "the telemetry stream"
	if nerr == nil {
		stream = n.TelemetryStream()
	}
	switch {
	case !known:
		return fmt.Sprintf("kind %q is not a telemetry kind: %s takes %s.telemetry.<kind>.<key> with kind one of %s",
			kind, stream, prefix, strings.Join(kinds, ", "))
	case len(tokens) != 3:
		return fmt.Sprintf("%s is not a telemetry subject: %s takes %s.telemetry.<kind>.<key>, one token of key", subject, stream, prefix)
	}
	return fmt.Sprintf("%s does not exist or does not take kind %q (it is provisioned by `toolsentry serve`: is it running, and of a version that knows the kind?)", stream, kind)
}
