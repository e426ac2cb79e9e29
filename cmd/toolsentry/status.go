package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
)

func init() {
	register(&command{
		name:    "status",
		summary: "show the workers' progress: partitions, owners, checkpoints and lag",
		usage:   statusUsage,
		run:     runStatus,
	})
}

const statusUsage = `Usage: toolsentry status [--json] [flags]

Shows how far the workers are behind, read from NATS without changing
anything:

  the stream         stored telemetry events and the last sequence
  the workers        the live workers, and the stream's partition count
  per lane           the tool partitions 0..N-1, the composition lane and
                     the directives lane: the worker that holds its lease
                     (none: free; a live worker takes it within --lease-ttl),
                     the lease's epoch (how many holders it had), the
                     checkpoint (the lowest sequence not yet applied: where
                     the lane resumes after a restart or a takeover), and its
                     lag: the lane's events at or after the checkpoint

The lag is toolsentry_lag_events{partition} of serve's /metrics (there, the
holder's own count, renewed every second). Durable consumers left by workers
from before lanes (per-message acks) are listed as stale: nothing reads them;
remove them with nats consumer rm.

Flags (they may come before or after the others):
  --json        one JSON object: stream, messages, last_seq, partitions,
                members, lag, lanes (lane, owner, epoch, checkpoint, lag),
                stale

` + connFlagsHelp + `
Exit status: 0; 1 when NATS cannot be reached or the stream does not exist.

Examples:
  toolsentry status
  toolsentry status --nats-url nats://n1:4222,nats://n2:4222 --json | jq .lag
`

type statusReport struct {
	Stream     string       `json:"stream"`
	Messages   uint64       `json:"messages"`
	LastSeq    uint64       `json:"last_seq"`
	Partitions int          `json:"partitions"`
	Members    []string     `json:"members"`
	Lag        uint64       `json:"lag"`
	Lanes      []laneStatus `json:"lanes"`
	Stale      []string     `json:"stale"`
}

type laneStatus struct {
	Lane       string `json:"lane"`
	Owner      string `json:"owner"`
	Epoch      uint64 `json:"epoch"`
	Checkpoint uint64 `json:"checkpoint"`
	Lag        uint64 `json:"lag"`
}

func newStatusReport(st *consumer.Status) statusReport {
	r := statusReport{
		Stream: st.Stream, Messages: st.Messages, LastSeq: st.LastSeq, Partitions: st.Partitions,
		Members: st.Members, Lag: st.TotalLag(), Stale: st.Stale,
		Lanes: make([]laneStatus, 0, len(st.Lanes)),
	}
	if r.Members == nil {
		r.Members = []string{}
	}
	if r.Stale == nil {
		r.Stale = []string{}
	}
	for _, l := range st.Lanes {
		r.Lanes = append(r.Lanes, laneStatus{Lane: l.Lane, Owner: l.Owner, Epoch: l.Epoch, Checkpoint: l.Checkpoint, Lag: l.Lag})
	}
	return r
}

func runStatus(ctx context.Context, args []string, sio stdio) error {
	fset := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fset.Bool("json", false, "")
	conn := addConnFlags(fset)
	rest, err := parseInterleaved(fset, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("status takes no arguments, got %q", rest)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	nc, js, err := conn.connect(ctx, "toolsentry status")
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := consumer.ReadStatus(ctx, js, consumer.Config{Prefix: conn.prefix})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return conn.notProvisioned(err, "stream "+names.TelemetryStream())
		}
		return fmt.Errorf("reading the status on %s: %w", conn.displayURL(), err)
	}
	r := newStatusReport(st)
	if *asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = sio.out.Write(append(b, '\n'))
		return err
	}
	return printStatus(sio.out, r)
}

func printStatus(w io.Writer, r statusReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %s: %d events, last sequence %d\n", r.Stream, r.Messages, r.LastSeq)
	workers := "none alive"
	if len(r.Members) > 0 {
		workers = strings.Join(r.Members, ", ")
	}
	fmt.Fprintf(&b, "partitions: %d, workers: %s\n\n", r.Partitions, workers)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tOWNER\tEPOCH\tCHECKPOINT\tLAG")
	for _, l := range r.Lanes {
		owner := l.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", l.Lane, owner, l.Epoch, l.Checkpoint, l.Lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nlag: %d events\n", r.Lag)
	if len(r.Stale) > 0 {
		fmt.Fprintf(&b, "stale consumers (left by workers before lanes; nothing reads them): %s\n", strings.Join(r.Stale, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
