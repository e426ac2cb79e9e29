package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

// keygenFiles runs `toolsentry keygen` into a temporary directory and
// returns the seed file, the public key file and the public key.
func keygenFiles(t *testing.T) (seedFile, pubFile, public string) {
	t.Helper()
	seedFile = filepath.Join(t.TempDir(), "signing.nk")
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "keygen", "--out", seedFile)
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	return seedFile, seedFile + ".pub", strings.TrimSpace(out)
}

func TestKeygen(t *testing.T) {
	seedFile, pubFile, public := keygenFiles(t)
	st, err := os.Stat(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("seed file mode %v, want 0600", st.Mode().Perm())
	}
	pub, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(pub)) != public || !strings.HasPrefix(public, "N") {
		t.Errorf("public key file %q, printed %q: want the same server key (N...)", pub, public)
	}
	s, err := publisher.LoadSigner(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	if s.PublicKey() != public {
		t.Errorf("the seed's public key is %s, keygen printed %s", s.PublicKey(), public)
	}

	// No silent overwrite; --force replaces both files.
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "keygen", "--out", seedFile)
	if code != 1 || !strings.Contains(errOut, "exists") {
		t.Errorf("keygen over an existing key: exit %d, %q", code, errOut)
	}
	if again, _ := publisher.LoadSigner(seedFile); again == nil || again.PublicKey() != public {
		t.Error("a refused keygen changed the key")
	}
	if err := os.Chmod(seedFile, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "keygen", "--out", seedFile, "--force")
	if code != 0 || strings.TrimSpace(out) == public {
		t.Fatalf("keygen --force: exit %d, %q, %s", code, out, errOut)
	}
	if st, _ := os.Stat(seedFile); st.Mode().Perm() != 0o600 {
		t.Errorf("after --force the seed file mode is %v, want 0600", st.Mode().Perm())
	}

	// The environment names the file, as for serve.
	envFile := filepath.Join(t.TempDir(), "env.nk")
	t.Setenv(envSigningKey, envFile)
	if _, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "keygen"); code != 0 {
		t.Fatalf("keygen with %s: exit %d: %s", envSigningKey, code, errOut)
	}
	if _, err := publisher.LoadSigner(envFile); err != nil {
		t.Error(err)
	}
}

// verdictChains builds verdicts as the core does: each links to the digest
// of the previous verdict of its chain, and is signed.
type verdictChains struct {
	t      *testing.T
	signer *publisher.Signer
	heads  map[string]string
	n      int
}

func newVerdictChains(t *testing.T, seedFile string) *verdictChains {
	t.Helper()
	c := &verdictChains{t: t, heads: map[string]string{}}
	if seedFile != "" {
		s, err := publisher.LoadSigner(seedFile)
		if err != nil {
			t.Fatal(err)
		}
		c.signer = s
	}
	return c
}

func (c *verdictChains) schema(tool string) events.Message {
	c.t.Helper()
	c.n++
	chain := events.ChainKey(events.KindSchemaVerdict, tool)
	v := events.SchemaVerdict{
		Verdict: guards.SchemaMatch, Directive: "PROCEED: Schema matches baseline.",
		ManifestDigest: strings.Repeat("ab", 32), ToolID: tool, AgentID: "billing-7", Version: "2",
		BaselineFingerprint: "sha256:" + strings.Repeat("a", 64), CurrentFingerprint: "sha256:" + strings.Repeat("a", 64),
		Changes: json.RawMessage(`[]`), Affected: json.RawMessage(`[]`), Migration: json.RawMessage(`{"blocked":[],"steps":[]}`),
		GuardVersion: "test", InputEventID: fmt.Sprintf("in-%d", c.n), InputSubject: "toolsentry.telemetry.invocation.x", InputSequence: uint64(c.n),
	}
	m, err := events.Names{}.NewSchemaVerdict(v, verdictTime, events.WithPrevious(c.heads[chain]))
	if err != nil {
		c.t.Fatal(err)
	}
	return c.finish(chain, m)
}

