package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// envPubkey holds verify's trusted public keys, comma separated.
const envPubkey = "TOOLSENTRY_PUBKEY"

// verifyIdleTimeout bounds the wait for the next verdict the stream said
// it holds.
const verifyIdleTimeout = 30 * time.Second

func init() {
	register(&command{
		name:    "verify",
		summary: "check the signatures and chains of the recorded verdicts; exit 1 on any tampered, unsigned or missing one",
		usage:   verifyUsage,
		run:     runVerify,
	})
}

const verifyUsage = `Usage: toolsentry verify [--pubkey KEY]... [--since WHEN | --from-seq N] [--json] [flags]

Audits the verdict stream (TOOLSENTRY_VERDICTS) as it stands, from its first
message (or from --since / --from-seq) to its last when verify starts, in
stream order, and names by stream sequence every verdict that is

  tampered      not a valid verdict, or its signature is damaged or forged,
                or it was changed after it was signed
  untrusted     signed by a key that is not one of --pubkey
  unsigned      carries no signature
  missing       its chain is broken: the predecessor it names is not the
                previous verdict of its chain in the stream (a verdict was
                deleted), or it names none though its chain has earlier ones
  out_of_order  it names an earlier verdict, not the previous one, as its
                predecessor, or repeats one: re-published or re-ordered
  deleted       stream sequences that hold no message (nats stream rmm, purge)

A chain is the verdicts of one guard about one key (schema/<tool>,
composition/<composition>); each verdict carries the digest of its
predecessor (attribute predecessorhash) under its signature (attribute
dssematerial, a DSSE envelope after the CloudEvents verifiability
extension). Exit status 0 when nothing is found, 1 otherwise, 2 on a usage
error. A progress line is drawn on standard error when it is a terminal.

What a chain cannot show: the deletion of the newest verdicts of a chain
(nothing follows them to break), or a stream deleted and rebuilt from a
prefix of its verdicts. Deleting messages leaves gaps in the stream's
sequences, which verify reports, while the stream lives. To detect the
rest, record the chains' heads outside the stream now and then (the
"heads" of this command's --json report: each chain's last sequence and
digest, kept elsewhere) and check later that each is still there.

Flags:
  --pubkey KEY    trust signatures by KEY: a public key (N..., as printed by
                  ` + "`toolsentry keygen`" + `) or a file holding one (keygen's FILE.pub);
                  repeat for several keys, e.g. across a key rotation
                  (default $` + envPubkey + `, comma separated; without keys, any
                  valid signature is accepted and the keys that signed are
                  listed: unsigned and tampered verdicts still fail)
  --since WHEN    audit only verdicts published since WHEN: a duration back
                  from now (24h) or an RFC 3339 time (2026-10-03T00:00:00Z).
                  The first verdict of each chain in the window is trusted as
                  its anchor: its own link is not checked (default: the whole
                  stream)
  --from-seq N    audit from stream sequence N; chains are anchored as with
                  --since (default 0: the whole stream)
  --json          print the report as one JSON object (default false)

Without --since or --from-seq, a chain's first verdict must name no
predecessor. After the stream's max age removed its oldest verdicts, start
at the stream's first sequence: verify says which one.

` + connFlagsHelp + `
Examples:
  toolsentry verify --pubkey toolsentry-signing.nk.pub
  toolsentry verify --pubkey NCEXAMPLE... --since 24h --json > audit.json
`

// pubkeysFlag collects --pubkey values.
type pubkeysFlag []string

func (p *pubkeysFlag) String() string { return strings.Join(*p, ",") }

func (p *pubkeysFlag) Set(v string) error {
	*p = append(*p, v)
	return nil
}

// verifyOptions are verify's parsed flags.
type verifyOptions struct {
	trusted []string
	fromSeq uint64
	since   time.Time
	json    bool
}

