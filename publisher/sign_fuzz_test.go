package publisher_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/publisher"
)

// FuzzVerifyVerdict: VerifyVerdict never panics on any body; it accepts a
// body only if the key signed exactly that body's digest, and a body it
// accepts signs again to a body it accepts, with the same digest.
func FuzzVerifyVerdict(f *testing.F) {
	t := &testing.T{}
	seed, public, err := publisher.GenerateSigningKey()
	if err != nil {
		f.Fatal(err)
	}
	s, err := publisher.NewSigner(seed)
	if err != nil {
		f.Fatal(err)
	}
	c := newChainBuilder(t, s)
	for _, m := range []events.Message{c.next("crm.lookup", false), c.next("crm.lookup", true), c.next("crm.lookup", false)} {
		f.Add(m.Data)
		f.Add(bytes.Replace(m.Data, []byte(`"HALT`), []byte(`"PROCEED`), 1))
	}
	f.Add([]byte(`{"specversion":"1.0","dssematerial":"e30="}`))
	f.Add([]byte(`{"specversion":"1.0","predecessorhash":"sha256:00"}`))
	subject, _ := events.Names{}.Verdict(events.KindSchemaVerdict, "DRIFT_ON_USED_FIELDS", "crm.lookup")
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := publisher.VerifyVerdict(body, []string{public})
		if err != nil {
			if v.SignedDigest != "" && v.SignedDigest == v.Digest && !errors.Is(err, publisher.ErrUntrustedKey) {
				t.Fatalf("refused (%v) a body whose signed digest is its digest", err)
			}
			return
		}
		if v.KeyID != public || v.Digest != v.SignedDigest {
			t.Fatalf("accepted %+v", v)
		}
		again, err := s.Sign(events.Message{Subject: subject, Data: body})
		if err != nil {
			return // a valid signature on a body that is not a schema verdict of this subject
		}
		w, err := publisher.VerifyVerdict(again.Data, []string{public})
		if err != nil || w.Digest != v.Digest {
			t.Fatalf("re-signed: %+v, %v; want digest %s", w, err, v.Digest)
		}
	})
}
