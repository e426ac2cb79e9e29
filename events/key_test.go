package events

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

var keyCases = []struct{ key, token string }{
	{"lookup", "lookup"},
	{"crm_lookup-2", "crm_lookup-2"},
	{"github/search_issues", "github/search_issues"},
	{"crm.lookup", "crm=2Elookup"},
	{"a=b", "a=3Db"},
	{"=", "=3D"},
	{"my tool", "my=20tool"},
	{"tab\there", "tab=09here"},
	{"café", "caf=C3=A9"},
	{"*", "=2A"},
	{">", "=3E"},
	{"a.b.*.>", "a=2Eb=2E=2A=2E=3E"},
	{"😀", "=F0=9F=98=80"},
	{"~x", "=7Ex"},
	{"$KV", "=24KV"},
}

func TestKeyToken(t *testing.T) {
	for _, tc := range keyCases {
		got, err := KeyToken(tc.key)
		if err != nil {
			t.Fatalf("KeyToken(%q): %v", tc.key, err)
		}
		if got != tc.token {
			t.Errorf("KeyToken(%q) = %q, want %q", tc.key, got, tc.token)
		}
		back, err := KeyFromToken(got)
		if err != nil || back != tc.key {
			t.Errorf("KeyFromToken(%q) = %q, %v; want %q", got, back, err, tc.key)
		}
	}
}

func TestKeyTokenRefuses(t *testing.T) {
	for _, key := range []string{"", "\xff", strings.Repeat("a", MaxKeyLen+1)} {
		if _, err := KeyToken(key); !errors.Is(err, ErrBadKey) {
			t.Errorf("KeyToken(%q): got %v, want ErrBadKey", key, err)
		}
	}
	if _, err := KeyToken(strings.Repeat("a", MaxKeyLen)); err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v", err)
	}
}

// TestKeyFromTokenRefusesNonCanonical: only what KeyToken writes is
// accepted, so that one key has exactly one token.
func TestKeyFromTokenRefusesNonCanonical(t *testing.T) {
	for _, token := range []string{
		"",           // empty
		"crm.lookup", // '.' must be escaped
		"a b",        // so must space
		"a*", "a>",   // wildcards
		"crm=2elookup", // lower-case hex
		"=41",          // 'A' needs no escape
		"=2F",          // '/' needs no escape
		"abc=2",        // truncated
		"abc=",         // truncated
		"=G1",          // not hex
		"=FF",          // not UTF-8
		"=C3",          // truncated UTF-8
		"café",         // raw non-ASCII
	} {
		if key, err := KeyFromToken(token); !errors.Is(err, ErrBadKey) {
			t.Errorf("KeyFromToken(%q) = %q, %v; want ErrBadKey", token, key, err)
		}
	}
}

func TestKVKey(t *testing.T) {
	kv, err := KVKey("crm.lookup", "agent 7")
	if err != nil {
		t.Fatal(err)
	}
	if want := "crm=2Elookup.agent=207"; kv != want {
		t.Errorf("KVKey = %q, want %q", kv, want)
	}
	parts, err := ParseKVKey(kv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"crm.lookup", "agent 7"}, parts); diff != "" {
		t.Errorf("ParseKVKey (-want +got):\n%s", diff)
	}
	if _, err := KVKey(); !errors.Is(err, ErrBadKey) {
		t.Errorf("KVKey(): %v", err)
	}
	if _, err := KVKey("a", ""); !errors.Is(err, ErrBadKey) {
		t.Errorf(`KVKey("a", ""): %v`, err)
	}
	for _, bad := range []string{"", "a..b", ".a", "a.", "a.b c"} {
		if _, err := ParseKVKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKVKey(%q): %v", bad, err)
		}
	}
}

// What NATS allows: a subject token has no '.', '*', '>' or whitespace and
// is not empty; a JetStream KV key matches nats.go's validKeyRe and does not
// begin or end with '.'.
var (
	subjectTokenRE = regexp.MustCompile(`^[^.*>\s]+$`)
	kvKeyRE        = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)
)

func FuzzKeyToken(f *testing.F) {
	for _, tc := range keyCases {
		f.Add(tc.key)
	}
	f.Add("\x00")
	f.Add("a\u2028b")
	f.Fuzz(func(t *testing.T, key string) {
		tok, err := KeyToken(key)
		if key == "" || !utf8.ValidString(key) || len(key) > MaxKeyLen {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("KeyToken(%q) = %q, %v; want ErrBadKey", key, tok, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("KeyToken(%q): %v", key, err)
		}
		if !subjectTokenRE.MatchString(tok) || !kvKeyRE.MatchString(tok) {
			t.Fatalf("KeyToken(%q) = %q: not a valid subject token and KV key", key, tok)
		}
		back, err := KeyFromToken(tok)
		if err != nil || back != key {
			t.Fatalf("KeyFromToken(KeyToken(%q)) = %q, %v", key, back, err)
		}
		kv, err := KVKey(key, key)
		if err != nil || !kvKeyRE.MatchString(kv) || strings.HasPrefix(kv, ".") || strings.HasSuffix(kv, ".") {
			t.Fatalf("KVKey(%q, %q) = %q, %v", key, key, kv, err)
		}
		parts, err := ParseKVKey(kv)
		if err != nil || len(parts) != 2 || parts[0] != key || parts[1] != key {
			t.Fatalf("ParseKVKey(%q) = %q, %v", kv, parts, err)
		}
		// Decoding any string as a token either fails or is canonical.
		if k, err := KeyFromToken(key); err == nil {
			if again, _ := KeyToken(k); again != key {
				t.Fatalf("KeyFromToken(%q) = %q, whose token is %q", key, k, again)
			}
		}
	})
}

// TestKVKeyIsJoinedTokens: KVKey, written in one pass, is its ids'
// KeyTokens joined by '.', and fails where KeyToken fails.
func TestKVKeyIsJoinedTokens(t *testing.T) {
	ids := []string{"crm.lookup", "agent-7", "a", "café", "a=b", "my tool", "x/y_z-1", "", strings.Repeat("é", 300), "\xff", strings.Repeat("a", MaxKeyLen)}
	for _, a := range ids {
		for _, b := range append([]string{"-"}, ids...) {
			keys := []string{a}
			if b != "-" {
				keys = append(keys, b)
			}
			got, err := KVKey(keys...)
			var want []string
			var wantErr error
			for _, k := range keys {
				tok, err := KeyToken(k)
				if err != nil && wantErr == nil {
					wantErr = err
				}
				want = append(want, tok)
			}
			if (err != nil) != (wantErr != nil) || err == nil && got != strings.Join(want, ".") {
				t.Errorf("KVKey(%q) = %q, %v; want %q, %v", keys, got, err, strings.Join(want, "."), wantErr)
			}
		}
	}
}
