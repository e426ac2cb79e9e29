package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/guards"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "re-derive every verdict from the telemetry and compare it with the recorded verdicts (audit)",
		usage:   replayUsage,
		run:     runReplay,
	})
}

// Exit statuses of replay beyond 0 (every verdict matched) and 2 (usage).
const (
	// replayExitDifferences: verdicts mismatched, missing or extra, or
	// the dead-letter stream disagrees: the record is not what the guards
	// derive under the configuration it was recorded with.
	replayExitDifferences = 1
	// replayExitPolicy: the only differences are explained by a policy
	// change (another guard version, or --workflow).
	replayExitPolicy = 3
)

var replayUsage = `Usage: toolsentry replay [--since TIME | --from-seq N] [--until TIME] [--tool ID]
                         [--composition ID] [--workflow FILE] [--json] [flags]

Audits the verdicts: reads the telemetry stream (TOOLSENTRY_TELEMETRY) with an
ordered consumer, re-runs the guards offline on every input in stream order,
and compares each re-derived verdict with the one recorded in
TOOLSENTRY_VERDICTS for the same input (event id and stream sequence) and key
(guard, tool or composition, agent), as canonical CloudEvents: manifest
digest, directive, every member. It publishes nothing and writes no state;
it only reads the streams and the workers' consumer position.

State is always rebuilt from the first input of the stream, in memory (no
snapshot is trusted); --since, --until, --from-seq, --tool and --composition
only choose what is compared and reported, so a window reports exactly what
the full replay reports on that window. If the telemetry stream no longer
starts at sequence 1 (inputs aged out past --telemetry-max-age of serve, or
were purged), the history is truncated: replay refuses unless
--allow-truncated, and then differences may stem from the missing history.
If the verdict stream lost its oldest verdicts (they age out after 30 days),
only inputs stored after its first verdict are compared, and the report
says so. Inputs serve has not acknowledged yet are replayed into state but
not compared (counted as not yet handled).

Operator actions (toolsentry baseline accept and reset, toolsentry agent
migrated and forget) are operator events in the telemetry: they are
replayed in stream order like any input, so the verdicts after them match.

The report counts inputs replayed, compared, rejected (bad input, which must
be in TOOLSENTRY_DLQ) and not yet handled, and verdicts:
  matched         recorded and re-derived are the same
  mismatched      they differ (both verdicts are shown); also a second,
                  different record of a verdict
  missing         re-derived, but not in the verdict stream (deleted)
  extra           in the verdict stream, but not re-derived (forged)
  policy changed  a difference whose record was made by another guard
                  version (each verdict records its guard_version): the
                  policy changed; not a sign of tampering
and, with --workflow, what-if changes: verdicts that the replaced workflow
changes, adds or removes, against a replay under the recorded one in the
same pass (tampering is still checked under the recorded one). A deleted
input inside the window, a bad input missing from the dead-letter stream,
and a dead-lettered input that applies cleanly are differences too.

A progress line is shown on standard error when it is a terminal.

Exit status: 0 when every verdict matches; 1 on any mismatched, missing or
extra verdict or other difference (the record is not what the guards derive:
tampering, lost verdicts or a fault), and on errors (NATS unreachable,
truncated history refused); 3 when the only differences are policy changes
(another guard version, or --workflow); 2 on a usage error.

Flags (each also read from the environment variable shown):
  --since WHEN        compare inputs stored since WHEN: a duration back from
                      now (90s, 24h) or an RFC 3339 time (2026-10-03T00:00:00Z)
                      (TOOLSENTRY_REPLAY_SINCE, default: from the first input)
  --until WHEN        compare inputs stored until WHEN, same forms
                      (TOOLSENTRY_REPLAY_UNTIL, default: to the last input)
  --from-seq N        compare inputs from stream sequence N on; excludes --since
                      (TOOLSENTRY_REPLAY_FROM_SEQ, default 0: from the first)
  --tool ID           compare the schema verdicts of this tool only; repeat or
                      separate with commas (TOOLSENTRY_REPLAY_TOOL, default: all)
  --composition ID    compare the composition verdicts of this composition only;
                      repeat or separate with commas; with --tool, both are
                      compared (TOOLSENTRY_REPLAY_COMPOSITION, default: all)
  --workflow FILE     what-if: replay a second time with FILE (a workflow JSON
                      object, as declared in a workflow.declared event) in place
                      of every declaration of its composition_id, and report the
                      verdicts it changes; repeat for several compositions
                      (TOOLSENTRY_REPLAY_WORKFLOW, default: none)
  --allow-truncated   replay a truncated history anyway
                      (TOOLSENTRY_REPLAY_ALLOW_TRUNCATED, default false)
  --max-differences N list at most N differences; counts stay exact
                      (TOOLSENTRY_REPLAY_MAX_DIFFERENCES, default 1000)
  --json              print the report as one JSON object
                      (TOOLSENTRY_REPLAY_JSON, default false)

` + connFlagsHelp + `
Examples:
  toolsentry replay
  toolsentry replay --since 2026-10-03T00:00:00Z --until 2026-10-04T00:00:00Z --composition etl
  toolsentry replay --from-seq 1200 --tool crm.lookup --json
  toolsentry replay --workflow stricter-etl.json
`

