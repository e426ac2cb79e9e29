package publisher

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/toolsentry/toolsentry/events"
)

// PayloadTypeVerdictDigest is the DSSE payloadType of toolsentry's verdict
// signatures: the payload is the 32 bytes of the verdict's
// events.VerdictDigest. It differs from the CloudEvents verifiability
// extension's own payloadType because the digest does (it covers the
// extension attributes; see events.AttrSignature).
const PayloadTypeVerdictDigest = "https://github.com/toolsentry/toolsentry/verifiability/verdict-digest/v1"

// Signing and verification errors. Match them with errors.Is.
var (
	// ErrBadSigningKey is returned by NewSigner and LoadSigner for a seed
	// that is not an nkeys server seed ("SN..."): toolsentry signs verdicts
	// with server-type keys only (see NewSigner), and by ParsePublicKey for
	// a public key that is not a server key ("N...").
	ErrBadSigningKey = errors.New("not a verdict signing key")

	// ErrNotVerdict is returned by Signer.Sign for a message that is not a
	// valid structured-mode verdict (the events error is wrapped too).
	ErrNotVerdict = errors.New("not a verdict")

	// ErrUnsigned is returned by VerifyVerdict for a verdict without the
	// signature attribute (events.AttrSignature).
	ErrUnsigned = errors.New("verdict is not signed")

	// ErrBadSignature is returned by VerifyVerdict when the signature
	// attribute is not a DSSE envelope of PayloadTypeVerdictDigest, or no
	// signature in it verifies under its keyid: the signature was forged,
	// damaged or replaced.
	ErrBadSignature = errors.New("bad verdict signature")

	// ErrDigestMismatch is returned by VerifyVerdict when a signature
	// verifies but signs another digest than the verdict's: the verdict was
	// changed after it was signed.
	ErrDigestMismatch = errors.New("verdict does not match its signature")

	// ErrUntrustedKey is returned by VerifyVerdict when the verdict is
	// correctly signed, but by none of the trusted keys.
	ErrUntrustedKey = errors.New("verdict signed by an untrusted key")
)

// GenerateSigningKey returns a new ed25519 key pair in the NATS nkeys
// format: the seed ("SN...", secret) and the public key ("N...", the key id
// verifiers trust). See NewSigner for why it is a server-type key.
func GenerateSigningKey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateServer()
	if err != nil {
		return nil, "", fmt.Errorf("creating an ed25519 key pair: %w", err)
	}
	defer kp.Wipe()
	if seed, err = kp.Seed(); err != nil {
		return nil, "", err
	}
	if public, err = kp.PublicKey(); err != nil {
		return nil, "", err
	}
	return slices.Clone(seed), public, nil
}

// ParsePublicKey checks a verdict signing public key ("N..." with a valid
// nkeys checksum) and returns it trimmed of white space.
func ParsePublicKey(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !nkeys.IsValidPublicServerKey(s) {
		return "", fmt.Errorf("%w: %q is not an nkeys server public key (N...)", ErrBadSigningKey, s)
	}
	return s, nil
}

// Signer signs verdict messages with one ed25519 key. It is safe for
// concurrent use.
type Signer struct {
	kp     nkeys.KeyPair
	public string
}

// NewSigner returns a signer for an nkeys seed. contents is a seed file's
// text: the seed on a line of its own (other lines, such as the
// "-----BEGIN ... -----" decoration of creds files, are skipped).
//
// The seed must be a server-type seed ("SN..."): the key identifies the
// toolsentry service that issued a verdict, and must not be a NATS
// credential. A user seed ("SU...") authenticates clients to NATS and an
// account or operator seed ("SA...", "SO...") issues NATS JWTs; a verdict
// key of such a type could be reused (or mistaken) as a login or an issuer,
// and a NATS credential file passed as --signing-key would silently become
// the audit key. nats-server never reads a server seed from configuration
// (it makes its own at start), so a server-type key is a credential
// nowhere, and the two roles cannot be confused: each side refuses the
// other's keys.
func NewSigner(contents []byte) (*Signer, error) {
	var seed []byte
	for line := range bytes.SplitSeq(contents, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] == 'S' {
			seed = line
			break
		}
	}
	if seed == nil {
		return nil, fmt.Errorf("%w: no nkeys seed (a line starting with SN) found", ErrBadSigningKey)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSigningKey, err)
	}
	public, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSigningKey, err)
	}
	if nkeys.Prefix(public) != nkeys.PrefixByteServer {
		kp.Wipe()
		return nil, fmt.Errorf("%w: the seed is a %s key; verdicts are signed with a server key (SN...): create one with `toolsentry keygen`", ErrBadSigningKey, nkeys.Prefix(public))
	}
	return &Signer{kp: kp, public: public}, nil
}