func runVerify(ctx context.Context, args []string, sio stdio) error {
	fset := flag.NewFlagSet("verify", flag.ContinueOnError)
	var keys pubkeysFlag
	fset.Var(&keys, "pubkey", "")
	since := fset.String("since", "", "")
	fromSeq := fset.Uint64("from-seq", 0, "")
	asJSON := fset.Bool("json", false, "")
	conn := addConnFlags(fset)
	rest, err := parseInterleaved(fset, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("verify takes no arguments, got %q", rest)
	}
	names, err := conn.names()
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		for k := range strings.SplitSeq(os.Getenv(envPubkey), ",") {
			if k = strings.TrimSpace(k); k != "" {
				keys = append(keys, k)
			}
		}
	}
	opts := verifyOptions{fromSeq: *fromSeq, json: *asJSON}
	for _, k := range keys {
		pub, err := readPubkey(k)
		if err != nil {
			return err
		}
		if !slices.Contains(opts.trusted, pub) {
			opts.trusted = append(opts.trusted, pub)
		}
	}
	if *since != "" {
		if *fromSeq != 0 {
			return usageErrorf("--since and --from-seq exclude each other")
		}
		if opts.since, err = parseSince(*since, time.Now()); err != nil {
			return err
		}
	}

	nc, js, err := conn.connect(ctx, "toolsentry verify")
	if err != nil {
		return err
	}
	defer nc.Close()
	progress := newVerifyProgress(sio.err)
	report, err := verifyStream(ctx, js, names, opts, progress.update)
	progress.done()
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return conn.notProvisioned(err, "stream "+names.VerdictsStream())
		}
		return err
	}
	if opts.json {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if _, err := sio.out.Write(append(b, '\n')); err != nil {
			return err
		}
	} else if err := printVerifyReport(sio.out, names, report, opts); err != nil {
		return err
	}
	if !report.OK() {
		return errExit(1)
	}
	return nil
}

// readPubkey reads a --pubkey value: a public key, or a file holding one.
func readPubkey(v string) (string, error) {
	if pub, err := publisher.ParsePublicKey(v); err == nil {
		return pub, nil
	}
	b, err := os.ReadFile(v)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", usageErrorf("--pubkey %q: neither a public key (N...) nor a file", v)
		}
		return "", fmt.Errorf("--pubkey: %w", err)
	}
	pub, err := publisher.ParsePublicKey(string(b))
	if err != nil {
		return "", usageErrorf("--pubkey %s: %v", v, err)
	}
	return pub, nil
}

// verifyStream audits the verdict stream of names from its first message
// (or opts.fromSeq, or opts.since) to its last sequence when the audit
// begins; progress, if not nil, is told the sequences done and the last
// one, as messages arrive.
func verifyStream(ctx context.Context, js jetstream.JetStream, names events.Names, opts verifyOptions, progress func(seq, last uint64)) (publisher.AuditReport, error) {
	stream, err := js.Stream(ctx, names.VerdictsStream())
	if err != nil {
		return publisher.AuditReport{}, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return publisher.AuditReport{}, fmt.Errorf("stream %s: %w", names.VerdictsStream(), err)
	}
	state := info.State
	aopts := publisher.AuditOptions{Names: names, Trusted: opts.trusted, StreamFirstSeq: state.FirstSeq}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.VerdictsSubjects()}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case opts.fromSeq > 0:
		aopts.Anchored = true
		aopts.StartSeq = max(opts.fromSeq, state.FirstSeq)
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, aopts.StartSeq
	case !opts.since.IsZero():
		aopts.Anchored = true
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &opts.since
	default:
		aopts.StartSeq = state.FirstSeq
	}
	// Gaps in the sequences are deletions only when the stream holds
	// nothing but verdicts.
	last, endSeq := state.LastSeq, state.LastSeq
	if !slices.Equal(info.Config.Subjects, []string{names.VerdictsSubjects()}) {
		aopts.StartSeq, endSeq = 0, 0
	}
	auditor := publisher.NewAuditor(aopts)
	if state.Msgs == 0 || last < max(aopts.StartSeq, 1) {
		return auditor.End(endSeq), nil
	}

	cons, err := js.OrderedConsumer(ctx, names.VerdictsStream(), cfg)
	if err != nil {
		return publisher.AuditReport{}, fmt.Errorf("reading %s: %w", names.VerdictsStream(), err)
	}
	it, err := cons.Messages()
	if err != nil {
		return publisher.AuditReport{}, fmt.Errorf("reading %s: %w", names.VerdictsStream(), err)
	}
	defer it.Stop()
	if ci, err := cons.Info(ctx); err == nil && ci.NumPending == 0 && ci.Delivered.Consumer == 0 {
		return auditor.End(endSeq), nil // nothing in the window
	}

	// Messages are checked (decoded, digested, signatures verified) on
	// every core, and taken into the audit in stream order by one
	// goroutine.
	workers := runtime.GOMAXPROCS(0)
	slots := make(chan struct{}, workers)
	ordered := make(chan *verifyJob, 4*workers)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for j := range ordered {
			<-j.done
			auditor.AddChecked(j.c)
			if progress != nil {
				progress(j.seq, last)
			}
		}
	}()
	readErr := func() error {
		for {
			nctx, cancel := context.WithTimeout(ctx, verifyIdleTimeout)
			msg, err := it.Next(jetstream.NextContext(nctx))
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("reading %s: %w", names.VerdictsStream(), err)
			}
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("reading %s: %w", names.VerdictsStream(), err)
			}
			seq := md.Sequence.Stream
			if seq > last {
				return nil // published after the audit began
			}
			j := &verifyJob{seq: seq, done: make(chan struct{})}
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; close(j.done) }()
				j.c = auditor.Check(seq, msg.Subject(), msg.Headers(), msg.Data())
			}()
			ordered <- j
			if seq == last || md.NumPending == 0 {
				return nil
			}
		}
	}()
	close(ordered)
	<-applied
	if readErr != nil {
		return publisher.AuditReport{}, readErr
	}
	return auditor.End(endSeq), nil
}

