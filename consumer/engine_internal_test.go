package consumer

import "testing"

// A message held for long keeps every settled sequence above it. Settling
// then must not walk the whole set every time (it made 64 workers four
// times slower than 16): the engine prunes a logarithmic number of times,
// and once the message is gone the next prune forgets them all.
func TestSettledPrunesRarelyBehindAHeldMessage(t *testing.T) {
	e := &Engine{
		keys:           map[string]*keyState{},
		held:           map[uint64]*item{1: {}},
		settled:        map[uint64]struct{}{},
		pruneSettledAt: maxSettled,
	}
	const n = 16 * maxSettled
	prunes, at := 0, e.pruneSettledAt
	for seq := uint64(2); seq < n; seq++ {
		e.markSettledLocked(seq)
		if e.pruneSettledAt != at {
			prunes++
			at = e.pruneSettledAt
		}
		if len(e.settled) > e.pruneSettledAt {
			t.Fatalf("settled holds %d, past its threshold %d", len(e.settled), e.pruneSettledAt)
		}
	}
	if len(e.settled) != n-2 {
		t.Fatalf("settled holds %d sequences, want all %d above the held message", len(e.settled), n-2)
	}
	if prunes > 5 { // thresholds 2^14, 2^15, 2^16, 2^17 from 8192 at n = 2^17
		t.Fatalf("%d prunes over %d settles behind a held message; want a handful", prunes, n)
	}

	delete(e.held, 1)
	for seq := uint64(n); e.pruneSettledAt != maxSettled && seq < 4*n; seq++ {
		e.markSettledLocked(seq)
	}
	if e.pruneSettledAt != maxSettled || len(e.settled) != 0 {
		t.Fatalf("after the held message went: settled holds %d, threshold %d; want the next prune to empty it and the threshold back at %d",
			len(e.settled), e.pruneSettledAt, maxSettled)
	}
}
