package publisher

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/toolsentry/toolsentry/events"
)

// ProblemKind classifies what an Auditor found wrong with a verdict.
type ProblemKind string

// The problems an audit names, each with the stream sequence of the
// verdict (or the range of sequences) it is about.
const (
	// ProblemTampered: the message is not a valid verdict, its signature
	// attribute is malformed or verifies under no key, or the verdict was
	// changed after it was signed (its digest is not the signed one).
	ProblemTampered ProblemKind = "tampered"
	// ProblemUntrusted: correctly signed, but by a key that is not trusted.
	ProblemUntrusted ProblemKind = "untrusted"
	// ProblemUnsigned: no signature attribute.
	ProblemUnsigned ProblemKind = "unsigned"
	// ProblemMissing: a chain break; the verdict's predecessor is not the
	// previous verdict of its chain in the stream: it names a digest the
	// stream does not hold (its predecessor was deleted), or names none
	// although its chain has earlier verdicts.
	ProblemMissing ProblemKind = "missing"
	// ProblemOutOfOrder: the verdict names an earlier verdict of the stream
	// as its predecessor, but not the previous one of its chain, or is a
	// copy of an earlier verdict: a verdict re-published, re-ordered or
	// forked.
	ProblemOutOfOrder ProblemKind = "out_of_order"
	// ProblemDeleted: stream sequences inside the audited range that hold
	// no message: they were deleted (nats stream rmm) or purged.
	ProblemDeleted ProblemKind = "deleted"
)

// Problem is one finding of an audit.
type Problem struct {
	// Seq is the stream sequence of the verdict; for ProblemDeleted the
	// first deleted sequence.
	Seq uint64 `json:"seq"`
	// LastSeq is the last deleted sequence of a ProblemDeleted range.
	LastSeq uint64      `json:"last_seq,omitempty"`
	Kind    ProblemKind `json:"kind"`
	// Chain is the verdict's chain (events.ChainKey), when it decoded.
	Chain string `json:"chain,omitempty"`
	// ID is the verdict's event id, when it decoded.
	ID      string `json:"id,omitempty"`
	Subject string `json:"subject,omitempty"`
	Reason  string `json:"reason"`
}

// AuditOptions configure an Auditor.
type AuditOptions struct {
	// Names are the subjects of the stream (default prefix toolsentry).
	Names events.Names
	// Trusted are the public keys ("N...") whose signatures are accepted;
	// empty accepts any key's valid signature and only reports which keys
	// signed (AuditReport.Keys).
	Trusted []string
	// Anchored trusts the first verdict of each chain as its anchor
	// without checking its link: for an audit of a window (verify --since,
	// --from-seq) whose chains began before it. Otherwise a chain's first
	// verdict must name no predecessor.
	Anchored bool
	// StartSeq is the first stream sequence of the audited range: the
	// sequences from it to the first message seen count as deleted. 0
	// starts the range at the first message seen.
	StartSeq uint64
	// StreamFirstSeq is the stream's first sequence when the audit began,
	// mentioned when a chain's predecessor may have been removed with the
	// head of the stream (max age, limits or a purge); 0 if unknown.
	StreamFirstSeq uint64
}

// AuditReport is the result of an audit.
type AuditReport struct {
	// Verdicts is the number of messages audited.
	Verdicts int `json:"verdicts"`
	// Chains is the number of chains (events.ChainKey) among them.
	Chains int `json:"chains"`
	// Signed is the number of verdicts with a signature that verifies.
	Signed int `json:"signed"`
	// Keys counts those verdicts by the public key that signed them.
	Keys map[string]int `json:"keys"`
	// FirstSeq and LastSeq are the audited range of stream sequences
	// (0 when empty).
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// StreamFirstSeq is AuditOptions.StreamFirstSeq.
	StreamFirstSeq uint64 `json:"stream_first_seq,omitempty"`
	// Anchored is AuditOptions.Anchored.
	Anchored bool `json:"anchored"`
	// Heads are the last verdict of each chain: its stream sequence and
	// digest. Kept outside the stream, they let a later audit check that
	// no chain lost its newest verdicts.
	Heads map[string]ChainHead `json:"heads"`
	// Counts counts the problems by kind.
	Counts map[ProblemKind]int `json:"counts"`
	// Problems are every finding, by sequence.
	Problems []Problem `json:"problems"`
}

// ChainHead is the last verdict of a chain in an audit.
type ChainHead struct {
	Seq    uint64 `json:"seq"`
	Digest string `json:"digest"`
}

// OK reports whether the audit found nothing wrong.
func (r AuditReport) OK() bool { return len(r.Problems) == 0 }

