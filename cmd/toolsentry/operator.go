package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// This file publishes the operators' actions (baseline accept and reset,
// agent migrated and forget) as telemetry events on the tool's subject and
// waits until the tool's lane in `toolsentry serve` has applied them: the
// tool's outcome record then holds the action's result (core.OperatorResult).

// defaultOperatorWait bounds the wait for serve to apply an action.
const defaultOperatorWait = 30 * time.Second

// operatorPoll is how often the outcome record is read while waiting.
const operatorPoll = 50 * time.Millisecond

// operatorFlagsHelp documents addOperatorFlags' flags.
const operatorFlagsHelp = `  --reason TEXT      why, recorded in the event (default: none)
  --operator NAME    who, recorded in the event (default: $USER@host)
  --wait DURATION    how long to wait for serve to apply the action
                     (default 30s; 0: publish and do not wait)
With deploy/nats/accounts.conf, act as its operator user:
  --nats-user operator --nats-inbox-prefix _INBOX_operators
  (password in $TOOLSENTRY_NATS_PASSWORD)
`

// operatorFlags say who acts, why, and how long to wait.
type operatorFlags struct {
	reason   string
	operator string
	wait     time.Duration
}

func addOperatorFlags(fs *flag.FlagSet) *operatorFlags {
	f := &operatorFlags{}
	fs.StringVar(&f.reason, "reason", "", "")
	fs.StringVar(&f.operator, "operator", "", "")
	fs.DurationVar(&f.wait, "wait", defaultOperatorWait, "")
	return f
}

// validate checks the flags' values.
func (f *operatorFlags) validate() error {
	if f.wait < 0 {
		return usageErrorf("--wait %s: want 0 or more", f.wait)
	}
	if len(f.reason) > 1024 {
		return usageErrorf("--reason: %d characters, want at most 1024", len(f.reason))
	}
	if len(f.operator) > 256 {
		return usageErrorf("--operator: %d characters, want at most 256", len(f.operator))
	}
	return nil
}

// who is --operator, else user@host of this process.
func (f *operatorFlags) who() string {
	if f.operator != "" {
		return f.operator
	}
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	if len(name) > 256 {
		name = name[:256]
	}
	return name
}

// errNotApplied is returned when serve did not apply an action in time.
var errNotApplied = errors.New("not applied yet")

// operate publishes the action p of kind, from the command source, and
// waits (up to f.wait) until the tool's lane has applied it. It prints the
// result; a refused action is an error carrying the lane's reason.
func operate(ctx context.Context, js jetstream.JetStream, names events.Names, kind events.Kind, p events.OperatorAction, f *operatorFlags, source string, sio stdio) error {
	p.Operator, p.Reason = f.who(), f.reason
	msg, err := names.NewOperatorAction(events.Meta{ID: events.NewID(), Source: source, Time: time.Now().UTC()}, kind, p)
	if err != nil {
		return fmt.Errorf("%s of %s: %w", kind, p.ToolID, err)
	}
	outcomes, err := js.KeyValue(ctx, names.OutcomesBucket())
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("opening bucket %s: %w", names.OutcomesBucket(), err)
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: msg.Subject, Header: nats.Header(msg.Header), Data: msg.Data}, jetstream.WithMsgID(msg.ID))
	if err != nil {
		return fmt.Errorf("publishing %s of %s: %w", kind, p.ToolID, publisher.NoStream(msg.Subject, err))
	}
	if f.wait == 0 || outcomes == nil {
		fmt.Fprintf(sio.out, "%s: %s published at telemetry sequence %d (event %s); not waiting for serve to apply it\n", p.ToolID, kind, ack.Sequence, msg.ID)
		return nil
	}
	res, err := waitApplied(ctx, outcomes, p.ToolID, ack.Sequence, f.wait)
	if errors.Is(err, errNotApplied) {
		return fmt.Errorf("%s: %s published at telemetry sequence %d (event %s), but no worker applied it within %s: is `toolsentry serve` running against this server? It is applied, in order, when a worker reads it (then `toolsentry baseline show %s` shows its effect; do not publish it again)",
			p.ToolID, kind, ack.Sequence, msg.ID, f.wait, p.ToolID)
	}
	if err != nil {
		return err
	}
	if res.Seq != ack.Sequence {
		fmt.Fprintf(sio.out, "%s: %s applied; a later operator action (sequence %d: %s) has been applied since\n", p.ToolID, kind, res.Seq, res.Action)
		return nil
	}
	if res.Result == core.OperatorRefused {
		return fmt.Errorf("%s (%s at telemetry sequence %d)", res.Message, kind, res.Seq)
	}
	fmt.Fprintln(sio.out, res.Message)
	fmt.Fprintf(sio.out, "%s by %s, telemetry sequence %d", kind, res.Operator, res.Seq)
	if res.Verdict != "" {
		fmt.Fprintf(sio.out, ", verdict %s", res.Verdict)
	}
	fmt.Fprintln(sio.out)
	return nil
}

// waitApplied polls the tool's outcome record until the lane has applied
// the operator action at seq, every write of it stored (Done), or a later
// one, and returns the result.
func waitApplied(ctx context.Context, outcomes jetstream.KeyValue, tool string, seq uint64, wait time.Duration) (core.OperatorResult, error) {
	key, err := core.Key(tool)
	if err != nil {
		return core.OperatorResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(operatorPoll)
	defer t.Stop()
	for {
		e, err := outcomes.Get(ctx, key)
		switch {
		case err == nil:
			var o core.OutcomeRecord
			if err := json.Unmarshal(e.Value(), &o); err != nil {
				return core.OperatorResult{}, fmt.Errorf("%s: key %s: not an outcome record: %w", outcomes.Bucket(), key, err)
			}
			if o.Operator != nil && (o.Operator.Seq > seq || o.Operator.Seq == seq && o.Operator.Done) {
				return *o.Operator, nil
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case ctx.Err() != nil:
		default:
			return core.OperatorResult{}, fmt.Errorf("reading %s/%s: %w", outcomes.Bucket(), key, err)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return core.OperatorResult{}, errNotApplied
			}
			return core.OperatorResult{}, ctx.Err()
		case <-t.C:
		}
	}
}
