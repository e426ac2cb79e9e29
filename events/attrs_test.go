package events

import (
	"net/url"
	"strconv"
	"testing"
)

func TestAttrSet(t *testing.T) {
	var a attrSet
	a.set("id", "e-1")
	for i := 0; i < 3*extIndexAfter; i++ {
		a.set("x"+strconv.Itoa(i), strconv.Itoa(i))
	}
	a.set("x3", "three")
	if v, ok := a.get("id"); !ok || v != "e-1" {
		t.Errorf("id = %q, %v", v, ok)
	}
	if _, ok := a.get("source"); ok {
		t.Error("source set")
	}
	if v, ok := a.get("x3"); !ok || v != "three" {
		t.Errorf("x3 = %q, %v", v, ok)
	}
	if v, ok := a.get("x40"); !ok || v != "40" {
		t.Errorf("x40 = %q, %v", v, ok)
	}
	if _, ok := a.get("x99"); ok {
		t.Error("x99 set")
	}
	if len(a.ext) != 3*extIndexAfter || a.index == nil {
		t.Errorf("%d extensions, index %v", len(a.ext), a.index != nil)
	}
}

// TestPlainPathIsURIReference: url.Parse accepts every string plainPath
// accepts (all strings of up to four characters from an alphabet around the
// edges, and some longer ones).
func TestPlainPathIsURIReference(t *testing.T) {
	alphabet := []string{"a", "Z", "0", "-", ".", "_", "~", "/", ":", "%", "%2", "?", "#", "@", "[", " ", "\x01", "é", "+"}
	var strs []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		strs = append(strs, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, n-1)
		}
	}
	gen("", 4)
	strs = append(strs, "agents/billing", "a:b", "//host/x", "/a//b", "x/y:z", "a%zz", "https://example.com/a")
	plain := 0
	for _, s := range strs {
		if !plainPath(s) {
			continue
		}
		plain++
		if _, err := url.Parse(s); err != nil {
			t.Errorf("plainPath(%q), but url.Parse: %v", s, err)
		}
	}
	if plain < 1000 || !plainPath("agents/billing") || plainPath("") || plainPath("//h") || plainPath("a:b") {
		t.Errorf("plainPath takes %d strings, or the wrong ones", plain)
	}
}