// verifyJob is one message being checked; done is closed when c is set.
type verifyJob struct {
	seq  uint64
	c    publisher.Checked
	done chan struct{}
}

// printVerifyReport writes the report for people.
func printVerifyReport(w io.Writer, names events.Names, r publisher.AuditReport, opts verifyOptions) error {
	var b strings.Builder
	window := "the whole stream"
	switch {
	case opts.fromSeq > 0:
		window = "from seq " + strconv.FormatUint(opts.fromSeq, 10) + ", first verdict of each chain taken as its anchor"
	case !opts.since.IsZero():
		window = "since " + opts.since.UTC().Format(time.RFC3339) + ", first verdict of each chain taken as its anchor"
	}
	fmt.Fprintf(&b, "%s (%s): ", names.VerdictsStream(), window)
	if r.Verdicts == 0 {
		b.WriteString("no verdicts\n")
	} else {
		fmt.Fprintf(&b, "%s, seq %d-%d, in %s; %d with a valid signature\n", verifyCount(r.Verdicts, "verdict"), r.FirstSeq, r.LastSeq, verifyCount(r.Chains, "chain"), r.Signed)
	}
	if r.StreamFirstSeq > 1 && opts.fromSeq == 0 && opts.since.IsZero() {
		fmt.Fprintf(&b, "the stream starts at seq %d: earlier verdicts expired or were purged (`verify --from-seq %d` anchors the chains there)\n", r.StreamFirstSeq, r.StreamFirstSeq)
	}
	keys := make([]string, 0, len(r.Keys))
	for k := range r.Keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		trust := "trusted"
		if len(opts.trusted) == 0 {
			trust = "not checked: pass --pubkey"
		} else if !slices.Contains(opts.trusted, k) {
			trust = "NOT TRUSTED"
		}
		fmt.Fprintf(&b, "  signed by %s: %d (%s)\n", k, r.Keys[k], trust)
	}
	for _, p := range r.Problems {
		b.WriteString("  " + p.Describe() + "\n")
	}
	if r.OK() {
		if len(opts.trusted) == 0 && r.Verdicts > 0 {
			b.WriteString("OK: every verdict is signed and every chain is intact (signing keys not checked: pass --pubkey)\n")
		} else {
			b.WriteString("OK: every verdict is signed by a trusted key and every chain is intact\n")
		}
	} else {
		var counts []string
		for _, k := range []publisher.ProblemKind{publisher.ProblemTampered, publisher.ProblemUntrusted, publisher.ProblemUnsigned,
			publisher.ProblemMissing, publisher.ProblemOutOfOrder, publisher.ProblemDeleted} {
			if n := r.Counts[k]; n > 0 {
				counts = append(counts, fmt.Sprintf("%d %s", n, k))
			}
		}
		fmt.Fprintf(&b, "FAILED: %s\n", strings.Join(counts, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// verifyCount writes n and the noun, in the plural unless n is 1.
func verifyCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// verifyProgress draws "verify: seq N of M" on a terminal, at most every
// 200ms, and nothing elsewhere.
type verifyProgress struct {
	w    io.Writer
	on   bool
	next time.Time
}

func newVerifyProgress(w io.Writer) *verifyProgress {
	p := &verifyProgress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

func (p *verifyProgress) update(seq, last uint64) {
	if !p.on {
		return
	}
	if now := time.Now(); now.After(p.next) {
		p.next = now.Add(200 * time.Millisecond)
		fmt.Fprintf(p.w, "\rverify: seq %d of %d (%d%%)", seq, last, seq*100/max(last, 1))
	}
}

func (p *verifyProgress) done() {
	if p.on && !p.next.IsZero() {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
