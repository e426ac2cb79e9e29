package events

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes of UTF-8, that KeyToken encodes.
// The JSON Schemas cap ids at 128 characters, which fit.
const MaxKeyLen = 512

// keyEscape introduces an escaped byte in a key token.
const keyEscape = '='

// plain reports whether b stands for itself in a key token. Everything else,
// the escape character included, is escaped.
func plain(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '/'
}

const upperHex = "0123456789ABCDEF"

// KeyToken encodes a key (a tool, server or composition id: any non-empty
// UTF-8 text) into one NATS subject token that is also a valid JetStream KV
// key. Each byte of the key's UTF-8 stays as it is if it is one of
// A-Z a-z 0-9 - _ /, and otherwise becomes '=' and two upper-case hex digits
// (quoted-printable style):
//
//	lookup        lookup
//	crm.lookup    crm=2Elookup
//	a=b           a=3Db
//	my tool       my=20tool
//	café          caf=C3=A9
//
// The token never contains '.', '*', '>', whitespace or anything outside
// [-/_=A-Za-z0-9], is never empty, and maps back to exactly one key:
// KeyFromToken accepts only this canonical form.
func KeyToken(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	n := 0
	for i := 0; i < len(key); i++ {
		if !plain(key[i]) {
			n++
		}
	}
	if n == 0 {
		return key, nil
	}
	var b strings.Builder
	b.Grow(len(key) + 2*n)
	writeKeyToken(&b, key)
	return b.String(), nil
}

// writeKeyToken writes the token of a checked key (see KeyToken).
func writeKeyToken(b *strings.Builder, key string) {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(keyEscape)
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrBadKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes, longer than %d", ErrBadKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not UTF-8", ErrBadKey, key)
	}
	return nil
}

// KeyFromToken decodes a token made by KeyToken. It rejects anything KeyToken
// does not produce: an empty token, a byte outside [-/_=A-Za-z0-9], a
// truncated escape, lower-case hex, an escaped byte that needs no escape, and
// bytes that are not UTF-8.
func KeyFromToken(token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: empty token", ErrBadKey)
	}
	if strings.IndexByte(token, keyEscape) < 0 {
		for i := 0; i < len(token); i++ {
			if !plain(token[i]) {
				return "", fmt.Errorf("%w: token %q: byte %q must be escaped", ErrBadKey, token, token[i])
			}
		}
		return token, nil
	}
	out := make([]byte, 0, len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if plain(c) {
			out = append(out, c)
			continue
		}
		if c != keyEscape {
			return "", fmt.Errorf("%w: token %q: byte %q must be escaped", ErrBadKey, token, c)
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("%w: token %q: truncated escape at %d", ErrBadKey, token, i)
		}
		hi, lo := unhexUpper(token[i+1]), unhexUpper(token[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: token %q: escape at %d needs two upper-case hex digits", ErrBadKey, token, i)
		}
		d := byte(hi<<4 | lo)
		if plain(d) {
			return "", fmt.Errorf("%w: token %q: %q is escaped but needs no escape", ErrBadKey, token, d)
		}
		out = append(out, d)
		i += 2
	}
	key := string(out)
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

func unhexUpper(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// KVKey builds a JetStream KV key from one or more keys: each encoded with
// KeyToken, joined by '.', so a key made of several ids (a tool and an
// agent) stays reversible and KV watches can filter by its first parts
// ("crm=2Elookup.>").
//
// It writes the key in one allocation, none for one id that needs no
// escape: the processor builds a key per state record it reads.
func KVKey(keys ...string) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: no keys", ErrBadKey)
	}
	n := len(keys) - 1
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return "", err
		}
		n += len(k)
		for i := 0; i < len(k); i++ {
			if !plain(k[i]) {
				n += 2
			}
		}
	}
	if len(keys) == 1 && n == len(keys[0]) {
		return keys[0], nil
	}
	var b strings.Builder
	b.Grow(n)
	for j, k := range keys {
		if j > 0 {
			b.WriteByte('.')
		}
		writeKeyToken(&b, k)
	}
	return b.String(), nil
}

// ParseKVKey is the inverse of KVKey.
func ParseKVKey(kvKey string) ([]string, error) {
	tokens := strings.Split(kvKey, ".")
	keys := make([]string, len(tokens))
	for i, t := range tokens {
		k, err := KeyFromToken(t)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}
