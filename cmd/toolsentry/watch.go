package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func init() {
	register(&command{
		name:    "watch",
		summary: "follow verdicts as they are published, filtered by guard, verdict, key or agent",
		usage:   watchUsage,
		run:     runWatch,
	})
}

var (
	schemaVerdictNames = []string{
		string(guards.NoBaseline), string(guards.SchemaMatch),
		string(guards.DriftOnUnusedFields), string(guards.DriftOnUsedFields),
	}
	compositionVerdictNames = []string{
		string(guards.SingleTool), string(guards.CompositionMeetsQuality),
		string(guards.CompositionDegraded), string(guards.SemanticIncompatible),
	}
)

var watchUsage = `Usage: toolsentry watch [flags]

Follows the verdict stream (TOOLSENTRY_VERDICTS) and prints each verdict as
it arrives, one line per verdict, until interrupted (exit status 0). By
default only verdicts published from now on; --since or --all replay
earlier ones first. Filters on guard, verdict and key are subject filters
on the server (toolsentry.verdicts.<guard>.<verdict>.<key>); --agent is
applied here.

A line reads, in aligned columns: the time of the input the verdict judged
(UTC), the action it tells agents to take (PROCEED, MIGRATE or HALT), the
guard, the verdict, the tool or composition, and a one-line summary in
words ("triage-bot must send perPage instead of per_page; migration
available"); then the seeds' directive text, and for schema verdicts the
affected fields and the migration steps, for composition verdicts the
composed quality with its bounds and confidence when known. A verdict
written before verdicts carried an action and a summary gets them derived
the same way. On a terminal the action is coloured (green, yellow, red),
unless NO_COLOR is set. A message on the stream that is not a valid verdict
is reported on standard error and skipped.

Flags:
  --guard NAME      schema or composition (default: both)
  --verdict NAME    one verdict, any case (default: all): schema verdicts
                    ` + strings.Join(schemaVerdictNames, ", ") + `;
                    composition verdicts
                    ` + strings.Join(compositionVerdictNames, ", ") + `
  --key ID          one tool or composition id (default: all)
  --agent ID        schema verdicts about one agent only; implies
                    --guard schema (default: all)
  --since WHEN      start with verdicts published since WHEN: a duration
                    back from now (90s, 1h) or an RFC 3339 time
                    (2025-06-01T12:00:00Z) (default: new verdicts only)
  --all             start with the first verdict the stream holds (default: false)
  --json            print each verdict's CloudEvent as one line of JSON
                    instead (default: false)
  --count N         stop after N verdicts, exit 0 (default 0: no limit)
  --timeout D       stop after D in all (a Go duration: 30s, 5m): exit 0,
                    but exit 1 if --count verdicts had not all arrived
                    (default 0: no limit)

` + connFlagsHelp + `
Examples:
  toolsentry watch --guard schema --verdict drift_on_used_fields
  toolsentry watch --all --key crm.lookup --json
  toolsentry emit invocation.json && toolsentry watch --since 1m --count 1 --timeout 30s
`

// watchOptions are watch's parsed flags.
type watchOptions struct {
	kinds   []events.Kind
	verdict string // upper case; "" for any
	key     string
	agent   string
	deliver jetstream.DeliverPolicy
	start   time.Time
	json    bool
	count   int
	timeout time.Duration
	// color colours the lines (stdout is a terminal and NO_COLOR unset).
	color bool
	// keyWidth is the widest key printed so far: the key column grows to
	// it, so that the summaries line up.
	keyWidth int
}

