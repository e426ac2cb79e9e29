package events

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/toolsentry/toolsentry/schemas"
)

// The CloudEvents types, one per payload. A type's data has the JSON Schema
// schemas.<name> where name is the type without "io.toolsentry.".
const (
	TypeSchemaObserved     = "io.toolsentry.tool.schema.observed.v1"
	TypeInvocation         = "io.toolsentry.tool.invocation.v1"
	TypeContract           = "io.toolsentry.tool.contract.v1"
	TypeWorkflow           = "io.toolsentry.workflow.declared.v1"
	TypeQualityCheckpoint  = "io.toolsentry.tool.quality.checkpoint.v1"
	TypeSchemaVerdict      = "io.toolsentry.verdict.schema.v1"
	TypeCompositionVerdict = "io.toolsentry.verdict.composition.v1"
	TypeWorkflowObserved   = "io.toolsentry.workflow.observed.v1"
)

// Kind says which payload an Event carries.
type Kind uint8

// The kinds: telemetry (inputs) and verdicts. A new kind is added at the
// end: kinds are never renumbered.
const (
	KindUnknown Kind = iota
	KindSchemaObserved
	KindInvocation
	KindContract
	KindWorkflow
	KindSchemaVerdict
	KindCompositionVerdict
	// KindQualityCheckpoint is telemetry that workers publish themselves:
	// a tool's outcome counts, for the composition lane.
	KindQualityCheckpoint
	KindWorkflowObserved
	// The operators' actions (operator.go): telemetry on the tool's
	// subject, applied by the tool's lane in stream order.
	KindBaselineAccepted
	KindBaselineReset
	KindAgentMigrated
	KindAgentForgotten
)

// Class is the family of a subject: telemetry, verdicts or dead letters.
type Class uint8

// The subject classes, each with its own stream.
const (
	ClassUnknown Class = iota
	ClassTelemetry
	ClassVerdicts
	ClassDeadLetter
)

type kindInfo struct {
	name   string // Kind.String
	typ    string // CloudEvents type
	schema string // schemas name
	class  Class
	token  string // the telemetry kind or the guard, in the subject
}

var kindInfos = [...]kindInfo{
	KindUnknown:            {name: "unknown"},
	KindSchemaObserved:     {"schema_observed", TypeSchemaObserved, schemas.ToolSchemaObservedV1, ClassTelemetry, "schema"},
	KindInvocation:         {"invocation", TypeInvocation, schemas.ToolInvocationV1, ClassTelemetry, "invocation"},
	KindContract:           {"contract", TypeContract, schemas.ToolContractV1, ClassTelemetry, "contract"},
	KindWorkflow:           {"workflow", TypeWorkflow, schemas.WorkflowDeclaredV1, ClassTelemetry, "workflow"},
	KindSchemaVerdict:      {"schema_verdict", TypeSchemaVerdict, schemas.VerdictSchemaV1, ClassVerdicts, "schema"},
	KindCompositionVerdict: {"composition_verdict", TypeCompositionVerdict, schemas.VerdictCompositionV1, ClassVerdicts, "composition"},
	KindQualityCheckpoint:  {"quality_checkpoint", TypeQualityCheckpoint, schemas.ToolQualityCheckpointV1, ClassTelemetry, "quality"},
	KindWorkflowObserved:   {"workflow_observed", TypeWorkflowObserved, schemas.WorkflowObservedV1, ClassTelemetry, "observed"},
	KindBaselineAccepted:   {"baseline_accepted", TypeBaselineAccepted, schemas.OperatorBaselineAcceptedV1, ClassTelemetry, "baseline_accepted"},
	KindBaselineReset:      {"baseline_reset", TypeBaselineReset, schemas.OperatorBaselineResetV1, ClassTelemetry, "baseline_reset"},
	KindAgentMigrated:      {"agent_migrated", TypeAgentMigrated, schemas.OperatorAgentMigratedV1, ClassTelemetry, "agent_migrated"},
	KindAgentForgotten:     {"agent_forgotten", TypeAgentForgotten, schemas.OperatorAgentForgottenV1, ClassTelemetry, "agent_forgotten"},
}

