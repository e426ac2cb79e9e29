package consumer

import (
	"context"
	"strconv"

	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/publisher"
)

// Passthrough returns the baseline handler of the benchmarks: it republishes
// each message's bytes and headers to subject(m) through pub, waits for the
// PubAcks of the call once and returns, so the engine counts them applied.
// A guard pipeline does the same plus decoding, state and the guard itself;
// comparing the two isolates the cost of that work from the cost of the
// runtime.
//
// The output id is derived from the input's stream and sequence, so an
// input read again republishes the same id and the stream drops it.
func Passthrough(pub *publisher.Publisher, subject func(*Message) string) engine.BatchHandler {
	return engine.BatchFunc(func(ctx context.Context, _ string, msgs []*engine.Message) []error {
		b := pub.NewBatch()
		fail := func(err error) []error {
			res := make([]error, len(msgs))
			for i := range res {
				res[i] = err
			}
			return res
		}
		for _, m := range msgs {
			id := "passthrough-" + m.Stream + "-" + strconv.FormatUint(m.StreamSeq, 10)
			if err := b.Publish(ctx, subject(m), id, m.Header, m.Data); err != nil {
				return fail(err)
			}
		}
		if _, err := b.Wait(ctx); err != nil {
			return fail(err)
		}
		return nil
	})
}