func (c *verdictChains) composition(id string) events.Message {
	c.t.Helper()
	c.n++
	chain := events.ChainKey(events.KindCompositionVerdict, id)
	m, err := events.Names{}.NewCompositionVerdict(events.CompositionVerdict{
		Verdict: guards.CompositionDegraded, Directive: "HALT: Composed quality 77.38% < requirement 90.00%.",
		ManifestDigest: strings.Repeat("cd", 32), CompositionID: id, ComposedQuality: 0.7738,
		GuardVersion: "test", InputEventID: fmt.Sprintf("in-%d", c.n), InputSubject: "toolsentry.telemetry.workflow.x", InputSequence: uint64(c.n),
	}, verdictTime, events.WithPrevious(c.heads[chain]))
	if err != nil {
		c.t.Fatal(err)
	}
	return c.finish(chain, m)
}

func (c *verdictChains) finish(chain string, m events.Message) events.Message {
	c.t.Helper()
	d, err := events.VerdictDigest(m.Data)
	if err != nil {
		c.t.Fatal(err)
	}
	c.heads[chain] = d
	if c.signer == nil {
		return m
	}
	if m, err = c.signer.Sign(m); err != nil {
		c.t.Fatal(err)
	}
	return m
}

// publishVerdicts publishes msgs in order to the verdict stream.
func publishVerdicts(t *testing.T, js jetstream.JetStream, msgs ...events.Message) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	for _, m := range msgs {
		publishMsg(t, ctx, js, m)
	}
}

// verifyRun runs `toolsentry verify --json` and returns its report.
func verifyRun(t *testing.T, url string, args ...string) (publisher.AuditReport, int) {
	t.Helper()
	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"verify", "--json", "--nats-url", url}, args...)...)
	var r publisher.AuditReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify: exit %d, stderr %s, output not a JSON report: %v\n%s", code, errOut, err, out)
	}
	return r, code
}

func problemList(r publisher.AuditReport) string {
	var b strings.Builder
	for _, p := range r.Problems {
		b.WriteString(p.Describe() + "\n")
	}
	return b.String()
}

// wantProblems checks the exit status and the (seq, kind) of every problem.
func wantProblems(t *testing.T, r publisher.AuditReport, code int, want ...string) {
	t.Helper()
	var got []string
	for _, p := range r.Problems {
		got = append(got, fmt.Sprintf("%d %s", p.Seq, p.Kind))
	}
	wantCode := 0
	if len(want) > 0 {
		wantCode = 1
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") || code != wantCode {
		t.Errorf("exit %d, problems [%s], want exit %d and [%s]\n%s", code, strings.Join(got, "; "), wantCode, strings.Join(want, "; "), problemList(r))
	}
}

// TestVerifyCleanChain: chains built with the real constructors, signed
// and published to a real server, verify clean, in JSON and for people.
func TestVerifyCleanChain(t *testing.T) {
	srv := startProvisioned(t, "")
	seedFile, pubFile, public := keygenFiles(t)
	c := newVerdictChains(t, seedFile)
	publishVerdicts(t, srv.js, c.schema("crm.lookup"), c.composition("crm.lookup"), c.schema("crm.lookup"),
		c.schema("billing"), c.composition("crm.lookup"), c.schema("crm.lookup"))

	r, code := verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code)
	if r.Verdicts != 6 || r.Chains != 3 || r.Signed != 6 || r.Keys[public] != 6 || r.FirstSeq != 1 || r.LastSeq != 6 {
		t.Errorf("report %+v", r)
	}
	if h := r.Heads; len(h) != 3 || h["schema/crm.lookup"].Seq != 6 || h["composition/crm.lookup"].Seq != 5 || h["schema/billing"].Seq != 4 ||
		h["schema/crm.lookup"].Digest != c.heads["schema/crm.lookup"] {
		t.Errorf("heads %+v", h)
	}

	out, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "verify", "--pubkey", public, "--nats-url", srv.url)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	for _, want := range []string{"6 verdicts, seq 1-6, in 3 chains; 6 with a valid signature", "signed by " + public + ": 6 (trusted)", "OK: every verdict is signed by a trusted key"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The key from the environment.
	t.Setenv(envPubkey, public)
	r, code = verifyRun(t, srv.url)
	wantProblems(t, r, code)
}