func runWatch(ctx context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	guard := fs.String("guard", "", "")
	verdict := fs.String("verdict", "", "")
	key := fs.String("key", "", "")
	agent := fs.String("agent", "", "")
	since := fs.String("since", "", "")
	all := fs.Bool("all", false, "")
	asJSON := fs.Bool("json", false, "")
	count := fs.Int("count", 0, "")
	timeout := fs.Duration("timeout", 0, "")
	conn := addConnFlags(fs)
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("watch takes no arguments, got %q", rest)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	opts := watchOptions{key: *key, agent: *agent, json: *asJSON, count: *count, timeout: *timeout, verdict: strings.ToUpper(*verdict),
		color: colorTerminal(sio.out, os.Getenv("NO_COLOR"))}
	if opts.kinds, err = watchKinds(*guard, opts.verdict, opts.agent); err != nil {
		return err
	}
	switch {
	case opts.count < 0:
		return usageErrorf("--count %d: want 0 or more", opts.count)
	case opts.timeout < 0:
		return usageErrorf("--timeout %s: want 0 or more", opts.timeout)
	case *all && *since != "":
		return usageErrorf("--all and --since exclude each other")
	case *all:
		opts.deliver = jetstream.DeliverAllPolicy
	case *since != "":
		if opts.start, err = parseSince(*since, time.Now()); err != nil {
			return err
		}
		opts.deliver = jetstream.DeliverByStartTimePolicy
	default:
		opts.deliver = jetstream.DeliverNewPolicy
	}
	var filters []string
	for _, k := range opts.kinds {
		f, err := names.VerdictFilter(k, opts.verdict, opts.key)
		if err != nil {
			return usageErrorf("%v", err)
		}
		filters = append(filters, f)
	}

	nc, js, err := conn.connect(ctx, "toolsentry watch", nats.MaxReconnects(-1))
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while connecting: a clean exit
		}
		return err
	}
	defer nc.Close()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: opts.deliver}
	if opts.deliver == jetstream.DeliverByStartTimePolicy {
		cfg.OptStartTime = &opts.start
	}
	cons, err := js.OrderedConsumer(ctx, names.VerdictsStream(), cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before the first verdict: a clean exit
		}
		return conn.notProvisioned(err, "stream "+names.VerdictsStream())
	}
	return watchVerdicts(ctx, cons, names, &opts, sio)
}

// colorTerminal reports whether w is a terminal and noColor (NO_COLOR's
// value) is empty: https://no-color.org.
func colorTerminal(w io.Writer, noColor string) bool {
	f, ok := w.(*os.File)
	if !ok || noColor != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// watchKinds returns the verdict kinds to follow and checks the verdict
// name against them.
func watchKinds(guard, verdict, agent string) ([]events.Kind, error) {
	var kinds []events.Kind
	switch guard {
	case "":
		kinds = []events.Kind{events.KindSchemaVerdict, events.KindCompositionVerdict}
		if agent != "" {
			kinds = kinds[:1]
		}
	case "schema":
		kinds = []events.Kind{events.KindSchemaVerdict}
	case "composition":
		if agent != "" {
			return nil, usageErrorf("--agent: composition verdicts are not about one agent; use --guard schema")
		}
		kinds = []events.Kind{events.KindCompositionVerdict}
	default:
		return nil, usageErrorf("--guard %q: want schema or composition", guard)
	}
	if verdict == "" {
		return kinds, nil
	}
	var valid []string
	var keep []events.Kind
	for _, k := range kinds {
		vs := schemaVerdictNames
		if k == events.KindCompositionVerdict {
			vs = compositionVerdictNames
		}
		valid = append(valid, vs...)
		if slices.Contains(vs, verdict) {
			keep = append(keep, k)
		}
	}
	if len(keep) == 0 {
		return nil, usageErrorf("--verdict %q: want one of %s", verdict, strings.Join(valid, ", "))
	}
	return keep, nil
}

// parseSince reads --since: a positive duration before now, or an RFC 3339
// time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usageErrorf("--since %s: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageErrorf("--since %q: want a duration (90s, 1h) or an RFC 3339 time (2025-06-01T12:00:00Z)", s)
	}
	return t, nil
}

