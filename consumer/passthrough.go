package consumer

import (
	"context"
	"strconv"

	"github.com/toolsentry/toolsentry/publisher"
)

// Passthrough returns the baseline handler of the benchmarks: it republishes
// each message's bytes and headers to subject(m) through pub, waits for the
// PubAck and returns, so the engine acknowledges the input. A guard pipeline
// does the same plus decoding, state and the guard itself; comparing the
// two isolates the cost of that work from the cost of the runtime.
//
// The output id is derived from the input's stream and sequence, so a
// redelivered input republishes the same id and the stream drops it.
func Passthrough(pub *publisher.Publisher, subject func(*Message) string) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		b := pub.NewBatch()
		id := "passthrough-" + m.Stream + "-" + strconv.FormatUint(m.StreamSeq, 10)
		if err := b.Publish(ctx, subject(m), id, m.Header, m.Data); err != nil {
			return err
		}
		_, err := b.Wait(ctx)
		return err
	})
}
