package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/benchmix"
)

// The backlog phases measure what a worker meets after an outage and what
// every audit replay reads: the whole mix already stored, nothing running.
// On one server, in one run: the mix is published first; a bare consumer
// with explicit acks drains it (the drain's ceiling); the pipeline, started
// only then, drains the same messages on its own consumer; a bare ordered
// consumer reads the stream (the replay's ceiling); `toolsentry replay`'s
// code path (consumer.Replay) re-derives every verdict from it.

// benchCeilingConsumer names the drain ceiling's consumer on the telemetry
// stream; it is deleted before the pipeline starts.
const benchCeilingConsumer = "toolsentry-bench-ceiling"

// benchBacklog is the result of the backlog phases of one round.
type benchBacklog struct {
	stored  int // messages in the telemetry stream before the drain: the backlog
	drained int // messages in it after the drain: the backlog and the quality checkpoints the pipeline derived from it

	drain, drainCeiling   float64 // events/s
	replay, replayCeiling float64

	counts           *benchCounts // the drain's
	ceilingReceived  int64        // deliveries to the drain ceiling's consumer
	orderedReceived  int64        // messages the replay ceiling read
	replayInputs     int          // inputs consumer.Replay applied
	replayMatched    int          // recorded verdicts it derived again
	replayDifference int          // differences the recorded configuration does not explain
}

