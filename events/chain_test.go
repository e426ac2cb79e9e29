package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolsentry/toolsentry/guards"
)

// digestBody is a small structured-mode event whose canonical form Python
// writes the same way (json.dumps(sort_keys=True, separators=(",", ":"),
// ensure_ascii=False): JCS for ASCII keys, integers and plain strings), so
// its digest is checked against an independent computation:
//
//	python3 -c 'import hashlib,json; o={...}; print(hashlib.sha256(json.dumps(o,sort_keys=True,separators=(",",":"),ensure_ascii=False).encode()).hexdigest())'
const digestBody = `{"specversion":"1.0","id":"x","source":"s","type":"t","predecessorhash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","data":{"b":1,"a":[true,null,"é"]}}`

const digestWant = "sha256:e2a3f40f30356e3e0a4a65424228c1c4fa4b50cca911ca556f6b503ae1bfb489"

func TestVerdictDigestIndependentComputation(t *testing.T) {
	got, err := VerdictDigest([]byte(digestBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != digestWant {
		t.Errorf("VerdictDigest = %s, want %s (Python's canonical JSON)", got, digestWant)
	}
}

func TestVerdictDigestCanonical(t *testing.T) {
	same := map[string]string{
		"members reordered, white space": `{ "data" : {"a":[true, null, "é"], "b": 1.0},
			"type":"t","source":"s","id":"x","specversion":"1.0",
			"predecessorhash":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}`,
		"escapes":   `{"specversion":"1.0","id":"\u0078","source":"s","type":"t","predecessorhash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","data":{"b":1e0,"a":[true,null,"\u00e9"]}}`,
		"signature": `{"specversion":"1.0","id":"x","source":"s","type":"t","dssematerial":"eyJ9","predecessorhash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","data":{"b":1,"a":[true,null,"é"]}}`,
	}
	for name, body := range same {
		got, err := VerdictDigest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != digestWant {
			t.Errorf("%s: digest %s, want the same as the plain form %s", name, got, digestWant)
		}
	}
	differs := map[string]string{
		"a data value":        strings.Replace(digestBody, `"b":1`, `"b":2`, 1),
		"a type in the data":  strings.Replace(digestBody, `"b":1`, `"b":"1"`, 1),
		"an attribute":        strings.Replace(digestBody, `"id":"x"`, `"id":"y"`, 1),
		"the chain attribute": strings.Replace(digestBody, `sha256:0000`, `sha256:1000`, 1),
		"no chain attribute":  strings.Replace(digestBody, `"predecessorhash":"sha256:0000000000000000000000000000000000000000000000000000000000000000",`, ``, 1),
		"another extension":   strings.Replace(digestBody, `"id":"x"`, `"id":"x","traceparent":"00-1"`, 1),
	}
	for name, body := range differs {
		got, err := VerdictDigest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got == digestWant {
			t.Errorf("changing %s left the digest unchanged", name)
		}
		if !ValidDigest(got) {
			t.Errorf("%s: digest %q is not in its own form", name, got)
		}
	}
}

func TestVerdictDigestRefuses(t *testing.T) {
	cases := map[string]struct {
		body string
		want error
	}{
		"not JSON":             {`{"specversion":`, ErrNotCloudEvent},
		"an array":             {`[1]`, ErrNotCloudEvent},
		"no specversion":       {`{"id":"x","data":{}}`, ErrNotCloudEvent},
		"binary-mode data":     {`{"tool_id":"x"}`, ErrNotCloudEvent},
		"repeated member":      {`{"specversion":"1.0","data":{},"data":{}}`, ErrSpecViolation},
		"chain link no string": {`{"specversion":"1.0","predecessorhash":7,"data":{}}`, ErrSpecViolation},
	}
	for name, tc := range cases {
		if _, err := VerdictDigest([]byte(tc.body)); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", name, err, tc.want)
		}
	}
}

func TestValidDigest(t *testing.T) {
	good := DigestPrefix + strings.Repeat("0a", 32)
	for s, want := range map[string]bool{
		good:                                   true,
		strings.ToUpper(good):                  false,
		"sha512:" + strings.Repeat("0a", 32):   false,
		good[:len(good)-1]:                     false,
		good + "0":                             false,
		DigestPrefix + strings.Repeat("g", 64): false,
		"":                                     false,
	} {
		if got := ValidDigest(s); got != want {
			t.Errorf("ValidDigest(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestChainKey(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		key  string
		want string
	}{
		{KindSchemaVerdict, "crm.lookup", "schema/crm.lookup"},
		{KindCompositionVerdict, "crm.lookup", "composition/crm.lookup"},
		{KindCompositionVerdict, "a/b", "composition/a/b"},
		{KindInvocation, "crm.lookup", ""},
		{KindUnknown, "x", ""},
	} {
		if got := ChainKey(tc.kind, tc.key); got != tc.want {
			t.Errorf("ChainKey(%s, %q) = %q, want %q", tc.kind, tc.key, got, tc.want)
		}
	}
}

func chainSchemaVerdict(input string) SchemaVerdict {
	return SchemaVerdict{
		Verdict: guards.SchemaMatch, Directive: "PROCEED: Schema matches baseline.",
		ManifestDigest: strings.Repeat("ab", 32), ToolID: "crm.lookup", AgentID: "billing-7", Version: "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64), CurrentFingerprint: "sha256:" + strings.Repeat("a", 64),
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`), Migration: json.RawMessage(`{"blocked":[],"steps":[]}`),
		GuardVersion: "test", InputEventID: input, InputSubject: "toolsentry.telemetry.invocation.crm=2Elookup", InputSequence: 3,
	}
}

// TestVerdictChainConstructors builds a chain with the constructors: the
// first verdict has no link, each next one names its predecessor's digest,
// the id does not depend on the link, and every verdict decodes with the
// link as an extension.
func TestVerdictChainConstructors(t *testing.T) {
	n := Names{}
	at := time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC)
	first, err := n.NewSchemaVerdict(chainSchemaVerdict("e1"), at)
	if err != nil {
		t.Fatal(err)
	}
	explicit, err := n.NewSchemaVerdict(chainSchemaVerdict("e1"), at, WithPrevious(""))
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Data) != string(explicit.Data) {
		t.Errorf("WithPrevious(\"\") changed the verdict:\n%s\n%s", first.Data, explicit.Data)
	}
	d1, err := VerdictDigest(first.Data)
	if err != nil {
		t.Fatal(err)
	}
	second, err := n.NewSchemaVerdict(chainSchemaVerdict("e2"), at, WithPrevious(d1))
	if err != nil {
		t.Fatal(err)
	}
	unlinked, err := n.NewSchemaVerdict(chainSchemaVerdict("e2"), at)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != unlinked.ID {
		t.Errorf("the link changed the id: %s vs %s", second.ID, unlinked.ID)
	}
	d2, err := VerdictDigest(second.Data)
	if err != nil {
		t.Fatal(err)
	}
	if d2u, _ := VerdictDigest(unlinked.Data); d2u == d2 {
		t.Error("the link is not covered by the digest")
	}
	cv := CompositionVerdict{
		Verdict: guards.CompositionDegraded, Directive: "HALT: Composed quality 77.38% < requirement 90.00%.",
		ManifestDigest: strings.Repeat("cd", 32), CompositionID: "crm.lookup", ComposedQuality: 0.7738,
		GuardVersion: "test", InputEventID: "e3", InputSubject: "toolsentry.telemetry.workflow.crm=2Elookup", InputSequence: 4,
	}
	comp, err := n.NewCompositionVerdict(cv, at, WithPrevious(d2))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		msg   Message
		prev  string
		chain string
	}{{first, "", "schema/crm.lookup"}, {second, d1, "schema/crm.lookup"}, {comp, d2, "composition/crm.lookup"}} {
		ev, err := Decode(tc.msg.Subject, tc.msg.Header, tc.msg.Data)
		if err != nil {
			t.Fatalf("decoding %s: %v", tc.msg.Data, err)
		}
		if got := ev.Extensions[AttrPrevious]; got != tc.prev {
			t.Errorf("%s: %s = %q, want %q", tc.msg.ID, AttrPrevious, got, tc.prev)
		}
		if got := ev.ChainKey(); got != tc.chain {
			t.Errorf("%s: chain %q, want %q", tc.msg.ID, got, tc.chain)
		}
		link, err := ReadChainLink(tc.msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ChainLink{Digest: link.Digest, Previous: tc.prev}, link); diff != "" {
			t.Errorf("ReadChainLink (-want +got):\n%s", diff)
		}
		// Encode after Decode keeps the digest: re-encoding (as the
		// signer does) does not break the chain.
		again, err := n.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := VerdictDigest(again.Data); d != link.Digest {
			t.Errorf("%s: re-encoded digest %s, want %s", tc.msg.ID, d, link.Digest)
		}
	}
}

func TestWithPreviousRefusesMalformedDigest(t *testing.T) {
	for _, bad := range []string{"abc", "sha256:" + strings.Repeat("A", 64), strings.Repeat("a", 64)} {
		_, err := Names{}.NewSchemaVerdict(chainSchemaVerdict("e1"), time.Time{}, WithPrevious(bad))
		if !errors.Is(err, ErrBadEvent) {
			t.Errorf("WithPrevious(%q): error %v, want ErrBadEvent", bad, err)
		}
	}
}