// Auditor checks a verdict stream, message by message in stream order:
// each verdict's signature (VerifyVerdict) and each chain's links (the
// link of a verdict must be the digest of the previous verdict of its
// chain in the stream), and gaps in the stream's sequences. It holds one
// entry per chain and per digest seen (about 60 bytes per verdict). It does
// no I/O.
//
// What a chain cannot show: the deletion of the newest verdicts of a chain
// leaves no successor to break (a truncated tail looks like a chain that
// simply stopped), and a stream deleted and rebuilt from a prefix of its
// verdicts verifies. Within one stream, JetStream never reuses a sequence,
// so deleted and purged messages show as gaps (ProblemDeleted) as long as
// the stream itself survives. Against the rest, keep the chain heads
// outside the stream: a periodic anchor (the head digest of every chain,
// signed and stored elsewhere, such as a transparency log or the auditor's
// own records) lets a later audit check that each recorded head is still
// in the stream, and where its chain continues.
//
// Add is not safe for concurrent use; Check is, and AddChecked takes its
// results in stream order, so the decoding and the signatures can be
// checked on every core while the chains advance in order.
type Auditor struct {
	opts     AuditOptions
	report   AuditReport
	chains   map[string]*chainHead
	seen     map[[32]byte]seenDigest
	nextSeq  uint64
	problems []Problem
}

type chainHead struct {
	digest string
	seq    uint64
}

type seenDigest struct {
	seq   uint64
	chain string
}

// NewAuditor returns an auditor with an empty report.
func NewAuditor(opts AuditOptions) *Auditor {
	return &Auditor{
		opts:    opts,
		chains:  make(map[string]*chainHead),
		seen:    make(map[[32]byte]seenDigest),
		nextSeq: opts.StartSeq,
		report:  AuditReport{Keys: map[string]int{}, Anchored: opts.Anchored, StreamFirstSeq: opts.StreamFirstSeq},
	}
}

func (a *Auditor) problem(p Problem) { a.problems = append(a.problems, p) }

// Add audits the message at stream sequence seq. Messages must come in
// increasing stream order. It is AddChecked(Check(...)).
func (a *Auditor) Add(seq uint64, subject string, header map[string][]string, data []byte) {
	a.AddChecked(a.Check(seq, subject, header, data))
}

// Checked is the part of a message's audit that does not depend on the
// other messages: its decoding and its signature. Check computes it and
// AddChecked takes it into the audit.
type Checked struct {
	seq     uint64
	subject string
	ev      events.Event
	decode  error // not a valid verdict
	v       Verification
	verify  error // VerifyVerdict's error
}

// Check decodes the message at stream sequence seq and verifies its
// signature. It is safe for concurrent use (it reads only the options),
// so that a caller can check several messages at once and hand the
// results to AddChecked in stream order.
func (a *Auditor) Check(seq uint64, subject string, header map[string][]string, data []byte) Checked {
	c := Checked{seq: seq, subject: subject}
	if c.ev, c.decode = a.opts.Names.Decode(subject, header, data); c.decode != nil {
		return c
	}
	if c.ev.Kind.Class() != events.ClassVerdicts {
		c.decode = fmt.Errorf("type %s is not a verdict type", c.ev.Type)
		return c
	}
	c.v, c.verify = VerifyVerdict(data, a.opts.Trusted)
	return c
}

// AddChecked takes a checked message into the audit: its signature's
// verdict, its chain link and the sequences before it. Messages must come
// in increasing stream order.
func (a *Auditor) AddChecked(c Checked) {
	seq := c.seq
	if a.report.FirstSeq == 0 {
		a.report.FirstSeq = seq
		if a.nextSeq == 0 || a.nextSeq > seq {
			a.nextSeq = seq
		}
	}
	if seq > a.nextSeq {
		a.problem(Problem{Seq: a.nextSeq, LastSeq: seq - 1, Kind: ProblemDeleted, Reason: deletedReason(a.nextSeq, seq-1)})
	}
	a.nextSeq = seq + 1
	a.report.LastSeq = seq
	a.report.Verdicts++

	if c.decode != nil {
		a.problem(Problem{Seq: seq, Kind: ProblemTampered, Subject: c.subject, Reason: "not a valid verdict: " + c.decode.Error()})
		return
	}
	p := Problem{Seq: seq, Chain: c.ev.ChainKey(), ID: c.ev.ID, Subject: c.subject}
	v, err := c.v, c.verify
	switch {
	case err == nil:
		a.report.Signed++
		a.report.Keys[v.KeyID]++
	case errors.Is(err, ErrUnsigned):
		p.Kind, p.Reason = ProblemUnsigned, "no "+events.AttrSignature+" attribute"
		a.problem(p)
	case errors.Is(err, ErrUntrustedKey):
		a.report.Signed++
		a.report.Keys[v.KeyID]++
		p.Kind, p.Reason = ProblemUntrusted, "signed by "+v.KeyID+", which is not among the trusted keys"
		a.problem(p)
	case errors.Is(err, ErrDigestMismatch):
		p.Kind, p.Reason = ProblemTampered, "changed after it was signed: its digest is "+v.Digest+", the signature (key "+v.KeyID+") signs "+v.SignedDigest
		a.problem(p)
		return // its link is not the signer's: it does not take part in the chain
	default:
		p.Kind, p.Reason = ProblemTampered, err.Error()
		a.problem(p)
		return
	}
	a.link(p, v)
}