func runReplay(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	since := fs.String("since", "", "")
	bindEnv(fs, "since", "TOOLSENTRY_REPLAY_SINCE")
	until := fs.String("until", "", "")
	bindEnv(fs, "until", "TOOLSENTRY_REPLAY_UNTIL")
	fromSeq := fs.Uint64("from-seq", 0, "")
	bindEnv(fs, "from-seq", "TOOLSENTRY_REPLAY_FROM_SEQ")
	var tools, comps, workflows listFlag
	fs.Var(&tools, "tool", "")
	bindEnv(fs, "tool", "TOOLSENTRY_REPLAY_TOOL")
	fs.Var(&comps, "composition", "")
	bindEnv(fs, "composition", "TOOLSENTRY_REPLAY_COMPOSITION")
	fs.Var(&workflows, "workflow", "")
	bindEnv(fs, "workflow", "TOOLSENTRY_REPLAY_WORKFLOW")
	allowTruncated := fs.Bool("allow-truncated", false, "")
	bindEnv(fs, "allow-truncated", "TOOLSENTRY_REPLAY_ALLOW_TRUNCATED")
	maxDiffs := fs.Int("max-differences", consumer.DefaultReplayMaxDifferences, "")
	bindEnv(fs, "max-differences", "TOOLSENTRY_REPLAY_MAX_DIFFERENCES")
	asJSON := fs.Bool("json", false, "")
	bindEnv(fs, "json", "TOOLSENTRY_REPLAY_JSON")
	conn := addConnFlags(fs)
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("replay takes no arguments, got %q", rest)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	opts := consumer.ReplayOptions{
		Prefix:         names.Prefix(),
		FromSeq:        *fromSeq,
		Tools:          []string(tools),
		Compositions:   []string(comps),
		AllowTruncated: *allowTruncated,
		MaxDifferences: *maxDiffs,
	}
	now := time.Now()
	switch {
	case *since != "" && *fromSeq > 0:
		return usageErrorf("--since and --from-seq exclude each other")
	case *maxDiffs < 0:
		return usageErrorf("--max-differences %d: want 0 or more", *maxDiffs)
	case *maxDiffs == 0:
		opts.MaxDifferences = -1 // list none
	}
	if *since != "" {
		if opts.Since, err = parseSince(*since, now); err != nil {
			return err
		}
	}
	if *until != "" {
		if opts.Until, err = parseSince(*until, now); err != nil {
			return usageErrorf("--until %q: want a duration (90s, 1h) or an RFC 3339 time (2025-06-01T12:00:00Z)", *until)
		}
	}
	if !opts.Since.IsZero() && !opts.Until.IsZero() && opts.Until.Before(opts.Since) {
		return usageErrorf("--until %s is before --since %s", *until, *since)
	}
	if len(workflows) > 0 {
		opts.WhatIf.Workflows = map[string][]byte{}
		for _, path := range workflows {
			id, raw, err := readWhatIfWorkflow(path)
			if err != nil {
				return err
			}
			if _, dup := opts.WhatIf.Workflows[id]; dup {
				return usageErrorf("--workflow: two files replace composition %q", id)
			}
			opts.WhatIf.Workflows[id] = raw
		}
	}

	nc, js, err := conn.connect(ctx, "toolsentry replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	progress := newBenchProgress(sio.err)
	var applied atomic.Int64
	var startOnce sync.Once
	stop := func() {}
	opts.Progress = func(seq, last uint64) {
		startOnce.Do(func() {
			stop = progress.track("replaying", int(max(last, 1)), applied.Load)
		})
		applied.Store(int64(seq))
	}
	rep, err := consumer.Replay(ctx, js, opts)
	stop()
	switch {
	case errors.Is(err, consumer.ErrTruncatedHistory):
		return fmt.Errorf("%w; run with --allow-truncated to replay what is left", err)
	case errors.Is(err, consumer.ErrInvalidConfig):
		return usageErrorf("%s", strings.TrimPrefix(err.Error(), consumer.ErrInvalidConfig.Error()+": "))
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return conn.notProvisioned(err, "the toolsentry streams")
	case err != nil:
		return err
	}
	status := replayStatus(rep)
	if *asJSON {
		out := struct {
			*consumer.ReplayReport
			Result     string `json:"result"`
			ExitStatus int    `json:"exit_status"`
		}{rep, replayResult(status), status}
		enc := json.NewEncoder(sio.out)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		writeReplayReport(sio.out, rep, status)
	}
	if status != 0 {
		return errExit(status)
	}
	return nil
}

// readWhatIfWorkflow reads a --workflow file and returns its composition id.
func readWhatIfWorkflow(path string) (string, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", nil, usageErrorf("--workflow: %v", err)
	}
	var w struct {
		CompositionID string `json:"composition_id"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return "", nil, usageErrorf("--workflow %s: not a JSON workflow object: %v", path, err)
	}
	if w.CompositionID == "" {
		return "", nil, usageErrorf("--workflow %s: no composition_id", path)
	}
	return w.CompositionID, raw, nil
}

func replayStatus(rep *consumer.ReplayReport) int {
	switch {
	case rep.Tampered() > 0:
		return replayExitDifferences
	case rep.PolicyChanges() > 0:
		return replayExitPolicy
	}
	return 0
}

func replayResult(status int) string {
	switch status {
	case replayExitDifferences:
		return "differences"
	case replayExitPolicy:
		return "policy_changed"
	}
	return "match"
}

func writeReplayReport(w io.Writer, rep *consumer.ReplayReport, status int) {
	fmt.Fprintf(w, "toolsentry replay: %s sequences %d-%d under guard %s, state rebuilt from sequence %d\n",
		rep.Stream, rep.FirstSeq, rep.LastSeq, rep.GuardVersion, rep.FirstSeq)
	if rep.Truncated {
		fmt.Fprintf(w, "  WARNING: truncated history: the telemetry starts at sequence %d, so differences may stem from the missing history\n", rep.FirstSeq)
	}
	if rep.VerdictsTruncated {
		fmt.Fprintf(w, "  note: the verdict stream's oldest verdicts are gone (aged out or removed): only inputs stored after its first verdict (%s) are compared\n",
			rep.VerdictsFirstTime.Format(time.RFC3339Nano))
	}
	win := "nothing"
	if rep.Window.ToSeq >= rep.Window.FromSeq && rep.Window.ToSeq > 0 {
		win = fmt.Sprintf("sequences %d-%d", rep.Window.FromSeq, rep.Window.ToSeq)
	}
	if rep.Window.Since != nil {
		win += ", stored since " + rep.Window.Since.Format(time.RFC3339)
	}
	if rep.Window.Until != nil {
		win += ", stored until " + rep.Window.Until.Format(time.RFC3339)
	}
	fmt.Fprintf(w, "  compared: %s\n", win)
	dlq := "the dead-letter stream was not checked"
	if rep.DeadLettersChecked {
		dlq = fmt.Sprintf("%d of them in the dead-letter stream", rep.DeadLettersConfirmed)
	}
	fmt.Fprintf(w, "  inputs:   %d replayed, %d compared, %d rejected as bad input (%s), %d not yet handled by serve\n",
		rep.InputsReplayed, rep.InputsCompared, rep.InputsRejected, dlq, rep.InputsUnhandled)
	fmt.Fprintf(w, "  verdicts: %d recorded, %d re-derived: %d matched, %d mismatched, %d missing, %d extra, %d policy changed\n",
		rep.VerdictsRecorded, rep.VerdictsRederived, rep.Matched, rep.Mismatched, rep.Missing, rep.Extra, rep.PolicyChanged)
	if rep.Duplicates > 0 {
		fmt.Fprintf(w, "  duplicates: %d verdicts stored twice, identically (a redelivery after the duplicate window; harmless)\n", rep.Duplicates)
	}
	if rep.Other > 0 {
		fmt.Fprintf(w, "  other differences: %d (dead letters, deleted inputs, undecodable verdicts)\n", rep.Other)
	}
	if wi := rep.WhatIf; wi != nil {
		fmt.Fprintf(w, "  what-if (--workflow %s): %d verdicts changed, %d added, %d removed\n",
			strings.Join(wi.Workflows, ", "), wi.Changed, wi.Added, wi.Removed)
		if len(wi.Undeclared) > 0 {
			fmt.Fprintf(w, "  what-if: never declared in the history, so unchanged: %s\n", strings.Join(wi.Undeclared, ", "))
		}
	}
	for _, d := range rep.Differences {
		fmt.Fprintln(w)
		head := strings.ToUpper(strings.ReplaceAll(string(d.Kind), "_", " "))
		if d.Change != "" {
			head += " (" + d.Change + ")"
		}
		if d.InputSequence > 0 {
			head += fmt.Sprintf("  input %d", d.InputSequence)
			if d.InputEventID != "" {
				head += " (" + d.InputEventID + ")"
			}
		}
		if d.Guard != "" {
			head += "  " + d.Guard + " " + d.Key
		}
		if d.AgentID != "" {
			head += "  agent " + d.AgentID
		}
		if d.VerdictSequence > 0 {
			head += fmt.Sprintf("  verdict sequence %d", d.VerdictSequence)
		}
		fmt.Fprintln(w, head)
		fmt.Fprintf(w, "  %s\n", d.Reason)
		for _, p := range []struct {
			name string
			v    json.RawMessage
		}{{"recorded:  ", d.Recorded}, {"re-derived:", d.Rederived}, {"what-if:   ", d.WhatIf}} {
			if p.v != nil {
				fmt.Fprintf(w, "  %s %s\n", p.name, p.v)
			}
		}
	}
	if rep.DifferencesOmitted > 0 {
		fmt.Fprintf(w, "\n(%d more differences not listed; see --max-differences)\n", rep.DifferencesOmitted)
	}
	fmt.Fprintln(w)
	switch status {
	case 0:
		fmt.Fprintf(w, "RESULT: every verdict matches (guard %s)\n", guards.Version)
	case replayExitPolicy:
		fmt.Fprintf(w, "RESULT: %d differences, all explained by a policy change (exit %d)\n", rep.PolicyChanges(), status)
	default:
		fmt.Fprintf(w, "RESULT: %d differences the recorded configuration does not explain: tampering, lost verdicts or a fault (exit %d)\n", rep.Tampered(), status)
	}
}