// watchVerdicts prints the verdicts of cons until ctx ends, --count
// verdicts were printed, or --timeout passed.
func watchVerdicts(ctx context.Context, cons jetstream.Consumer, names events.Names, opts *watchOptions, sio stdio) error {
	parent := ctx
	if opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.timeout)
		defer cancel()
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("following verdicts: %w", err)
	}
	defer it.Stop()
	printed := 0
	for opts.count == 0 || printed < opts.count {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			switch {
			case parent.Err() != nil:
				return nil // interrupted
			case ctx.Err() != nil && opts.count > 0:
				return fmt.Errorf("timed out after %s: %d of %d verdicts arrived", opts.timeout, printed, opts.count)
			case ctx.Err() != nil:
				return nil
			}
			return fmt.Errorf("following verdicts: %w", err)
		}
		ok, err := printVerdict(sio, names, opts, msg)
		if err != nil {
			return err
		}
		if ok {
			printed++
		}
	}
	return nil
}

// printVerdict prints one verdict message, if it passes --agent; it reports
// whether it did.
func printVerdict(sio stdio, names events.Names, opts *watchOptions, msg jetstream.Msg) (bool, error) {
	ev, err := names.Decode(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		seq := ""
		if md, mdErr := msg.Metadata(); mdErr == nil {
			seq = " " + strconv.FormatUint(md.Sequence.Stream, 10)
		}
		fmt.Fprintf(sio.err, "skipping message%s on %s: %v\n", seq, msg.Subject(), err)
		return false, nil
	}
	if opts.agent != "" && (ev.SchemaVerdict == nil || ev.SchemaVerdict.AgentID != opts.agent) {
		return false, nil
	}
	if opts.json {
		line, err := verdictJSON(names, ev, msg)
		if err != nil {
			return false, err
		}
		_, err = sio.out.Write(append(line, '\n'))
		return true, err
	}
	when := ev.Time
	if when.IsZero() {
		if md, err := msg.Metadata(); err == nil {
			when = md.Timestamp
		}
	}
	_, err = io.WriteString(sio.out, verdictLine(ev, when, opts)+"\n")
	return true, err
}

// verdictJSON is the message's CloudEvent as one line: the structured-mode
// body compacted, or a binary-mode message re-encoded in structured mode.
func verdictJSON(names events.Names, ev events.Event, msg jetstream.Msg) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, msg.Data()); err == nil && bytes.Contains(b.Bytes(), []byte(`"specversion"`)) && isStructured(msg.Headers()) {
		return b.Bytes(), nil
	}
	m, err := names.Encode(ev)
	if err != nil {
		return nil, fmt.Errorf("re-encoding verdict %s: %w", ev.ID, err)
	}
	return m.Data, nil
}

// isStructured reports whether a message is in structured mode: no ce-
// headers, or a cloudevents Content-Type.
func isStructured(h nats.Header) bool {
	for name, vs := range h {
		if strings.EqualFold(name, "Content-Type") {
			for _, v := range vs {
				if strings.HasPrefix(strings.ToLower(strings.TrimSpace(v)), "application/cloudevents") {
					return true
				}
			}
		}
	}
	for name := range h {
		if len(name) > 3 && strings.EqualFold(name[:3], "ce-") {
			return false
		}
	}
	return true
}

// The widths of watch's fixed columns: the actions, the guards and the
// verdicts of this version (a longer unknown verdict pushes its line).
const (
	actionWidth  = len(guards.ActionProceed)
	guardWidth   = len(events.DirectiveComposition)
	verdictWidth = len(guards.CompositionMeetsQuality)
	minKeyWidth  = 14
)

// ANSI SGR sequences of the coloured lines.
const (
	sgrReset = "\x1b[0m"
	sgrDim   = "\x1b[2m"
)

var actionColors = map[guards.Action]string{
	guards.ActionProceed: "\x1b[32m",   // green
	guards.ActionMigrate: "\x1b[1;33m", // bold yellow
	guards.ActionHalt:    "\x1b[1;31m", // bold red
}

