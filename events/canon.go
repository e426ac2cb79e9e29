package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/toolsentry/toolsentry/guards"
)

// readChainLinkFast is ReadChainLink in one pass over the body, for a
// verdict as toolsentry writes it: the canonical form (RFC 8785) is written
// while the body is checked, and the chain and signature attributes are
// picked up on the way. It reports false, and ReadChainLink takes its
// general path, for anything else: a body that is not JSON or not an
// object, or that lacks specversion, names a member twice, has a number
// literal longer than maxNumberLen or parseJSON's other refusals, an
// AttrPrevious that is not a string or null, or what the fast writer leaves
// to jcs.Transform (see canonicalize). What it accepts, parseJSON accepts;
// FuzzCanonicalize and TestReadChainLinkFast hold both to that and to the
// general path's results.
func readChainLinkFast(data []byte) (ChainLink, bool) {
	c := canonPool.Get().(*canonWriter)
	defer c.release()
	c.in, c.skip, c.top = data, AttrSignature, true
	if !c.topObject() || !c.sawSpec {
		return ChainLink{}, false
	}
	var link ChainLink
	var ok bool
	if c.previous != nil {
		if link.Previous, ok = rawString(c.previous, true); !ok {
			return ChainLink{}, false
		}
	}
	if c.signature != nil {
		if link.Signature, ok = rawString(c.signature, false); !ok {
			return ChainLink{}, false
		}
	}
	sum := sha256.Sum256(c.out)
	link.Digest = DigestPrefix + hex.EncodeToString(sum[:])
	return link, true
}