// TestVerifyEditedAndRepublished: a verdict changed (HALT turned into
// PROCEED) and re-published under a new message id is caught as tampered
// by its sequence; the chain it was copied from stays intact.
func TestVerifyEditedAndRepublished(t *testing.T) {
	srv := startProvisioned(t, "")
	seedFile, pubFile, _ := keygenFiles(t)
	c := newVerdictChains(t, seedFile)
	v1, v2, v3 := c.composition("checkout"), c.composition("checkout"), c.composition("checkout")
	publishVerdicts(t, srv.js, v1, v2, v3)

	edited := v2
	edited.Data = bytes.Replace(v2.Data, []byte(`"HALT: Composed`), []byte(`"PROCEED: Composed`), 1)
	edited.ID = "edited-copy" // a new Nats-Msg-Id, so the stream stores it
	publishVerdicts(t, srv.js, edited)

	r, code := verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code, "4 tampered")
	if p := r.Problems[0]; p.Chain != "composition/checkout" || !strings.Contains(p.Reason, "changed after it was signed") {
		t.Errorf("problem %+v", p)
	}
}

// TestVerifyDeletedVerdict: a verdict removed from the stream (as `nats
// stream rmm` does) breaks its successor's link, and leaves a gap.
func TestVerifyDeletedVerdict(t *testing.T) {
	srv := startProvisioned(t, "")
	seedFile, pubFile, _ := keygenFiles(t)
	c := newVerdictChains(t, seedFile)
	publishVerdicts(t, srv.js, c.schema("crm.lookup"), c.schema("billing"), c.schema("crm.lookup"), c.schema("crm.lookup"), c.schema("billing"))
	stream, err := srv.js.Stream(testCtx(t, cmdTimeout), "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(testCtx(t, cmdTimeout), 3); err != nil {
		t.Fatal(err)
	}
	r, code := verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code, "3 deleted", "4 missing")
	if p := r.Problems[1]; p.Chain != "schema/crm.lookup" || !strings.Contains(p.Reason, "is not in the stream") {
		t.Errorf("problem %+v", p)
	}

	// The newest verdict of a chain deleted: no successor breaks, but the
	// stream's sequences show it.
	if err := stream.DeleteMsg(testCtx(t, cmdTimeout), 5); err != nil {
		t.Fatal(err)
	}
	r, code = verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code, "3 deleted", "4 missing", "5 deleted")
}

// TestVerifyUnsignedAndWrongKey: an unsigned verdict is named; so is every
// verdict when the trusted key is another one.
func TestVerifyUnsignedAndWrongKey(t *testing.T) {
	srv := startProvisioned(t, "")
	seedFile, pubFile, public := keygenFiles(t)
	_, otherPub, _ := keygenFiles(t)
	c := newVerdictChains(t, seedFile)
	v1, v2 := c.schema("crm.lookup"), c.schema("crm.lookup")
	unsigned := newVerdictChains(t, "")
	unsigned.n = 100
	u := unsigned.schema("billing")
	publishVerdicts(t, srv.js, v1, u, v2)

	r, code := verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code, "2 unsigned")

	r, code = verifyRun(t, srv.url, "--pubkey", otherPub)
	wantProblems(t, r, code, "1 untrusted", "2 unsigned", "3 untrusted")

	// Without --pubkey: the signing keys are listed, unsigned still fails.
	out, _, code := runCtx(testCtx(t, cmdTimeout), "", "verify", "--nats-url", srv.url)
	if code != 1 || !strings.Contains(out, "signed by "+public+": 2 (not checked: pass --pubkey)") || !strings.Contains(out, "FAILED: 1 unsigned") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// TestVerifyWindow: --from-seq and --since anchor each chain at its first