func (k Kind) info() kindInfo {
	if int(k) < len(kindInfos) {
		return kindInfos[k]
	}
	return kindInfos[KindUnknown]
}

// String names the kind: "invocation", "schema_verdict", ...
func (k Kind) String() string { return k.info().name }

// MarshalText writes the kind's name, so that an Event reads well as JSON.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, info := range kindInfos {
		if info.name == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("events: unknown kind %q", b)
}

// Type returns the kind's CloudEvents type ("" for KindUnknown).
func (k Kind) Type() string { return k.info().typ }

// Schema returns the name of the kind's JSON Schema in package schemas.
func (k Kind) Schema() string { return k.info().schema }

// Class returns ClassTelemetry or ClassVerdicts.
func (k Kind) Class() Class { return k.info().class }

// Token returns the kind's subject token: the telemetry kind (schema,
// invocation, contract, workflow, observed) or the verdict's guard (schema,
// composition).
func (k Kind) Token() string { return k.info().token }

// KindOfType returns the kind of a CloudEvents type, or KindUnknown.
func KindOfType(typ string) Kind {
	for k, info := range kindInfos {
		if k != int(KindUnknown) && info.typ == typ {
			return Kind(k)
		}
	}
	return KindUnknown
}

// TelemetryKinds returns every telemetry kind in Kind order: the kinds
// whose token may be the <kind> of a telemetry subject.
func TelemetryKinds() []Kind {
	var out []Kind
	for k, info := range kindInfos {
		if info.class == ClassTelemetry {
			out = append(out, Kind(k))
		}
	}
	return out
}

func kindOfToken(class Class, token string) Kind {
	for k, info := range kindInfos {
		if k != int(KindUnknown) && info.class == class && info.token == token {
			return Kind(k)
		}
	}
	return KindUnknown
}

// DefaultPrefix is the first token of every subject and the base of every
// stream and bucket name when Names has no prefix.
const DefaultPrefix = "toolsentry"

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Names derives every NATS name from one prefix: subjects, streams and KV
// buckets. The zero value uses DefaultPrefix:
//
//	subjects  toolsentry.telemetry.<kind>.<key>
//	          toolsentry.verdicts.<guard>.<verdict>.<key>
//	          toolsentry.dlq.<reason>
//	streams   TOOLSENTRY_TELEMETRY, TOOLSENTRY_VERDICTS, TOOLSENTRY_DLQ
//	buckets   toolsentry-baselines, toolsentry-usage, toolsentry-quality,
//	          toolsentry-outcomes, toolsentry-workflows, toolsentry-directives
//
// Keys are encoded with KeyToken. A Names is a small value, safe to copy and
// to use concurrently.
type Names struct {
	prefix string
}

// NewNames returns the names for prefix: one subject token of 1 to 32 bytes
// of a-z 0-9 _ -, starting with a letter, so that it is also valid in stream
// names (upper-cased, '-' becoming '_') and bucket names.
func NewNames(prefix string) (Names, error) {
	if !prefixRE.MatchString(prefix) {
		return Names{}, fmt.Errorf("events: prefix %q: want 1 to 32 of a-z 0-9 _ -, starting with a letter", prefix)
	}
	return Names{prefix: prefix}, nil
}

// Prefix returns the prefix in use.
func (n Names) Prefix() string {
	if n.prefix == "" {
		return DefaultPrefix
	}
	return n.prefix
}

func (n Names) stream(suffix string) string {
	return strings.ToUpper(strings.ReplaceAll(n.Prefix(), "-", "_")) + "_" + suffix
}

// TelemetryStream is the stream of inputs, e.g. TOOLSENTRY_TELEMETRY.
func (n Names) TelemetryStream() string { return n.stream("TELEMETRY") }

