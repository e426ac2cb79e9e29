package consumer

import (
	"fmt"

	"github.com/toolsentry/toolsentry/events"
)

// Signer signs a verdict message just before the processor publishes it
// (publisher.Signer does: it adds the signature attribute and keeps the id
// and subject). It must be deterministic, so that a verdict republished
// for a redelivered input has the same bytes, and safe for concurrent use.
// The verdicts come with the digest the core computed for the chain
// (events.Message.Digest), which publisher.Signer signs without computing
// it again.
type Signer interface {
	Sign(msg events.Message) (events.Message, error)
}

// sign returns the verdict signed with ProcessorOptions.Signer, or as it is
// without one. A verdict that cannot be signed is not published unsigned:
// the error fails the input (retried, then dead-lettered).
func (p *Processor) sign(v events.Message) (events.Message, error) {
	if p.opts.Signer == nil {
		return v, nil
	}
	signed, err := p.opts.Signer.Sign(v)
	if err != nil {
		return events.Message{}, fmt.Errorf("signing verdict %s: %w", v.ID, err)
	}
	return signed, nil
}
