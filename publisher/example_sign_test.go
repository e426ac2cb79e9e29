package publisher_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/toolsentry/toolsentry/events"
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/publisher"
)

// A chain of two verdicts about one composition: the second names the
// first's digest, both are signed, and each verifies under the public key.
func ExampleSigner() {
	seed, public, _ := publisher.GenerateSigningKey() // `toolsentry keygen`
	signer, _ := publisher.NewSigner(seed)            // `serve --signing-key`
	names := events.Names{}
	at := time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC)
	head := "" // the core keeps one head per events.ChainKey
	for _, input := range []string{"e1", "e2"} {
		msg, err := names.NewCompositionVerdict(events.CompositionVerdict{
			Verdict: guards.CompositionMeetsQuality, Directive: "PROCEED: Composed quality 96.00% meets 90.00%.",
			ManifestDigest: strings.Repeat("cd", 32), CompositionID: "checkout", ComposedQuality: 0.96, GuardVersion: "1", InputEventID: input,
			InputSubject: "toolsentry.telemetry.workflow.checkout", InputSequence: 1,
		}, at, events.WithPrevious(head))
		if err != nil {
			fmt.Println(err)
			return
		}
		signed, _ := signer.Sign(msg)
		v, err := publisher.VerifyVerdict(signed.Data, []string{public})
		fmt.Println(events.ChainKey(events.KindCompositionVerdict, "checkout"), err == nil, v.Previous == head)
		head = v.Digest
	}
	// Output:
	// composition/checkout true true
	// composition/checkout true true
}
