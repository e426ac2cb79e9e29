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

Shows how far the workers are behind the telemetry stream, read from NATS
without changing anything:

  the stream         stored events and the last sequence
  the workers        the live members of a partitioned deployment (none for
                     a single worker); the partition count
  per partition      its durable consumer, the worker that owns it, its
                     checkpoint (the stream sequence up to which every event
                     is finished: where it resumes after a restart), the last
                     sequence delivered, and its lag: events stored and not
                     yet finished (not delivered, plus delivered and not yet
                     acknowledged)

The lag is toolsentry_lag_events{partition} of serve's /metrics. Consumers of
another partition count, left by a change of --partitions, are listed as
stale: no worker reads them.

Flags (they may come before or after the others):
  --json        one JSON object: stream, messages, last_seq, partitions,
                members, lag, partition_status (partition, consumer, owner,
                checkpoint, delivered, pending, ack_pending, lag), stale

` + connFlagsHelp + `
Exit status: 0; 1 when NATS cannot be reached or the stream does not exist.

Examples:
  toolsentry status
  toolsentry status --nats-url nats://n1:4222,nats://n2:4222 --json | jq .lag
`

// statusReport is status --json's object.
type statusReport struct {
	Stream     string            `json:"stream"`
	Messages   uint64            `json:"messages"`
	LastSeq    uint64            `json:"last_seq"`
	Partitions int               `json:"partitions"`
	Members    []string          `json:"members"`
	Lag        uint64            `json:"lag"`
	Partition  []partitionStatus `json:"partition_status"`
	Stale      []string          `json:"stale"`
}

type partitionStatus struct {
	Partition  int    `json:"partition"`
	Consumer   string `json:"consumer"`
	Owner      string `json:"owner"`
	Checkpoint uint64 `json:"checkpoint"`
	Delivered  uint64 `json:"delivered"`
	Pending    uint64 `json:"pending"`
	AckPending uint64 `json:"ack_pending"`
	Lag        uint64 `json:"lag"`
}

func newStatusReport(st *consumer.Status) statusReport {
	r := statusReport{
		Stream: st.Stream, Messages: st.Messages, LastSeq: st.LastSeq, Partitions: st.Partitions,
		Members: st.Members, Lag: st.TotalLag(), Stale: st.Stale,
		Partition: make([]partitionStatus, 0, len(st.Lag)),
	}
	if r.Members == nil {
		r.Members = []string{}
	}
	if r.Stale == nil {
		r.Stale = []string{}
	}
	for _, p := range st.Lag {
		r.Partition = append(r.Partition, partitionStatus{
			Partition: p.Partition, Consumer: p.Consumer, Owner: p.Owner, Checkpoint: p.AckFloor,
			Delivered: p.Delivered, Pending: p.Pending, AckPending: p.AckPending, Lag: p.Lag(),
		})
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
	switch {
	case r.Partitions <= 1:
		fmt.Fprintf(&b, "partitions: 1 (a single worker)\n")
	case len(r.Members) == 0:
		fmt.Fprintf(&b, "partitions: %d, workers: none alive\n", r.Partitions)
	default:
		fmt.Fprintf(&b, "partitions: %d, workers: %s\n", r.Partitions, strings.Join(r.Members, ", "))
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOWNER\tCONSUMER\tCHECKPOINT\tDELIVERED\tPENDING\tACK PENDING\tLAG")
	for _, p := range r.Partition {
		owner := p.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Partition, owner, p.Consumer, p.Checkpoint, p.Delivered, p.Pending, p.AckPending, p.Lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nlag: %d events\n", r.Lag)
	if len(r.Stale) > 0 {
		fmt.Fprintf(&b, "stale consumers (another partition count; no worker reads them): %s\n", strings.Join(r.Stale, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