// VerdictsStream is the stream of verdicts, e.g. TOOLSENTRY_VERDICTS.
func (n Names) VerdictsStream() string { return n.stream("VERDICTS") }

// DeadLetterStream is the stream of dead letters, e.g. TOOLSENTRY_DLQ.
func (n Names) DeadLetterStream() string { return n.stream("DLQ") }

// BaselinesBucket holds the baseline schema per tool, e.g. toolsentry-baselines.
func (n Names) BaselinesBucket() string { return n.Prefix() + "-baselines" }

// UsageBucket holds each agent's used surface per tool, e.g. toolsentry-usage.
func (n Names) UsageBucket() string { return n.Prefix() + "-usage" }

// QualityBucket holds contracts and measured quality, e.g. toolsentry-quality.
func (n Names) QualityBucket() string { return n.Prefix() + "-quality" }

// WorkflowsBucket holds declared workflows, e.g. toolsentry-workflows.
func (n Names) WorkflowsBucket() string { return n.Prefix() + "-workflows" }

// OutcomesBucket names the bucket of tool outcome counters.
func (n Names) OutcomesBucket() string { return n.Prefix() + "-outcomes" }

// DirectivesBucket holds the last directive per key, e.g. toolsentry-directives.
func (n Names) DirectivesBucket() string { return n.Prefix() + "-directives" }

// TelemetrySubjects is the telemetry stream's subject filter, e.g.
// "toolsentry.telemetry.>".
func (n Names) TelemetrySubjects() string { return n.Prefix() + ".telemetry.>" }

// VerdictsSubjects is the verdict stream's subject filter.
func (n Names) VerdictsSubjects() string { return n.Prefix() + ".verdicts.>" }

// DeadLetterSubjects is the dead-letter stream's subject filter.
func (n Names) DeadLetterSubjects() string { return n.Prefix() + ".dlq.>" }

// Telemetry returns the subject of an input of kind about key, e.g.
// Telemetry(KindInvocation, "crm.lookup") = "toolsentry.telemetry.invocation.crm=2Elookup".
func (n Names) Telemetry(kind Kind, key string) (string, error) {
	if kind.Class() != ClassTelemetry {
		return "", fmt.Errorf("%w: %s is not a telemetry kind", ErrBadSubject, kind)
	}
	tok, err := KeyToken(key)
	if err != nil {
		return "", err
	}
	return n.Prefix() + ".telemetry." + kind.Token() + "." + tok, nil
}

var verdictRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
var verdictTokenRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Verdict returns the subject of a verdict of kind (KindSchemaVerdict or
// KindCompositionVerdict) named verdict (as the guards spell it, e.g.
// DRIFT_ON_USED_FIELDS) about key, e.g.
// "toolsentry.verdicts.schema.drift_on_used_fields.crm=2Elookup".
func (n Names) Verdict(kind Kind, verdict, key string) (string, error) {
	if kind.Class() != ClassVerdicts {
		return "", fmt.Errorf("%w: %s is not a verdict kind", ErrBadSubject, kind)
	}
	if !plainVerdictName(verdict) { // verdictRE, without the regexp engine: this runs per verdict
		return "", fmt.Errorf("%w: verdict %q: want upper-case A-Z 0-9 _", ErrBadSubject, verdict)
	}
	tok, err := KeyToken(key)
	if err != nil {
		return "", err
	}
	return n.Prefix() + ".verdicts." + kind.Token() + "." + strings.ToLower(verdict) + "." + tok, nil
}

// VerdictFilter returns a subject filter for subscribers: verdicts of kind,
// named verdict ("" for any), about key ("" for any).
func (n Names) VerdictFilter(kind Kind, verdict, key string) (string, error) {
	if kind.Class() != ClassVerdicts {
		return "", fmt.Errorf("%w: %s is not a verdict kind", ErrBadSubject, kind)
	}
	v := "*"
	if verdict != "" {
		if !verdictRE.MatchString(verdict) {
			return "", fmt.Errorf("%w: verdict %q: want upper-case A-Z 0-9 _", ErrBadSubject, verdict)
		}
		v = strings.ToLower(verdict)
	}
	k := "*"
	if key != "" {
		tok, err := KeyToken(key)
		if err != nil {
			return "", err
		}
		k = tok
	}
	return n.Prefix() + ".verdicts." + kind.Token() + "." + v + "." + k, nil
}

// DeadLetter returns the subject of a dead letter, e.g. "toolsentry.dlq.schema_invalid".
func (n Names) DeadLetter(reason Reason) (string, error) {
	if !reason.Valid() {
		return "", fmt.Errorf("%w: unknown dead-letter reason %q", ErrBadSubject, string(reason))
	}
	return n.Prefix() + ".dlq." + string(reason), nil
}

// Address is a parsed subject.
type Address struct {
	Class Class
	Kind  Kind // telemetry and verdicts
	// Stored is true for telemetry in the stored form
	// <prefix>.telemetry.<kind>.<partition>.<key> (the telemetry stream's
	// subject transform inserts the partition token); false for the
	// published form <prefix>.telemetry.<kind>.<key>.
	Stored bool
	// Partition is the stored form's partition token (0 when not Stored).
	Partition int
	Verdict   string // verdicts: the verdict as the guards spell it, e.g. DRIFT_ON_USED_FIELDS
	Key       string // telemetry and verdicts: the decoded key
	Reason    Reason // dead letters
}

// ParseSubject parses a subject built by Telemetry, Verdict or DeadLetter.
// Errors wrap ErrBadSubject.
func (n Names) ParseSubject(subject string) (Address, error) {
	prefix := n.Prefix()
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return Address{}, fmt.Errorf("%w: %q does not start with %q", ErrBadSubject, subject, prefix+".")
	}
	var buf [5]string // as many tokens as a valid subject has: no allocation
	tokens := appendTokens(buf[:0], rest)
	switch tokens[0] {
	case "telemetry":
		if len(tokens) != 3 && len(tokens) != 4 {
			return Address{}, fmt.Errorf("%w: %q: want %s.telemetry.<kind>.<key> (or as stored, %s.telemetry.<kind>.<partition>.<key>)", ErrBadSubject, subject, prefix, prefix)
		}
		kind := kindOfToken(ClassTelemetry, tokens[1])
		if kind == KindUnknown {
			return Address{}, fmt.Errorf("%w: %q: unknown telemetry kind %q", ErrBadSubject, subject, tokens[1])
		}
		addr := Address{Class: ClassTelemetry, Kind: kind}
		if len(tokens) == 4 {
			p, ok := partitionToken(tokens[2])
			if !ok {
				return Address{}, fmt.Errorf("%w: %q: want %s.telemetry.<kind>.<key>, or as stored %s.telemetry.<kind>.<partition>.<key> with a partition below %d, not %q",
					ErrBadSubject, subject, prefix, prefix, MaxStoredPartition+1, tokens[2])
			}
			addr.Stored, addr.Partition = true, p
		}
		key, err := KeyFromToken(tokens[len(tokens)-1])
		if err != nil {
			return Address{}, fmt.Errorf("%w: %q: %v", ErrBadSubject, subject, err)
		}
		addr.Key = key
		return addr, nil
	case "verdicts":
		if len(tokens) != 4 {
			return Address{}, fmt.Errorf("%w: %q: want %s.verdicts.<guard>.<verdict>.<key>", ErrBadSubject, subject, prefix)
		}
		kind := kindOfToken(ClassVerdicts, tokens[1])
		if kind == KindUnknown {
			return Address{}, fmt.Errorf("%w: %q: unknown guard %q", ErrBadSubject, subject, tokens[1])
		}
		if !verdictTokenRE.MatchString(tokens[2]) {
			return Address{}, fmt.Errorf("%w: %q: verdict token %q: want lower-case a-z 0-9 _", ErrBadSubject, subject, tokens[2])
		}
		key, err := KeyFromToken(tokens[3])
		if err != nil {
			return Address{}, fmt.Errorf("%w: %q: %v", ErrBadSubject, subject, err)
		}
		return Address{Class: ClassVerdicts, Kind: kind, Verdict: strings.ToUpper(tokens[2]), Key: key}, nil
	case "dlq":
		if len(tokens) != 2 || !Reason(tokens[1]).Valid() {
			return Address{}, fmt.Errorf("%w: %q: want %s.dlq.<reason> with a known reason", ErrBadSubject, subject, prefix)
		}
		return Address{Class: ClassDeadLetter, Reason: Reason(tokens[1])}, nil
	}
	return Address{}, fmt.Errorf("%w: %q: unknown class %q", ErrBadSubject, subject, tokens[0])
}