// rawString returns the string that a JSON value (checked by the writer)
// holds: "" for null and, unless strict, for any other value that is not a
// string; a strict non-string is refused.
func rawString(v []byte, strict bool) (string, bool) {
	if v[0] != '"' {
		return "", !strict || string(v) == "null"
	}
	if slices.Index(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	s, err := parseJSON(v)
	if err != nil {
		return "", false
	}
	return strings.Clone(s.(string)), true
}

// canonicalize returns the RFC 8785 (JCS) form of the JSON object in b,
// byte for byte what jcs.Transform writes, without the top-level member
// named skip ("" skips nothing): VerdictDigest's canonical form, computed in
// one pass over the body instead of jcs.Transform's string building.
//
// b must be JSON that parseJSON accepts (ReadChainLink checks that first).
// A fast writer handles what verdicts hold; for anything else (escaped
// UTF-16 surrogates, which jcs decodes its own way, numbers beyond float64,
// nesting deeper than canonMaxDepth) canonicalize falls back to
// jcs.Transform, over b itself or, with a member to skip, over b re-encoded
// without it, as ReadChainLink always did. FuzzCanonicalize holds both paths
// to jcs.Transform.
func canonicalize(b []byte, skip string) ([]byte, error) {
	c := canonPool.Get().(*canonWriter)
	defer c.release()
	c.in, c.skip = b, skip
	if c.topObject() {
		return slices.Clone(c.out), nil
	}
	if skip == "" {
		return jcs.Transform(b)
	}
	v, err := parseJSON(b)
	if err != nil {
		return nil, err
	}
	obj, _ := v.(map[string]any)
	delete(obj, skip)
	if b, err = marshalJSON(obj); err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// canonMaxDepth bounds the nesting the fast writer follows; deeper
// documents go to jcs.Transform.
const canonMaxDepth = 256

// canonWriter writes the canonical form of in to out. Its methods report
// false for input outside what it handles, leaving out unusable.
type canonWriter struct {
	in      []byte
	i       int
	skip    string // the top-level member to leave out
	skipped bool
	depth   int
	out     []byte

	// With top, the top-level object's specversion, AttrPrevious and
	// AttrSignature members are noted: their values' JSON text.
	top                 bool
	sawSpec             bool
	previous, signature []byte

	// members is a stack of the members of the objects being written,
	// their keys in keys.
	members []canonMember
	keys    []byte
	// tmp holds an object's members while out receives them in order,
	// order says which (indexes of its members, sorted).
	tmp   []byte
	order []int32
}

// canonPool keeps writers' buffers between verdicts.
var canonPool = sync.Pool{New: func() any { return &canonWriter{out: make([]byte, 0, 2048)} }}

// canonPoolMax is the largest buffer a pooled writer keeps: the writer of
// an unusually large body is left to the garbage collector.
const canonPoolMax = 64 << 10

// release returns c to the pool, holding no reference to a document.
func (c *canonWriter) release() {
	if cap(c.out) > canonPoolMax || cap(c.tmp) > canonPoolMax || cap(c.keys) > canonPoolMax {
		return
	}
	*c = canonWriter{out: c.out[:0], members: c.members[:0], keys: c.keys[:0], tmp: c.tmp[:0], order: c.order[:0]}
	canonPool.Put(c)
}

// canonMember is one object member written to out: where its decoded
// name is (in keys when it had escapes, else in in) and where its
// canonical text is.
type canonMember struct {
	escaped          bool
	keyStart, keyEnd int
	start, end       int
	// prefix is the name's first 8 bytes, big-endian, zero-padded; byteOrder
	// says that none of them is 0xEE or above, where byte order and UTF-16
	// order part (U+E000-U+FFFF against characters beyond U+FFFF).
	prefix    uint64
	byteOrder bool
}

// key returns m's decoded name.
func (c *canonWriter) key(m canonMember) []byte {
	if m.escaped {
		return c.keys[m.keyStart:m.keyEnd]
	}
	return c.in[m.keyStart:m.keyEnd]
}

// compare orders members as RFC 8785 does: by the UTF-16 code units of
// their names. Names that differ in their first 8 bytes, below 0xEE, are
// in byte order, which their prefixes give at once.
func (c *canonWriter) compare(a, b canonMember) int {
	if a.prefix != b.prefix && a.byteOrder && b.byteOrder {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	return compareUTF16(c.key(a), c.key(b))
}

// setPrefix fills m's prefix and byteOrder from its name.
func (c *canonWriter) setPrefix(m *canonMember) {
	k := c.key(*m)
	if len(k) >= 8 {
		m.prefix = binary.BigEndian.Uint64(k)
	} else {
		var p [8]byte
		copy(p[:], k)
		m.prefix = binary.BigEndian.Uint64(p[:])
	}
	m.byteOrder = true
	if m.prefix&0x8080808080808080 != 0 { // some byte is not ASCII
		for p := m.prefix; p != 0; p >>= 8 {
			if byte(p) >= 0xee {
				m.byteOrder = false
			}
		}
	}
}

// sortMembers sorts an object's members by name into c.order, indexes of
// ms: by insertion, as few as objects have, else by slices.SortFunc.
func (c *canonWriter) sortMembers(ms []canonMember) []int32 {
	order := c.order[:0]
	for i := range ms {
		order = append(order, int32(i))
	}
	c.order = order
	if len(ms) > 24 {
		slices.SortFunc(order, func(a, b int32) int { return c.compare(ms[a], ms[b]) })
		return order
	}
	for i := 1; i < len(order); i++ {
		x := order[i]
		mx := &ms[x]
		j := i
		for ; j > 0; j-- {
			my := &ms[order[j-1]]
			if my.prefix != mx.prefix && my.byteOrder && mx.byteOrder {
				if my.prefix < mx.prefix {
					break
				}
			} else if c.compare(*my, *mx) <= 0 {
				break
			}
			order[j] = order[j-1]
		}
		order[j] = x
	}
	return order
}

// space skips JSON white space.
func (c *canonWriter) space() {
	for c.i < len(c.in) {
		switch c.in[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// topObject writes the top-level value, which must be an object, and
// checks that only white space follows.
func (c *canonWriter) topObject() bool {
	c.space()
	if c.i >= len(c.in) || c.in[c.i] != '{' {
		return false
	}
	if !c.object(c.skip) {
		return false
	}
	c.space()
	return c.i == len(c.in)
}

// value writes the value at c.i, after white space.
func (c *canonWriter) value() bool {
	c.space()
	if c.i >= len(c.in) {
		return false
	}
	switch ch := c.in[c.i]; {
	case ch == '{':
		return c.object("")
	case ch == '[':
		return c.array()
	case ch == '"':
		return c.str(nil)
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || '0' <= ch && ch <= '9':
		return c.number()
	}
	return false
}

// literal writes true, false or null.
func (c *canonWriter) literal(word string) bool {
	if len(c.in)-c.i < len(word) || string(c.in[c.i:c.i+len(word)]) != word {
		return false
	}
	c.i += len(word)
	c.out = append(c.out, word...)
	return true
}

// enter goes one level deeper, and reports whether that is within
// canonMaxDepth.
func (c *canonWriter) enter() bool {
	c.depth++
	return c.depth <= canonMaxDepth
}

// array writes an array, its items in order.
func (c *canonWriter) array() bool {
	if !c.enter() {
		return false
	}
	c.i++ // [
	c.out = append(c.out, '[')
	c.space()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.depth--
		c.out = append(c.out, ']')
		return true
	}
	for {
		if !c.value() {
			return false
		}
		c.space()
		if c.i >= len(c.in) {
			return false
		}
		switch c.in[c.i] {
		case ',':
			c.i++
			c.out = append(c.out, ',')
		case ']':
			c.i++
			c.depth--
			c.out = append(c.out, ']')
			return true
		default:
			return false
		}
	}
}

// object writes an object with its members sorted by the UTF-16 code units
// of their names, leaving out the member named skip.
func (c *canonWriter) object(skip string) bool {
	if !c.enter() {
		return false
	}
	c.i++ // {
	start := len(c.out)
	base := len(c.members)
	c.space()
	if c.i < len(c.in) && c.in[c.i] == '}' {
		c.i++
	} else {
		for {
			c.space()
			if c.i >= len(c.in) || c.in[c.i] != '"' {
				return false
			}
			m := canonMember{start: len(c.out)}
			if !c.str(&m) {
				return false
			}
			key := c.key(m)
			c.space()
			if c.i >= len(c.in) || c.in[c.i] != ':' {
				return false
			}
			c.i++
			c.out = append(c.out, ':')
			c.space()
			valueStart := c.i
			if !c.value() {
				return false
			}
			if c.top && c.depth == 1 {
				switch string(key) {
				case "specversion":
					c.sawSpec = true
				case AttrPrevious:
					c.previous = c.in[valueStart:c.i]
				case AttrSignature:
					c.signature = c.in[valueStart:c.i]
				}
			}
			if skip != "" && string(key) == skip {
				if c.skipped {
					return false // repeated: parseJSON refuses it
				}
				c.skipped = true
				c.out = c.out[:m.start]
			} else {
				m.end = len(c.out)
				c.setPrefix(&m)
				c.members = append(c.members, m)
			}
			c.space()
			if c.i >= len(c.in) {
				return false
			}
			if c.in[c.i] == '}' {
				c.i++
				break
			}
			if c.in[c.i] != ',' {
				return false
			}
			c.i++
		}
	}
	c.depth--
	members := c.members[base:]
	order := c.sortMembers(members)
	for i := 1; i < len(order); i++ {
		if c.compare(members[order[i-1]], members[order[i]]) == 0 {
			return false // jcs.Transform refuses repeated names
		}
	}
	// The members' text is in out from start on, in input order; move it
	// aside and write it back sorted, with the braces and commas.
	c.tmp = append(c.tmp[:0], c.out[start:]...)
	c.out = append(c.out[:start], '{')
	for i, k := range order {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		m := &members[k]
		c.out = append(c.out, c.tmp[m.start-start:m.end-start]...)
	}
	c.out = append(c.out, '}')
	c.members = c.members[:base]
	return true
}

// compareUTF16 orders valid UTF-8 strings by their UTF-16 code units.
// That is code point order, and so byte order, except that a character
// beyond U+FFFF (a surrogate pair in UTF-16, 0xD800-0xDFFF) comes before
// one of U+E000-U+FFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	// Back up to the start of the differing characters.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	if ua, ub := utf16Unit(ra), utf16Unit(rb); ua != ub {
		return int(ua) - int(ub)
	}
	return int(ra - rb) // both beyond U+FFFF: code point order
}

// utf16Unit is the first UTF-16 code unit of r.
func utf16Unit(r rune) uint16 {
	if r >= 0x10000 {
		return uint16(0xd800 + (r-0x10000)>>10)
	}
	return uint16(r)
}

// str writes the string at c.i as jcs.Transform does: escapes decoded, then
// '"', '\\' and the control characters escaped again (\b \f \n \r \t by
// name, others as \u00xx), everything else as UTF-8. With m, it notes there
// where the decoded string is: a part of in when it has no escapes, else
// written to keys.
func (c *canonWriter) str(m *canonMember) bool {
	c.i++ // "
	begin := c.i
	escaped := false
	c.out = append(c.out, '"')
	for {
		// A run of characters written as they are.
		run := c.i
		for c.i < len(c.in) {
			if ch := c.in[c.i]; ch < 0x20 || ch == '"' || ch == '\\' || ch >= utf8.RuneSelf {
				break
			}
			c.i++
		}
		c.out = append(c.out, c.in[run:c.i]...)
		if escaped && m != nil {
			c.keys = append(c.keys, c.in[run:c.i]...)
		}
		if c.i >= len(c.in) {
			return false
		}
		switch ch := c.in[c.i]; {
		case ch == '"':
			c.i++
			c.out = append(c.out, '"')
			if m != nil {
				m.escaped = escaped
				if escaped {
					m.keyStart, m.keyEnd = m.keyEnd, len(c.keys)
				} else {
					m.keyStart, m.keyEnd = begin, c.i-1
				}
			}
			return true
		case ch == '\\':
			if !escaped && m != nil {
				// From here on the name is decoded into keys; keyEnd
				// holds where it starts until the end.
				m.keyEnd = len(c.keys)
				c.keys = append(c.keys, c.in[begin:c.i]...)
			}
			escaped = true
			r, ok := c.escape()
			if !ok {
				return false
			}
			c.out = guards.AppendJSONRune(c.out, r, guards.Canonical)
			if m != nil {
				c.keys = utf8.AppendRune(c.keys, r)
			}
		case ch < 0x20:
			return false
		default:
			r, size := utf8.DecodeRune(c.in[c.i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			c.out = append(c.out, c.in[c.i:c.i+size]...)
			if escaped && m != nil {
				c.keys = append(c.keys, c.in[c.i:c.i+size]...)
			}
			c.i += size
		}
	}
}

// escape decodes the escape sequence at c.i. An escaped surrogate is not
// handled: jcs.Transform pairs surrogates its own way.
func (c *canonWriter) escape() (rune, bool) {
	if c.i+1 >= len(c.in) {
		return 0, false
	}
	ch := c.in[c.i+1]
	c.i += 2
	switch ch {
	case '"', '\\', '/':
		return rune(ch), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r, ok := hex4(c.in[c.i:])
		if !ok {
			return 0, false
		}
		c.i += 4
		if 0xd800 <= r && r <= 0xdfff {
			return 0, false
		}
		return r, true
	}
	return 0, false
}

// number writes a number as ECMAScript formats its IEEE double, as
// jcs.Transform does. An integer of up to 15 digits is exact in a double and
// written as it is ("-0" as "0").
func (c *canonWriter) number() bool {
	start := c.i
	if c.in[c.i] == '-' {
		c.i++
	}
	digits := c.i
	if c.i < len(c.in) && c.in[c.i] == '0' {
		c.i++
	} else if !c.digits() {
		return false
	}
	integer := true
	if c.i < len(c.in) && c.in[c.i] == '.' {
		c.i++
		integer = false
		if !c.digits() {
			return false
		}
	}
	if c.i < len(c.in) && (c.in[c.i] == 'e' || c.in[c.i] == 'E') {
		c.i++
		integer = false
		if c.i < len(c.in) && (c.in[c.i] == '+' || c.in[c.i] == '-') {
			c.i++
		}
		if !c.digits() {
			return false
		}
	}
	lit := c.in[start:c.i]
	if len(lit) > maxNumberLen {
		return false // parseJSON refuses it
	}
	if integer && c.i-digits <= 15 {
		if string(lit) == "-0" {
			lit = lit[1:]
		}
		c.out = append(c.out, lit...)
		return true
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	s, err := jcs.NumberToJSON(f)
	if err != nil {
		return false
	}
	c.out = append(c.out, s...)
	return true
}

// digits skips one or more decimal digits.
func (c *canonWriter) digits() bool {
	start := c.i
	for c.i < len(c.in) && '0' <= c.in[c.i] && c.in[c.i] <= '9' {
		c.i++
	}
	return c.i > start
}