// verdictLine is the human-readable line of a verdict: time, action,
// guard, verdict, key and summary in columns, then the directive and the
// details. The key column widens to the widest key so far (opts.keyWidth).
func verdictLine(ev events.Event, when time.Time, opts *watchOptions) string {
	var action guards.Action
	var guard, verdict, key, summary string
	var details []string
	switch {
	case ev.SchemaVerdict != nil:
		v := ev.SchemaVerdict
		guard, verdict, key = events.DirectiveSchema, string(v.Verdict), v.ToolID
		action, summary = v.Action, v.Summary
		if action == "" || summary == "" { // written before verdicts said it
			if a, s, err := v.Describe(); err == nil {
				action, summary = a, s
			}
		}
		details = append(details, "directive: "+v.Directive)
		var affected []string
		if json.Unmarshal(v.Affected, &affected) == nil && len(affected) > 0 {
			details = append(details, "affected: "+strings.Join(affected, ", "))
		}
		var plan toolschema.MigrationPlan
		if json.Unmarshal(v.Migration, &plan) == nil {
			if s := migrationSummary(plan); s != "" {
				details = append(details, "migration: "+s)
			}
		}
	case ev.CompositionVerdict != nil:
		v := ev.CompositionVerdict
		guard, verdict, key = events.DirectiveComposition, string(v.Verdict), v.CompositionID
		action, summary = v.Action, v.Summary
		if action == "" || summary == "" {
			action, summary = v.Describe()
		}
		details = append(details, "directive: "+v.Directive)
		q := "quality " + percent(v.ComposedQuality)
		if v.ComposedQualityLower != nil && v.ComposedQualityUpper != nil {
			q += " [" + percent(*v.ComposedQualityLower) + ", " + percent(*v.ComposedQualityUpper) + "]"
		}
		if v.Confidence != "" {
			q += " " + string(v.Confidence)
		}
		details = append(details, q)
	}
	if action == "" {
		action = "?"
	}
	opts.keyWidth = max(opts.keyWidth, minKeyWidth, utf8.RuneCountInString(key))
	var b strings.Builder
	b.WriteString(when.UTC().Format(time.RFC3339))
	b.WriteString("  ")
	if c, ok := actionColors[action]; ok && opts.color {
		b.WriteString(c + pad(string(action), actionWidth) + sgrReset)
	} else {
		b.WriteString(pad(string(action), actionWidth))
	}
	for _, col := range []struct {
		s string
		w int
	}{{guard, guardWidth}, {verdict, verdictWidth}, {key, opts.keyWidth}} {
		b.WriteString("  ")
		b.WriteString(pad(col.s, col.w))
	}
	b.WriteString("  ")
	b.WriteString(summary)
	if len(details) > 0 {
		rest := "  " + strings.Join(details, "  ")
		if opts.color {
			rest = sgrDim + rest + sgrReset
		}
		b.WriteString(rest)
	}
	return b.String()
}

// pad left-aligns s in a column of w characters.
func pad(s string, w int) string {
	if n := utf8.RuneCountInString(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

func percent(q float64) string { return strconv.FormatFloat(100*q, 'f', 2, 64) + "%" }

// migrationSummary lists a plan's first steps and counts the rest and the
// blocked ones.
func migrationSummary(plan toolschema.MigrationPlan) string {
	const shown = 4
	var steps []string
	for i, s := range plan.Steps {
		if i == shown {
			steps = append(steps, fmt.Sprintf("+%d more", len(plan.Steps)-shown))
			break
		}
		steps = append(steps, describeStep(s))
	}
	if len(plan.Blocked) > 0 {
		steps = append(steps, fmt.Sprintf("%d blocked", len(plan.Blocked)))
	}
	return strings.Join(steps, "; ")
}
