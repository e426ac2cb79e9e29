package engine

import "testing"

// TestViewApplyKeepsNewerRevision checks the rule that lets a handler read
// its own writes: a watch update older than what the view holds for a key
// is ignored, a newer one replaces it, and tombstones hide the value.
func TestViewApplyKeepsNewerRevision(t *testing.T) {
	v := &View{entries: make(map[string]viewEntry)}
	v.apply("k", []byte("own"), 5, false, false) // the handler's own write
	v.apply("k", []byte("old"), 3, false, true)  // the watch catching up
	if e, ok := v.Get("k"); !ok || string(e.Value) != "own" || e.Revision != 5 {
		t.Fatalf("after an older watch update: %+v, %v; want own at 5", e, ok)
	}
	v.apply("k", []byte("own"), 5, false, true) // the watch delivers the write itself
	v.apply("k", []byte("theirs"), 7, false, true)
	if e, ok := v.Get("k"); !ok || string(e.Value) != "theirs" || e.Revision != 7 {
		t.Fatalf("after a newer watch update: %+v, %v; want theirs at 7", e, ok)
	}
	v.apply("k", nil, 8, true, true)
	if e, ok := v.Get("k"); ok {
		t.Fatalf("after a delete: %+v, want not found", e)
	}
	if v.watchRev != 8 {
		t.Errorf("watch revision = %d, want 8", v.watchRev)
	}
}