// LoadSigner reads a seed file (see NewSigner).
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}
	s, err := NewSigner(b)
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// PublicKey is the signer's public key ("N..."): the keyid of its
// signatures, and what `toolsentry verify --pubkey` trusts.
func (s *Signer) PublicKey() string { return s.public }

// Sign returns msg with the signature attribute (events.AttrSignature) set
// to a DSSE envelope that signs the verdict's events.VerdictDigest with the
// signer's key, under keyid PublicKey(). The digest covers every other
// attribute, the chain link (events.AttrPrevious) included, and the data;
// adding the signature does not change it. id, subject and headers stay.
//
// The attribute is added as the structured-mode object's last member, the
// rest of the body is kept byte for byte: a verdict as the constructors
// write it signs with one parse and one ed25519 signature. A message that
// is already signed is decoded and re-encoded without its old signature
// first (events.Names.Encode), and then signed. ed25519 is deterministic:
// the same verdict signs to the same bytes, so a verdict republished for a
// redelivered input is still dropped by the stream's duplicate window.
//
// The digest is msg.Digest when that is set (a valid digest: the core sets
// it on the unsigned verdicts it builds, having computed it for the chain),
// else computed from the body; the signed message has no Digest, so that
// signing it again reads its signature.
func (s *Signer) Sign(msg events.Message) (events.Message, error) {
	names, err := verdictNames(msg.Subject)
	if err != nil {
		return events.Message{}, err
	}
	digest, signed := msg.Digest, false
	if !events.ValidDigest(digest) {
		link, err := events.ReadChainLink(msg.Data)
		if err != nil {
			return events.Message{}, fmt.Errorf("%w: %s: %w", ErrNotVerdict, msg.ID, err)
		}
		digest, signed = link.Digest, link.Signature != ""
	}
	body := bytes.TrimRight(msg.Data, " \t\r\n")
	if signed || !bytes.HasSuffix(body, []byte("}")) {
		if msg, err = reencodeUnsigned(names, msg); err != nil {
			return events.Message{}, err
		}
		body = msg.Data
	}
	material, err := s.envelope(digest)
	if err != nil {
		return events.Message{}, err
	}
	out := make([]byte, 0, len(body)+len(events.AttrSignature)+len(material)+6)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"`...)
	out = append(out, events.AttrSignature...)
	out = append(out, `":"`...)
	out = append(out, material...) // Base64: nothing to escape
	out = append(out, `"}`...)
	msg.Data, msg.Digest = out, ""
	return msg, nil
}

// verdictNames returns the names of a verdict subject's prefix.
func verdictNames(subject string) (events.Names, error) {
	prefix, _, _ := strings.Cut(subject, ".")
	names, err := events.NewNames(prefix)
	if err != nil {
		return events.Names{}, fmt.Errorf("%w: subject %q: %w", ErrNotVerdict, subject, err)
	}
	addr, err := names.ParseSubject(subject)
	if err != nil {
		return events.Names{}, fmt.Errorf("%w: %w", ErrNotVerdict, err)
	}
	if addr.Class != events.ClassVerdicts {
		return events.Names{}, fmt.Errorf("%w: subject %q is not a verdict subject", ErrNotVerdict, subject)
	}
	return names, nil
}

// reencodeUnsigned decodes a verdict and encodes it again without its
// signature attribute.
func reencodeUnsigned(names events.Names, msg events.Message) (events.Message, error) {
	ev, err := names.Decode(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		return events.Message{}, fmt.Errorf("%w: %w", ErrNotVerdict, err)
	}
	delete(ev.Extensions, events.AttrSignature)
	out, err := names.Encode(ev)
	if err != nil {
		return events.Message{}, fmt.Errorf("%w: re-encoding %s: %w", ErrNotVerdict, msg.ID, err)
	}
	return out, nil
}

// dsseEnvelope is a DSSE v1.0.2 JSON envelope.
type dsseEnvelope struct {
	PayloadType string          `json:"payloadType"`
	Payload     string          `json:"payload"`
	Signatures  []dsseSignature `json:"signatures"`
}

type dsseSignature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// pae is DSSE's pre-authentication encoding, what a signature signs:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func pae(payloadType string, body []byte) []byte {
	b := make([]byte, 0, 32+len(payloadType)+len(body))
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ' ')
	return append(b, body...)
}