// link checks the chain link of an authentic (or unsigned) verdict and
// makes it the head of its chain.
func (a *Auditor) link(p Problem, v Verification) {
	raw, _ := digestBytes(v.Digest)
	var key [32]byte
	copy(key[:], raw)
	if prior, dup := a.seen[key]; dup {
		p.Kind, p.Reason = ProblemOutOfOrder, fmt.Sprintf("a copy of the verdict at seq %d", prior.seq)
		a.problem(p)
		return
	}
	a.seen[key] = seenDigest{seq: p.Seq, chain: p.Chain}
	head, ok := a.chains[p.Chain]
	defer func() { a.chains[p.Chain] = &chainHead{digest: v.Digest, seq: p.Seq} }()
	if !ok {
		a.report.Chains++
		switch {
		case a.opts.Anchored || v.Previous == "":
		default:
			p.Kind, p.Reason = ProblemMissing, a.absent(v.Previous)+": the first verdict of its chain in the stream names a predecessor"
			if a.opts.StreamFirstSeq > 1 {
				p.Reason += fmt.Sprintf(" (the stream starts at seq %d: verdicts before it expired or were purged; `verify --from-seq %d` anchors the chains there)", a.opts.StreamFirstSeq, a.opts.StreamFirstSeq)
			}
			a.problem(p)
		}
		return
	}
	if v.Previous == head.digest {
		return
	}
	if v.Previous == "" {
		p.Kind, p.Reason = ProblemMissing, fmt.Sprintf("names no predecessor, but the previous verdict of its chain is at seq %d: the chain restarts here", head.seq)
		a.problem(p)
		return
	}
	if prior, ok := a.lookup(v.Previous); ok {
		p.Kind = ProblemOutOfOrder
		p.Reason = fmt.Sprintf("names the verdict at seq %d as its predecessor, but the previous verdict of its chain is at seq %d", prior.seq, head.seq)
		if prior.chain != p.Chain {
			p.Reason = fmt.Sprintf("names the verdict at seq %d of chain %s as its predecessor; the previous verdict of its chain is at seq %d", prior.seq, prior.chain, head.seq)
		}
		a.problem(p)
		return
	}
	p.Kind, p.Reason = ProblemMissing, a.absent(v.Previous)+fmt.Sprintf(": a verdict between seq %d (the previous of its chain) and this one was deleted", head.seq)
	a.problem(p)
}

func (a *Auditor) lookup(digest string) (seenDigest, bool) {
	raw, err := digestBytes(digest)
	if err != nil {
		return seenDigest{}, false
	}
	var key [32]byte
	copy(key[:], raw)
	s, ok := a.seen[key]
	return s, ok
}

func (a *Auditor) absent(previous string) string {
	if !events.ValidDigest(previous) {
		return fmt.Sprintf("its %s %q is not a digest", events.AttrPrevious, previous)
	}
	return "its predecessor " + previous + " is not in the stream"
}

func deletedReason(first, last uint64) string {
	if first == last {
		return fmt.Sprintf("seq %d holds no message: deleted or purged", first)
	}
	return fmt.Sprintf("seqs %d-%d (%d) hold no message: deleted or purged", first, last, last-first+1)
}

// End closes the audited range at lastSeq (the stream's last sequence when
// the audit began; 0 to end at the last message seen), so that messages
// deleted at its end count too, and returns the report.
func (a *Auditor) End(lastSeq uint64) AuditReport {
	if lastSeq > 0 && a.nextSeq > 0 && lastSeq >= a.nextSeq {
		a.problem(Problem{Seq: a.nextSeq, LastSeq: lastSeq, Kind: ProblemDeleted, Reason: deletedReason(a.nextSeq, lastSeq)})
		a.nextSeq = lastSeq + 1
	}
	r := a.report
	r.Problems = append([]Problem(nil), a.problems...)
	sort.SliceStable(r.Problems, func(i, j int) bool { return r.Problems[i].Seq < r.Problems[j].Seq })
	r.Counts = map[ProblemKind]int{}
	for _, p := range r.Problems {
		r.Counts[p.Kind]++
	}
	r.Keys = maps.Clone(r.Keys)
	r.Heads = make(map[string]ChainHead, len(a.chains))
	for chain, h := range a.chains {
		r.Heads[chain] = ChainHead{Seq: h.seq, Digest: h.digest}
	}
	return r
}

// Describe is a one-line account of the problem, for people.
func (p Problem) Describe() string {
	var b strings.Builder
	if p.Kind == ProblemDeleted && p.LastSeq > p.Seq {
		fmt.Fprintf(&b, "seq %d-%d", p.Seq, p.LastSeq)
	} else {
		fmt.Fprintf(&b, "seq %d", p.Seq)
	}
	fmt.Fprintf(&b, "  %s", p.Kind)
	if p.Chain != "" {
		fmt.Fprintf(&b, "  %s", p.Chain)
	}
	if p.ID != "" {
		fmt.Fprintf(&b, "  verdict %s", p.ID)
	}
	fmt.Fprintf(&b, ": %s", p.Reason)
	return b.String()
}
