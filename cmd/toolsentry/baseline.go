package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer/core"
	"github.com/toolsentry/toolsentry/events"
)

func init() {
	register(&command{
		name:    "baseline",
		summary: "list, show, accept or reset the tools' baseline schemas",
		usage:   baselineUsage,
		run:     runBaseline,
	})
}

const baselineUsage = `Usage: toolsentry baseline list [--json]
       toolsentry baseline show TOOL
       toolsentry baseline accept TOOL [--fingerprint FP] [--reason TEXT]
       toolsentry baseline reset TOOL --yes [--reason TEXT]

Operates on the baselines that ` + "`toolsentry serve`" + ` keeps per tool (KV bucket
toolsentry-baselines): the schema version agents are judged against. When a
tool's schema drifts on fields an agent uses, serve holds the baseline (a
DRIFT_ON_USED_FIELDS verdict) until an operator accepts the new version.

  list     one line per tool: its baseline and current fingerprints
           (shortened), whether drift is held for acceptance, the current
           version and the stream sequence of the last observation applied
  show     the tool's record as indented JSON: baseline, current and recent
           versions with their MCP Tool objects; "seen" counts the
           observations of the current version (repeats publish no
           verdict), "last_seen" is the time of the last one
  accept   make the current version the baseline and release the hold
  reset    forget the baseline: the tool's next observation becomes its new
           baseline (verdict NO_BASELINE) and any held drift is forgotten

accept and reset do not write the bucket: they publish an operator event
(io.toolsentry.operator.baseline.accepted.v1 / ...reset.v1) on the tool's
telemetry subject, recording who (--operator), why (--reason) and what was
seen (the fingerprint), and wait until serve's lane for the tool has applied
it, in stream order with the tool's observations and calls. So replay
re-derives what follows, and the tool's verdict chain has one writer.
accept names the current version it read (or --fingerprint): if the tool has
moved on to another version meanwhile, serve refuses the accept (exit 1):
look again and re-run. An applied accept publishes a SCHEMA_MATCH verdict for
the tool; the agents' directives (toolsentry guard) about the accepted version
are then marked accepted and no longer held; their migration stays in force,
since the agents still send the old fields (` + "`toolsentry agent migrated`" + `
clears it). A tool with nothing held is left as it is (exit 0).

Exit status: 0 on success; 1 when the tool has no baseline ("no baseline for
tool X"), serve refused the action (its reason is printed) or did not apply
it within --wait, the bucket does not exist (serve never ran with this
prefix) or NATS cannot be reached; 2 on a usage error.

Flags (they may come before or after the arguments):
  --json             list: print a JSON array of {"tool_id",
                     "baseline_fingerprint", "current_fingerprint", "held",
                     "version", "last_seq", "revision"} (default: false)
  --fingerprint FP   accept: accept only if the current version has this
                     fingerprint, as shown by list or show (default: the
                     current version as read now)
  --yes              reset: confirm the deletion (required)
accept and reset:
` + operatorFlagsHelp + `
` + connFlagsHelp + `
Examples:
  toolsentry baseline list
  toolsentry baseline accept crm.lookup --reason "CRM v2 rollout"
  toolsentry baseline reset crm.lookup --yes
`

// errNoBaseline is returned for a tool without a baseline record.
var errNoBaseline = errors.New("no baseline for tool")

func runBaseline(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	fingerprint := fs.String("fingerprint", "", "")
	yes := fs.Bool("yes", false, "")
	op := addOperatorFlags(fs)
	conn := addConnFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("baseline needs a subcommand: list, show, accept or reset")
	}
	sub, pos := pos[0], pos[1:]
	switch sub {
	case "list":
		if len(pos) != 0 {
			return usageErrorf("baseline list takes no arguments, got %q", pos)
		}
	case "show", "accept", "reset":
		if len(pos) != 1 {
			return usageErrorf("baseline %s needs one TOOL, got %d", sub, len(pos))
		}
	default:
		return usageErrorf("unknown baseline subcommand %q: want list, show, accept or reset", sub)
	}
	switch {
	case *asJSON && sub != "list":
		return usageErrorf("--json goes with baseline list")
	case *fingerprint != "" && sub != "accept":
		return usageErrorf("--fingerprint goes with baseline accept")
	case *yes && sub != "reset":
		return usageErrorf("--yes goes with baseline reset")
	case sub == "reset" && !*yes:
		return usageErrorf("baseline reset forgets the baseline of %s: its next observation becomes the new baseline (NO_BASELINE) and held drift is dropped; add --yes to do it", pos[0])
	case flagSet(fs, "reason", "operator", "wait") && sub != "accept" && sub != "reset":
		return usageErrorf("--reason, --operator and --wait go with baseline accept and reset")
	}
	if err := op.validate(); err != nil {
		return err
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	nc, js, err := conn.connect(ctx, "toolsentry baseline")
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, names.BaselinesBucket())
	if err != nil {
		return conn.notProvisioned(err, "bucket "+names.BaselinesBucket())
	}
	switch sub {
	case "list":
		// The last observation applied is in the outcome record when the
		// observation left the baseline record as it was (a match); a
		// bucket from before there was one is no error.
		outcomes, err := js.KeyValue(ctx, names.OutcomesBucket())
		if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("reading bucket %s: %w", names.OutcomesBucket(), err)
		}
		return listBaselines(ctx, kv, outcomes, *asJSON, sio)
	case "show":
		return showBaseline(ctx, kv, pos[0], sio.out)
	case "accept":
		_, rec, err := getBaseline(ctx, kv, pos[0])
		if err != nil {
			return err
		}
		want := *fingerprint
		if want == "" {
			want = rec.Current.Fingerprint // what the operator sees now
		}
		return operate(ctx, js, names, events.KindBaselineAccepted, events.OperatorAction{ToolID: pos[0], Fingerprint: want}, op, "toolsentry/baseline", sio)
	default:
		_, rec, err := getBaseline(ctx, kv, pos[0])
		if err != nil {
			return err
		}
		return operate(ctx, js, names, events.KindBaselineReset, events.OperatorAction{ToolID: pos[0], Fingerprint: rec.Baseline.Fingerprint}, op, "toolsentry/baseline", sio)
	}
}