// backlog runs the drain and replay phases and their ceilings on one fresh
// server, each phase's peak RSS recorded in mem. profile, if set, receives
// a CPU profile of the pipeline's drain.
func (env benchEnv) backlog(ctx context.Context, mix *benchmix.Mix, mem *benchMemory, profile io.Writer) (res benchBacklog, err error) {
	srv, stop, err := env.server(ctx, "backlog")
	if err != nil {
		return res, err
	}
	defer stop()
	nc, err := srv.connect("toolsentry bench worker")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	// The resources first, so that the backlog lands where serve finds it.
	resources, err := consumer.Provision(ctx, js, env.serviceConfig())
	if err != nil {
		return res, err
	}
	p, err := newBenchPublisher(srv.url, benchRawMaxPending)
	if err != nil {
		return res, err
	}
	defer p.nc.Close()
	var published atomic.Int64
	stopProgress := env.progress.track("backlog publish", mix.Len(), published.Load)
	err = p.publish(ctx, mix, 0, nil, func(i int, _ benchmix.Event) { published.Store(int64(i) + 1) })
	stopProgress()
	if err != nil {
		return res, fmt.Errorf("publishing the backlog: %w", err)
	}
	info, err := resources.Telemetry.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the telemetry stream: %w", err)
	}
	res.stored = int(info.State.Msgs)
	if res.stored != mix.Len() {
		return res, fmt.Errorf("%d events published, %d stored", mix.Len(), res.stored)
	}

	err = mem.phase("drain_ceiling", func() (err error) {
		res.drainCeiling, res.ceilingReceived, err = env.drainCeiling(ctx, resources.Telemetry, nc, res.stored)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("drain ceiling: %w", err)
	}
	err = mem.phase("drain", func() (err error) {
		res.counts, res.drain, err = env.drain(ctx, nc, mix, profile)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("drain: %w", err)
	}
	if info, err = resources.Telemetry.Info(ctx); err != nil {
		return res, fmt.Errorf("reading the telemetry stream: %w", err)
	}
	res.drained = int(info.State.Msgs)

	// toolsentry replay reaches the server over TCP; so does its ceiling.
	rc, err := nats.Connect(srv.url, nats.Name("toolsentry bench replay"))
	if err != nil {
		return res, err
	}
	defer rc.Close()
	rjs, err := jetstream.New(rc)
	if err != nil {
		return res, err
	}
	err = mem.phase("replay_ceiling", func() (err error) {
		res.replayCeiling, res.orderedReceived, err = env.replayCeiling(ctx, rjs, resources.Config.TelemetryStream(), res.drained)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("replay ceiling: %w", err)
	}
	err = mem.phase("replay", func() error {
		start := time.Now()
		var seen atomic.Int64
		stopProgress := env.progress.track("replay", res.drained, seen.Load)
		rep, err := consumer.Replay(ctx, rjs, consumer.ReplayOptions{
			Prefix:         resources.Config.Prefix,
			MaxDifferences: -1,
			Progress:       func(seq, _ uint64) { seen.Store(int64(seq)) },
		})
		elapsed := time.Since(start)
		stopProgress()
		if err != nil {
			return err
		}
		res.replay = float64(res.drained) / elapsed.Seconds()
		res.replayInputs, res.replayMatched, res.replayDifference = rep.InputsReplayed, rep.Matched, rep.Tampered()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	return res, nil
}

// drainCeiling drains the stored backlog with a bare nats.go consumer: a
// new consumer with explicit acks from the first message, nats.go's
// Consume with its defaults, each message acknowledged (Ack, not awaited)
// and nothing else done. It takes from the consumer's creation until the
// server confirms that it holds none unacknowledged; the consumer is then
// deleted.
func (env benchEnv) drainCeiling(ctx context.Context, tele jetstream.Stream, nc *nats.Conn, stored int) (perSec float64, received int64, err error) {
	var got atomic.Int64
	var ackErr atomic.Pointer[error]
	done := make(chan struct{})
	stopProgress := env.progress.track("drain ceiling", stored, got.Load)
	defer stopProgress()

	start := time.Now()
	cons, err := tele.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Name:          benchCeilingConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("creating the consumer: %w", err)
	}
	defer func() {
		if derr := tele.DeleteConsumer(context.WithoutCancel(ctx), benchCeilingConsumer); derr != nil && err == nil {
			err = fmt.Errorf("deleting the consumer: %w", derr)
		}
	}()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := m.Ack(); err != nil {
			ackErr.CompareAndSwap(nil, &err)
		}
		if got.Add(1) == int64(stored) {
			close(done)
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop()
	if err := benchAwait(ctx, done, nil, got.Load, stored); err != nil {
		return 0, got.Load(), err
	}
	if err := nc.Flush(); err != nil {
		return 0, got.Load(), fmt.Errorf("flushing the acks: %w", err)
	}
	if e := ackErr.Load(); e != nil {
		return 0, got.Load(), fmt.Errorf("acknowledging: %w", *e)
	}
	if err := benchAcked(ctx, cons); err != nil {
		return 0, got.Load(), fmt.Errorf("every event was received and acknowledged, but %w", err)
	}
	elapsed := time.Since(start)
	cc.Stop()
	return float64(stored) / elapsed.Seconds(), got.Load(), nil
}

// drain starts the pipeline, as serve does, on the stored backlog and takes
// from its start until every event is handled (its verdicts and state
// stored, then acknowledged) and the server confirms that its consumer has
// nothing left to deliver or awaiting an ack: the quality checkpoints the
// pipeline derives and stores in the stream included. The rate is that of
// the backlog's events.
func (env benchEnv) drain(ctx context.Context, nc *nats.Conn, mix *benchmix.Mix, profile io.Writer) (*benchCounts, float64, error) {
	counts := newBenchCounts(mix.Len())
	stopProgress := env.progress.track("drain", mix.Len(), counts.settled.Load)
	defer stopProgress()
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return counts, 0, fmt.Errorf("--drain-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	svc, err := consumer.StartService(ctx, nc, env.serviceOptions(counts))
	if err != nil {
		return counts, 0, err
	}
	var runErr error
	ran := make(chan struct{})
	go func() {
		runErr = svc.Run(ctx)
		close(ran)
	}()
	defer func() {
		_ = svc.Close()
		<-ran
	}()
	failed := make(chan error, 1)
	go func() {
		<-ran
		failed <- fmt.Errorf("the pipeline stopped: %w", cmpOr(runErr, errors.New("no error")))
	}()
	if err := benchAwait(ctx, counts.done, failed, counts.settled.Load, mix.Len()); err != nil {
		return counts, 0, err
	}
	if err := benchSettled(ctx, svc.Resources, nil); err != nil {
		return counts, 0, err
	}
	elapsed := time.Since(start)
	_ = svc.Close()
	<-ran
	if runErr != nil {
		return counts, 0, fmt.Errorf("stopping the pipeline: %w", runErr)
	}
	return counts, float64(mix.Len()) / elapsed.Seconds(), nil
}

// cmpOr is err, or def when err is nil.
func cmpOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// replayCeiling reads the telemetry stream from its first message with a
// bare ordered consumer (nats.go's Consume with its defaults) and takes
// from its creation until the last message arrived.
func (env benchEnv) replayCeiling(ctx context.Context, js jetstream.JetStream, stream string, stored int) (float64, int64, error) {
	var got atomic.Int64
	done := make(chan struct{})
	stopProgress := env.progress.track("replay ceiling", stored, got.Load)
	defer stopProgress()
	start := time.Now()
	oc, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s: %w", stream, err)
	}
	cc, err := oc.Consume(func(jetstream.Msg) {
		if got.Add(1) == int64(stored) {
			close(done)
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s: %w", stream, err)
	}
	defer cc.Stop()
	if err := benchAwait(ctx, done, nil, got.Load, stored); err != nil {
		return 0, got.Load(), err
	}
	elapsed := time.Since(start)
	cc.Stop()
	return float64(stored) / elapsed.Seconds(), got.Load(), nil
}

// benchAwait waits until done is closed. It fails when n has not moved for
// benchStall, when failed delivers an error, or when ctx ends.
func benchAwait(ctx context.Context, done <-chan struct{}, failed <-chan error, n func() int64, total int) error {
	last, lastChange := int64(-1), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case err := <-failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if got := n(); got != last {
				last, lastChange = got, time.Now()
			} else if time.Since(lastChange) > benchStall {
				return fmt.Errorf("stalled: %d of %d events, none in %s", got, total, benchStall)
			}
		}
	}
}

// benchAcked waits until the server holds no message of cons to deliver
// or awaiting its ack.
func benchAcked(ctx context.Context, cons jetstream.Consumer) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("reading the consumer: %w", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consumer %s: the server still has %d to deliver and %d awaiting an ack",
				info.Name, info.NumPending, info.NumAckPending)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