// MaxStoredPartition is the largest partition token a stored telemetry
// subject may carry.
const MaxStoredPartition = 9999

// partitionToken parses a stored subject's partition token: a decimal
// number without leading zeros, at most MaxStoredPartition.
func partitionToken(tok string) (int, bool) {
	if tok == "" || len(tok) > 4 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	p := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		p = p*10 + int(c-'0')
	}
	return p, true
}

// StoredTelemetry returns the subject an input of kind about key is stored
// under in partition p, e.g. StoredTelemetry(KindInvocation, 2,
// "crm.lookup") = "toolsentry.telemetry.invocation.2.crm=2Elookup". The
// telemetry stream's subject transform builds it from the published
// subject (Telemetry); this is for tests and tools that read the stream.
func (n Names) StoredTelemetry(kind Kind, p int, key string) (string, error) {
	if p < 0 || p > MaxStoredPartition {
		return "", fmt.Errorf("%w: partition %d out of range 0..%d", ErrBadSubject, p, MaxStoredPartition)
	}
	subject, err := n.Telemetry(kind, key)
	if err != nil {
		return "", err
	}
	head, tok, _ := strings.Cut(subject, ".telemetry."+kind.Token()+".")
	return head + ".telemetry." + kind.Token() + "." + strconv.Itoa(p) + "." + tok, nil
}

// StoredTelemetryFilters returns the subject filters that select every
// stored input of kind about key: the stored form
// <prefix>.telemetry.<kind>.*.<key> (any partition), then the published
// form <prefix>.telemetry.<kind>.<key> that messages stored before the
// telemetry stream had its subject transform keep. A reader of one key's
// inputs reads both and merges them by sequence.
func (n Names) StoredTelemetryFilters(kind Kind, key string) ([]string, error) {
	subject, err := n.Telemetry(kind, key)
	if err != nil {
		return nil, err
	}
	head, tok, _ := strings.Cut(subject, ".telemetry."+kind.Token()+".")
	return []string{head + ".telemetry." + kind.Token() + ".*." + tok, subject}, nil
}

// Published returns the subject a telemetry subject was published on: the
// stored form without its partition token, any other subject as it is
// (after checking it parses). A dead letter's or a replayed input's
// original subject is republished on it.
func (n Names) Published(subject string) (string, error) {
	a, err := n.ParseSubject(subject)
	if err != nil {
		return "", err
	}
	if !a.Stored {
		return subject, nil
	}
	return n.Telemetry(a.Kind, a.Key)
}

// appendTokens appends the '.'-separated tokens of s to dst, as
// strings.Split(s, ".") returns them.
func appendTokens(dst []string, s string) []string {
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return append(dst, s)
		}
		dst = append(dst, s[:i])
		s = s[i+1:]
	}
}

// ParseSubject parses a subject with the default prefix; see Names.ParseSubject.
func ParseSubject(subject string) (Address, error) { return Names{}.ParseSubject(subject) }