// flagSet reports whether any of the named flags was given.
func flagSet(fs *flag.FlagSet, names ...string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			set = set || f.Name == n
		}
	})
	return set
}

// baselineSummary is one line of list.
type baselineSummary struct {
	ToolID              string `json:"tool_id"`
	BaselineFingerprint string `json:"baseline_fingerprint"`
	CurrentFingerprint  string `json:"current_fingerprint"`
	Held                bool   `json:"held"`
	Version             string `json:"version"`
	LastSeq             uint64 `json:"last_seq"`
	Revision            uint64 `json:"revision"`
}

// listBaselines lists the records of kv; LAST SEQ is the later of the
// record's and the tool's outcome record's (outcomes may be nil).
func listBaselines(ctx context.Context, kv, outcomes jetstream.KeyValue, asJSON bool, sio stdio) error {
	rows := []baselineSummary{}
	bad := 0
	err := eachValue(ctx, kv, func(e jetstream.KeyValueEntry) {
		var rec core.BaselineRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			fmt.Fprintf(sio.err, "%s: key %s: not a baseline record: %v\n", kv.Bucket(), e.Key(), err)
			bad++
			return
		}
		rows = append(rows, baselineSummary{
			ToolID:              rec.ToolID,
			BaselineFingerprint: rec.Baseline.Fingerprint,
			CurrentFingerprint:  rec.Current.Fingerprint,
			Held:                rec.Held,
			Version:             rec.Current.Version,
			LastSeq:             rec.LastSeq,
			Revision:            e.Revision(),
		})
	})
	if err != nil {
		return err
	}
	if outcomes != nil && len(rows) > 0 {
		observed := map[string]uint64{}
		err := eachValue(ctx, outcomes, func(e jetstream.KeyValueEntry) {
			var o core.OutcomeRecord
			if json.Unmarshal(e.Value(), &o) == nil {
				observed[o.ToolID] = o.ObservedSeq
			}
		})
		if err != nil {
			return err
		}
		for i := range rows {
			rows[i].LastSeq = max(rows[i].LastSeq, observed[rows[i].ToolID])
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ToolID < rows[j].ToolID })
	if asJSON {
		enc := json.NewEncoder(sio.out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else if err := writeBaselineTable(sio.out, rows); err != nil {
		return err
	}
	if bad > 0 {
		return errExit(1)
	}
	return nil
}

// eachValue calls f with every current value of kv.
func eachValue(ctx context.Context, kv jetstream.KeyValue, f func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("reading bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil { // nil: every current value delivered
				return nil
			}
			f(e)
		}
	}
}

func writeBaselineTable(w io.Writer, rows []baselineSummary) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no baselines yet: serve records one per tool at its first schema observation")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tBASELINE\tCURRENT\tHELD\tVERSION\tLAST SEQ")
	for _, r := range rows {
		cur := shortFingerprint(r.CurrentFingerprint)
		if r.CurrentFingerprint == r.BaselineFingerprint {
			cur = "(same)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.ToolID, shortFingerprint(r.BaselineFingerprint), cur,
			yesNo(r.Held, "held", "-"), orDash(r.Version), r.LastSeq)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortFingerprint keeps the algorithm and 12 hex digits.
func shortFingerprint(fp string) string {
	if fp == "" {
		return "-"
	}
	alg, hex, ok := strings.Cut(fp, ":")
	if !ok {
		alg, hex = "", fp
	} else {
		alg += ":"
	}
	if len(hex) <= 12 {
		return fp
	}
	return alg + hex[:12] + "…"
}

// getBaseline reads a tool's record and its entry.
func getBaseline(ctx context.Context, kv jetstream.KeyValue, tool string) (jetstream.KeyValueEntry, core.BaselineRecord, error) {
	key, err := core.Key(tool)
	if err != nil {
		return nil, core.BaselineRecord{}, usageErrorf("tool %q: %v", tool, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, core.BaselineRecord{}, fmt.Errorf("%w %s", errNoBaseline, tool)
	}
	if err != nil {
		return nil, core.BaselineRecord{}, fmt.Errorf("reading the baseline of %s: %w", tool, err)
	}
	var rec core.BaselineRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, core.BaselineRecord{}, fmt.Errorf("%s: key %s: not a baseline record: %w", kv.Bucket(), key, err)
	}
	return e, rec, nil
}

func showBaseline(ctx context.Context, kv jetstream.KeyValue, tool string, out io.Writer) error {
	e, _, err := getBaseline(ctx, kv, tool)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, e.Value(), "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err = out.Write(b.Bytes())
	return err
}
