package publisher_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

var signTime = time.Date(2026, 10, 3, 9, 30, 0, 0, time.UTC)

func newSigner(t *testing.T) *publisher.Signer {
	t.Helper()
	seed, _, err := publisher.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := publisher.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testSchemaVerdict(tool, input string) events.SchemaVerdict {
	return events.SchemaVerdict{
		Verdict: guards.DriftOnUsedFields, Directive: "HALT: Drift on used fields ['user_id']. Apply migration.",
		ManifestDigest: strings.Repeat("ab", 32), ToolID: tool, AgentID: "billing-7", Version: "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64), CurrentFingerprint: "sha256:" + strings.Repeat("b", 64),
		Changes: json.RawMessage(`[{"kind":"renamed","path":"user_id","to":"userId"}]`), Affected: json.RawMessage(`["user_id"]`),
		Migration:    json.RawMessage(`{"blocked":[],"steps":[{"op":"move","path":"user_id","to":"userId"}]}`),
		GuardVersion: "test", InputEventID: input, InputSubject: "toolsentry.telemetry.invocation.x", InputSequence: 7,
	}
}

func schemaMsg(t *testing.T, names events.Names, input, previous string) events.Message {
	t.Helper()
	m, err := names.NewSchemaVerdict(testSchemaVerdict("crm.lookup", input), signTime, events.WithPrevious(previous))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKeygenRoundTrip(t *testing.T) {
	seed, public, err := publisher.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(seed, []byte("SN")) || !strings.HasPrefix(public, "N") {
		t.Fatalf("seed %.2s..., public %.1s...: want a server-type key pair (SN, N)", seed, public)
	}
	if _, err := publisher.ParsePublicKey(" " + public + "\n"); err != nil {
		t.Errorf("ParsePublicKey(its own public key): %v", err)
	}
	// A seed file as written by keygen, and one decorated like a creds file.
	for _, contents := range [][]byte{
		append(append([]byte{}, seed...), '\n'),
		[]byte("-----BEGIN TOOLSENTRY VERDICT SIGNING KEY-----\n" + string(seed) + "\n------END TOOLSENTRY VERDICT SIGNING KEY------\n"),
	} {
		s, err := publisher.NewSigner(contents)
		if err != nil {
			t.Fatalf("NewSigner(%q...): %v", contents[:8], err)
		}
		if s.PublicKey() != public {
			t.Errorf("public key %s, want %s", s.PublicKey(), public)
		}
	}
}

func TestSignerRefusesOtherKeyTypes(t *testing.T) {
	for _, create := range []func() (nkeys.KeyPair, error){nkeys.CreateUser, nkeys.CreateAccount, nkeys.CreateOperator} {
		kp, err := create()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		public, _ := kp.PublicKey()
		if _, err := publisher.NewSigner(seed); !errors.Is(err, publisher.ErrBadSigningKey) {
			t.Errorf("NewSigner(%.2s seed): error %v, want ErrBadSigningKey", seed, err)
		}
		if _, err := publisher.ParsePublicKey(public); !errors.Is(err, publisher.ErrBadSigningKey) {
			t.Errorf("ParsePublicKey(%.1s key): error %v, want ErrBadSigningKey", public, err)
		}
	}
	for _, junk := range []string{"", "hello\n", "SNnotaseed\n"} {
		if _, err := publisher.NewSigner([]byte(junk)); !errors.Is(err, publisher.ErrBadSigningKey) {
			t.Errorf("NewSigner(%q): error %v, want ErrBadSigningKey", junk, err)
		}
	}
}

func TestSignVerify(t *testing.T) {
	names := events.Names{}
	s := newSigner(t)
	first := schemaMsg(t, names, "e1", "")
	d1, err := events.VerdictDigest(first.Data)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := schemaMsg(t, names, "e2", d1)
	signed, err := s.Sign(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if signed.ID != unsigned.ID || signed.Subject != unsigned.Subject || fmt.Sprint(signed.Header) != fmt.Sprint(unsigned.Header) {
		t.Errorf("signing changed the id, subject or headers: %+v vs %+v", signed, unsigned)
	}

	// A signed verdict still decodes, with both attributes as extensions.
	ev, err := events.Decode(signed.Subject, signed.Header, signed.Data)
	if err != nil {
		t.Fatalf("a signed verdict does not decode: %v", err)
	}
	if ev.Extensions[events.AttrPrevious] != d1 || ev.Extensions[events.AttrSignature] == "" {
		t.Errorf("extensions %v: want %s=%s and a %s", ev.Extensions, events.AttrPrevious, d1, events.AttrSignature)
	}
	plain, _ := events.Decode(unsigned.Subject, unsigned.Header, unsigned.Data)
	if ev.SchemaVerdict.Directive != plain.SchemaVerdict.Directive || string(ev.SchemaVerdict.Migration) != string(plain.SchemaVerdict.Migration) {
		t.Error("signing changed the verdict's data")
	}

	// Signing does not change the digest: the chain link of the next
	// verdict is the same, signed or not.
	du, _ := events.VerdictDigest(unsigned.Data)
	ds, _ := events.VerdictDigest(signed.Data)
	if du != ds {
		t.Errorf("digest signed %s, unsigned %s", ds, du)
	}

	v, err := publisher.VerifyVerdict(signed.Data, []string{s.PublicKey()})
	if err != nil {
		t.Fatalf("VerifyVerdict: %v", err)
	}
	if v.KeyID != s.PublicKey() || v.Digest != du || v.SignedDigest != du || v.Previous != d1 {
		t.Errorf("verification %+v", v)
	}
	if v, err := publisher.VerifyVerdict(signed.Data, nil); err != nil || v.KeyID != s.PublicKey() {
		t.Errorf("without trusted keys: %+v, %v; want the signer's key named", v, err)
	}
	if _, err := publisher.VerifyVerdict(signed.Data, []string{newSigner(t).PublicKey()}); !errors.Is(err, publisher.ErrUntrustedKey) {
		t.Errorf("another trusted key: error %v, want ErrUntrustedKey", err)
	}
	if _, err := publisher.VerifyVerdict(unsigned.Data, nil); !errors.Is(err, publisher.ErrUnsigned) {
		t.Errorf("unsigned: error %v, want ErrUnsigned", err)
	}

	// Re-signing a signed verdict replaces the signature: same bytes.
	again, err := s.Sign(signed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Data, signed.Data) {
		t.Errorf("re-signing changed the message:\n%s\n%s", again.Data, signed.Data)
	}
}

// TestSignDeterministic: a verdict rebuilt for a redelivered input signs
// to the very same bytes, so the stream's duplicate window drops it.
func TestSignDeterministic(t *testing.T) {
	names := events.Names{}
	s := newSigner(t)
	a, err := s.Sign(schemaMsg(t, names, "e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Sign(schemaMsg(t, names, "e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Data, b.Data) || a.ID != b.ID {
		t.Errorf("two signatures of one verdict differ:\n%s\n%s", a.Data, b.Data)
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	names := events.Names{}
	s := newSigner(t)
	signed, err := s.Sign(schemaMsg(t, names, "e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	trusted := []string{s.PublicKey()}
	material := func(data []byte) string {
		ev, err := events.Decode(signed.Subject, signed.Header, data)
		if err != nil {
			t.Fatal(err)
		}
		return ev.Extensions[events.AttrSignature]
	}
	sig := material(signed.Data)

	// The data edited: HALT becomes PROCEED.
	edited := bytes.Replace(signed.Data, []byte(`"HALT: Drift`), []byte(`"PROCEED: Drift`), 1)
	if _, err := publisher.VerifyVerdict(edited, trusted); !errors.Is(err, publisher.ErrDigestMismatch) {
		t.Errorf("edited data: error %v, want ErrDigestMismatch", err)
	}
	// The chain link added after signing.
	relinked := bytes.Replace(signed.Data, []byte(`"dssematerial"`), []byte(`"predecessorhash":"sha256:`+strings.Repeat("0", 64)+`","dssematerial"`), 1)
	if _, err := publisher.VerifyVerdict(relinked, trusted); !errors.Is(err, publisher.ErrDigestMismatch) {
		t.Errorf("link added: error %v, want ErrDigestMismatch", err)
	}
	// The edited verdict re-signed by another key that claims the
	// trusted key's id.
	other := newSigner(t)
	forged, err := other.Sign(events.Message{Subject: signed.Subject, Header: signed.Header, ID: signed.ID, Data: edited})
	if err != nil {
		t.Fatal(err)
	}
	forgedData := bytes.Replace(forged.Data, []byte(material(forged.Data)), []byte(swapKeyID(t, material(forged.Data), other.PublicKey(), s.PublicKey())), 1)
	if _, err := publisher.VerifyVerdict(forgedData, trusted); !errors.Is(err, publisher.ErrBadSignature) {
		t.Errorf("forged signature: error %v, want ErrBadSignature", err)
	}
	// Honestly signed by the other key: untrusted.
	if _, err := publisher.VerifyVerdict(forged.Data, trusted); !errors.Is(err, publisher.ErrUntrustedKey) {
		t.Errorf("other key: error %v, want ErrUntrustedKey", err)
	}
	// Damaged material.
	for name, repl := range map[string]string{"not base64": "%%%", "not an envelope": base64.StdEncoding.EncodeToString([]byte(`[1]`)), "truncated": sig[:len(sig)/2]} {
		bad := bytes.Replace(signed.Data, []byte(sig), []byte(repl), 1)
		if _, err := publisher.VerifyVerdict(bad, trusted); !errors.Is(err, publisher.ErrBadSignature) {
			t.Errorf("%s: error %v, want ErrBadSignature", name, err)
		}
	}
}

func swapKeyID(t *testing.T, material, from, to string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(material)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(bytes.Replace(raw, []byte(from), []byte(to), 1))
}

// TestSignatureIsDSSE checks the signature attribute against the DSSE
// v1.0.2 protocol written out here independently: a Base64 JSON envelope
// whose payload is the verdict's digest and whose signature is ed25519
// over "DSSEv1 <len> <type> <len> <payload>" under the key the keyid names.
func TestSignatureIsDSSE(t *testing.T) {
	names := events.Names{}
	s := newSigner(t)
	signed, err := s.Sign(schemaMsg(t, names, "e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.Decode(signed.Subject, signed.Header, signed.Data)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(ev.Extensions[events.AttrSignature])
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	if env.PayloadType != publisher.PayloadTypeVerdictDigest || len(env.Signatures) != 1 || env.Signatures[0].KeyID != s.PublicKey() {
		t.Fatalf("envelope %s", raw)
	}
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	digest, _ := events.VerdictDigest(signed.Data)
	if "sha256:"+hex.EncodeToString(payload) != digest {
		t.Errorf("payload %x, want the verdict's digest %s", payload, digest)
	}
	pub, err := nkeys.Decode(nkeys.PrefixByteServer, []byte(env.Signatures[0].KeyID))
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	pae := fmt.Sprintf("DSSEv1 %d %s %d %s", len(env.PayloadType), env.PayloadType, len(payload), payload)
	if !ed25519.Verify(ed25519.PublicKey(pub), []byte(pae), sig) {
		t.Error("the signature does not verify as DSSE v1 over the payload")
	}
}

func TestSignRefusesNonVerdicts(t *testing.T) {
	names := events.Names{}
	inv, err := names.NewInvocation(events.Meta{ID: "e1", Source: "agents/a"}, events.Invocation{AgentID: "a", ToolID: "crm.lookup"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSigner(t).Sign(inv); !errors.Is(err, publisher.ErrNotVerdict) {
		t.Errorf("signing an invocation: error %v, want ErrNotVerdict", err)
	}
	v := schemaMsg(t, names, "e1", "")
	v.Data = v.Data[:len(v.Data)-1]
	if _, err := newSigner(t).Sign(v); !errors.Is(err, publisher.ErrNotVerdict) {
		t.Errorf("signing a truncated verdict: error %v, want ErrNotVerdict", err)
	}
}