// verdict in the window; the whole stream flags a chain whose beginning
// is gone.
func TestVerifyWindow(t *testing.T) {
	srv := startProvisioned(t, "")
	seedFile, pubFile, _ := keygenFiles(t)
	c := newVerdictChains(t, seedFile)
	publishVerdicts(t, srv.js, c.schema("crm.lookup"), c.schema("crm.lookup"), c.schema("billing"), c.schema("crm.lookup"), c.schema("billing"))

	r, code := verifyRun(t, srv.url, "--pubkey", pubFile, "--from-seq", "2")
	wantProblems(t, r, code)
	if r.Verdicts != 4 || r.FirstSeq != 2 || !r.Anchored {
		t.Errorf("--from-seq 2: report %+v", r)
	}
	r, code = verifyRun(t, srv.url, "--pubkey", pubFile, "--since", "1h")
	wantProblems(t, r, code)
	if r.Verdicts != 5 {
		t.Errorf("--since 1h: %d verdicts, want 5", r.Verdicts)
	}
	r, code = verifyRun(t, srv.url, "--pubkey", pubFile, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	wantProblems(t, r, code)
	if r.Verdicts != 0 {
		t.Errorf("--since the future: %d verdicts", r.Verdicts)
	}

	// The head of the stream purged: the whole-stream audit names the
	// chains' first remaining verdicts and says where the stream starts.
	stream, err := srv.js.Stream(testCtx(t, cmdTimeout), "TOOLSENTRY_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(testCtx(t, cmdTimeout), jetstream.WithPurgeSequence(3)); err != nil {
		t.Fatal(err)
	}
	r, code = verifyRun(t, srv.url, "--pubkey", pubFile)
	wantProblems(t, r, code, "4 missing") // seq 3 begins its chain (billing)
	if !strings.Contains(r.Problems[0].Reason, "--from-seq 3") {
		t.Errorf("reason %q should say where to anchor", r.Problems[0].Reason)
	}
	r, code = verifyRun(t, srv.url, "--pubkey", pubFile, "--from-seq", "3")
	wantProblems(t, r, code)
}

func TestVerifyUsage(t *testing.T) {
	srv := startProvisioned(t, "")
	for _, args := range [][]string{
		{"--since", "1h", "--from-seq", "2"},
		{"--pubkey", "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"},
		{"--pubkey", filepath.Join(t.TempDir(), "absent.pub")},
		{"--since", "yesterday"},
		{"extra"},
	} {
		_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", append([]string{"verify", "--nats-url", srv.url}, args...)...)
		if code != 2 {
			t.Errorf("verify %v: exit %d, %s; want 2", args, code, errOut)
		}
	}
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "verify", "--nats-url", srv.url, "--prefix", "other")
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("unprovisioned prefix: exit %d, %s", code, errOut)
	}
}

func TestServeRefusesABadSigningKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "user.nk")
	// A NATS user seed: a credential, not a verdict signing key.
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCtx(testCtx(t, cmdTimeout), "", "serve", "--signing-key", file, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "")
	if code != 2 || !strings.Contains(errOut, "server key") {
		t.Errorf("exit %d, %s; want 2 and the reason", code, errOut)
	}
}

// TestSigningHelpNamesEveryFlag: keygen's and verify's help document
// every flag, and serve's its --signing-key.
func TestSigningHelpNamesEveryFlag(t *testing.T) {
	for name, flags := range map[string][]string{
		"keygen": {"out", "force"},
		"verify": {"pubkey", "since", "from-seq", "json", "nats-url", "prefix", "nats-creds", "tls-ca"},
		"serve":  {"signing-key"},
	} {
		out, _, code := runCtx(testCtx(t, cmdTimeout), "", name, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		for _, f := range flags {
			if !strings.Contains(out, "--"+f+" ") {
				t.Errorf("%s --help does not document --%s", name, f)
			}
		}
		if !strings.Contains(out, "Example") {
			t.Errorf("%s --help has no example", name)
		}
	}
}
