package publisher_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// TestSignTakesTheDigestGiven: a verdict whose builder already computed
// its digest (Message.Digest, as the core sets it) signs to the same bytes
// as one signed from its body alone, with that digest, not one computed
// again; the signed message has no Digest, so that signing it again reads
// its signature and re-signs it to the same bytes.
func TestSignTakesTheDigestGiven(t *testing.T) {
	s := newSigner(t)
	msg := schemaMsg(t, events.Names{}, "in-1", "")
	plain, err := s.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := events.VerdictDigest(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	given := msg
	given.Digest = digest
	fast, err := s.Sign(given)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain.Data, fast.Data) || fast.ID != plain.ID || fast.Subject != plain.Subject {
		t.Errorf("signed with the digest given:\n%s\nwithout:\n%s", fast.Data, plain.Data)
	}
	if fast.Digest != "" {
		t.Errorf("the signed message keeps Digest %q", fast.Digest)
	}
	again, err := s.Sign(fast)
	if err != nil || !bytes.Equal(again.Data, plain.Data) {
		t.Errorf("signing the signed verdict again: %v\n%s", err, again.Data)
	}

	// The digest given is the one signed: another one (of the right form)
	// makes a signature that does not match the verdict.
	wrong := msg
	wrong.Digest = events.DigestPrefix + strings.Repeat("0", 64)
	signed, err := s.Sign(wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publisher.VerifyVerdict(signed.Data, []string{s.PublicKey()}); !errors.Is(err, publisher.ErrDigestMismatch) {
		t.Errorf("a verdict signed with another digest verifies: %v", err)
	}
	// A Digest that is no digest is not taken: the body's is computed.
	junk := msg
	junk.Digest = "not a digest"
	if signed, err := s.Sign(junk); err != nil || !bytes.Equal(signed.Data, plain.Data) {
		t.Errorf("with a Digest that is no digest: %v\n%s", err, signed.Data)
	}
}