// envelope returns the signature attribute's value for a digest: the DSSE
// envelope, as JSON in a fixed member order, in standard Base64.
func (s *Signer) envelope(digest string) (string, error) {
	raw, err := digestBytes(digest)
	if err != nil {
		return "", err
	}
	sig, err := s.kp.Sign(pae(PayloadTypeVerdictDigest, raw))
	if err != nil {
		return "", fmt.Errorf("signing verdict: %w", err)
	}
	env, err := json.Marshal(dsseEnvelope{
		PayloadType: PayloadTypeVerdictDigest,
		Payload:     base64.StdEncoding.EncodeToString(raw),
		Signatures:  []dsseSignature{{KeyID: s.public, Sig: base64.StdEncoding.EncodeToString(sig)}},
	})
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(env), nil
}

func digestBytes(digest string) ([]byte, error) {
	if !events.ValidDigest(digest) {
		return nil, fmt.Errorf("%w: digest %q", ErrBadSignature, digest)
	}
	return hex.DecodeString(strings.TrimPrefix(digest, events.DigestPrefix))
}

// Verification is what VerifyVerdict found, also when it returns an error
// (as far as it got).
type Verification struct {
	// Digest is the verdict's events.VerdictDigest, computed from its
	// content.
	Digest string
	// Previous is its chain link (events.AttrPrevious), "" when absent.
	Previous string
	// KeyID is the public key whose signature verified ("" if none did).
	KeyID string
	// SignedDigest is the digest that signature signs; it differs from
	// Digest exactly when the error is ErrDigestMismatch.
	SignedDigest string
}

// VerifyVerdict checks the signature of a structured-mode verdict body
// against trusted public keys ("N..."). With no trusted keys, any key's
// valid signature is accepted and named in KeyID: the caller decides about
// it. Errors: ErrUnsigned, ErrBadSignature, ErrDigestMismatch,
// ErrUntrustedKey, or the events error of a body that is not a
// structured-mode CloudEvent.
//
// A signature verifies when its keyid is an nkeys server public key, the
// ed25519 signature over the DSSE pre-authentication encoding of the
// payload verifies under that key, and the payload is 32 bytes. An
// envelope may hold several signatures; a trusted one that verifies is
// preferred.
func VerifyVerdict(data []byte, trusted []string) (Verification, error) {
	link, err := events.ReadChainLink(data)
	if err != nil {
		return Verification{}, err
	}
	v := Verification{Digest: link.Digest, Previous: link.Previous}
	if link.Signature == "" {
		return v, ErrUnsigned
	}
	raw, err := decodeBase64(link.Signature)
	if err != nil {
		return v, fmt.Errorf("%w: attribute %s is not Base64: %v", ErrBadSignature, events.AttrSignature, err)
	}
	var env dsseEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return v, fmt.Errorf("%w: attribute %s is not a DSSE envelope: %v", ErrBadSignature, events.AttrSignature, err)
	}
	if env.PayloadType != PayloadTypeVerdictDigest {
		return v, fmt.Errorf("%w: DSSE payloadType %q, want %q", ErrBadSignature, env.PayloadType, PayloadTypeVerdictDigest)
	}
	payload, err := decodeBase64(env.Payload)
	if err != nil || len(payload) != sha256.Size {
		return v, fmt.Errorf("%w: DSSE payload is not a Base64 SHA-256 digest", ErrBadSignature)
	}
	msg := pae(env.PayloadType, payload)
	var valid []string
	for _, s := range env.Signatures {
		if !nkeys.IsValidPublicServerKey(s.KeyID) {
			continue
		}
		sig, err := decodeBase64(s.Sig)
		if err != nil {
			continue
		}
		kp, err := nkeys.FromPublicKey(s.KeyID)
		if err != nil || kp.Verify(msg, sig) != nil {
			continue
		}
		valid = append(valid, s.KeyID)
	}
	if len(valid) == 0 {
		return v, fmt.Errorf("%w: no signature verifies under its keyid", ErrBadSignature)
	}
	v.KeyID = valid[0]
	if len(trusted) > 0 {
		v.KeyID = ""
		for _, k := range valid {
			if slices.Contains(trusted, k) {
				v.KeyID = k
				break
			}
		}
	}
	v.SignedDigest = events.DigestPrefix + hex.EncodeToString(payload)
	if v.SignedDigest != v.Digest {
		if v.KeyID == "" {
			v.KeyID = valid[0]
		}
		return v, fmt.Errorf("%w: signed %s, the verdict's digest is %s", ErrDigestMismatch, v.SignedDigest, v.Digest)
	}
	if v.KeyID == "" {
		v.KeyID = valid[0]
		return v, fmt.Errorf("%w: %s", ErrUntrustedKey, strings.Join(valid, ", "))
	}
	return v, nil
}

// decodeBase64 accepts standard and URL-safe Base64, padded or not, as DSSE
// asks of verifiers.
func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}
