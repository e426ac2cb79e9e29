package consumer

import (
	"context"
	"time"
)

// pinIDHeader is the header in which the server tells a pull client of a
// pinned-client consumer its pin id.
const pinIDHeader = "Nats-Pin-Id"

// checkDeliveryLocked watches the deliveries of the consumer (pin is "" for
// one that is not pinned): a new pin id means the server (re)pinned the consumer to this engine
// (pinnedLocked); a gap in the consumer's delivery sequence under one pin
// means deliveries meant for this engine never reached it (dropped from a
// full client buffer as a slow consumer, or lost with a cluster node): they
// come back only after AckWait, and newer messages of their keys must not
// overtake them, so every key is held as after a reconnect. A false alarm
// costs one consumer info round trip. e.mu must be held.
func (e *Engine) checkDeliveryLocked(pin string, delivery uint64) {
	switch {
	case pin != "" && pin != e.pin:
		e.lastDelivery = delivery
		e.pinnedLocked(pin)
		return
	case e.lastDelivery != 0 && delivery > e.lastDelivery+1:
		// Also during a hold or a recovery: theirs read the consumer
		// before these deliveries went missing, so a new one replaces it.
		if old := e.recovering; old != nil {
			old.timer.Stop()
		}
		e.holdLocked()
		e.log.Warn().Uint64("expected", e.lastDelivery+1).Uint64("got", delivery).
			Msg("deliveries missing; holding every key until they are redelivered")
		go e.afterReconnect()
	}
	e.lastDelivery = max(e.lastDelivery, delivery)
}

// pinnedLocked is called when a delivery carries a new pin id: the server
// (re)pinned the consumer to this engine, and the worker pinned before it
// may have left messages unacknowledged (it died, or it is still finishing
// what it holds). As at a start after a crash, every key is held until
// those messages are redelivered here or acknowledged there (startRecovery).
// The hold is in place before the delivery is queued. e.mu must be held.
func (e *Engine) pinnedLocked(pin string) {
	e.pin = pin
	if old := e.recovering; old != nil {
		old.timer.Stop()
	}
	e.holdLocked()
	r := e.recovering
	e.log.Info().Msg("pinned: this worker consumes the partition now; holding every key until an earlier worker's deliveries are settled")
	go e.afterPinned(r)
}

// afterPinned runs OnPinned while the hold r is in place, then turns the
// hold into a recovery (afterReconnect).
func (e *Engine) afterPinned(r *recovery) {
	for e.opts.OnPinned != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := e.opts.OnPinned(ctx)
		cancel()
		if err == nil {
			break
		}
		e.log.Warn().Err(err).Msg("preparing to consume the partition failed; keys stay held, retrying")
		time.Sleep(time.Second)
		e.mu.Lock()
		gone := e.stopping || e.recovering != r
		e.mu.Unlock()
		if gone {
			return
		}
	}
	e.afterReconnect()
}

// unpin releases the consumer's pin if this engine holds it, so that
// another worker's pull is pinned at once instead of after PinnedTTL. Called
// after the hand-back at shutdown.
func (e *Engine) unpin() {
	if e.opts.PriorityGroup == "" {
		return
	}
	e.mu.Lock()
	pin := e.pin
	e.mu.Unlock()
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := e.cons.Info(ctx)
	if err != nil {
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group != e.opts.PriorityGroup || g.PinnedClientID != pin {
			continue
		}
		stream, err := e.js.Stream(ctx, info.Stream)
		if err == nil {
			err = stream.UnpinConsumer(ctx, info.Name, g.Group)
		}
		if err != nil {
			e.log.Debug().Err(err).Msg("unpinning at shutdown failed; the pin expires after PinnedTTL")
		}
	}
}
