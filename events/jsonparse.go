package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/toolsentry/toolsentry/guards/toolschema"
)

// maxJSONDepth bounds the nesting of a decoded document, as encoding/json
// does.
const maxJSONDepth = 10000

// maxNumberLen bounds the length of a number literal that becomes a value:
// JSON Schema validation turns numbers into big.Rat, which costs quadratic
// time in the digits. (Summarised arguments are not bounded: their numbers
// are only classified.)
const maxNumberLen = 64

// maxExp10 bounds the decimal exponent of a number literal that becomes a
// value, for the same reason: big.Rat refuses exponents beyond about a
// million (the JSON Schema validator then panics) and is slow well before.
// No float64 is beyond ±400; 10,000 leaves room.
const maxExp10 = 10000

// pathError is valid JSON that toolsentry refuses, at a place: an object
// member name that repeats in its object (encoding/json keeps the last of
// repeated members silently and other readers keep the first, so toolsentry
// refuses them rather than guess), or a number literal longer than
// maxNumberLen or with an exponent beyond ±maxExp10.
type pathError struct {
	path []string // JSON Pointer tokens, innermost first while unwinding
	msg  string   // what is wrong there; "" for a repeated member
}

func (e *pathError) Error() string {
	if e.msg == "" {
		return "member " + e.pointer() + " repeated"
	}
	return e.pointer() + ": " + e.msg
}

func (e *pathError) pointer() string {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		b.WriteByte('/')
		t := strings.ReplaceAll(e.path[i], "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// parseJSON decodes exactly one JSON value into the form that package
// schemas validates (map[string]any, []any, json.Number, string, bool, nil)
// in one pass. It accepts what encoding/json accepts, except text that is
// not UTF-8, objects with a repeated member name and number literals longer
// than maxNumberLen (both a *pathError); lone surrogate escapes become
// U+FFFD, as in encoding/json.
//
// Strings without escapes are substrings of one copy of b: a caller that
// keeps a string beyond the tree clones it (strings.Clone), so that nothing
// it keeps pins the whole document.
func parseJSON(b []byte) (any, error) {
	v, _, err := parseJSONSummarizing(b, nil)
	return v, err
}

// parseJSONSummarizing is parseJSON, except that the object at the JSON
// Pointer tokens at (the arguments of an invocation) is not decoded: the
// tree holds an empty object in its place, and the object's field paths and
// value types are returned instead. Its values are checked for syntax and
// then forgotten; none becomes a Go value. A nil at summarises nothing;
// an empty at summarises the root. If no object is found there, the
// FieldTypes are nil. Errors in the summarised object (too many fields, too
// deep) are *argumentsError.
func parseJSONSummarizing(b []byte, at []string) (any, FieldTypes, error) {
	p := newParser(b)
	defer p.release()
	p.at = at
	match := 0
	if at == nil {
		match = -1
	}
	p.skipSpace()
	if p.i == len(b) {
		return nil, nil, errors.New("no JSON value")
	}
	v, err := p.value(match)
	if err != nil {
		return nil, nil, err
	}
	p.skipSpace()
	if p.i != len(b) {
		return nil, nil, fmt.Errorf("data after the JSON value at offset %d", p.i)
	}
	return v, p.args, nil
}

// parserPool keeps parsers' scratch stacks (pairs, keys, strs, types)
// between calls.
var parserPool = sync.Pool{New: func() any { return &parser{pairs: make([]pair, 0, 32)} }}

// newParser returns a pooled parser at the start of b.
func newParser(b []byte) *parser {
	p := parserPool.Get().(*parser)
	p.b, p.s = b, string(b)
	return p
}

// release clears what the parser refers to and returns it to the pool: a
// pooled parser holds no part of a document.
func (p *parser) release() {
	if p.pairsUsed { // not by the invocation reader: no need to clear 1 KiB of pointers
		clear(p.pairs[:cap(p.pairs)])
	}
	clear(p.keys[:cap(p.keys)])
	clear(p.strs[:cap(p.strs)])
	clear(p.types[:cap(p.types)])
	*p = parser{pairs: p.pairs[:0], keys: p.keys[:0], strs: p.strs[:0], types: p.types[:0]}
	parserPool.Put(p)
}

// argumentsError is a limit exceeded by a summarised arguments object.
type argumentsError struct{ msg string }

func (e *argumentsError) Error() string { return e.msg }

type parser struct {
	b     []byte
	s     string // a copy of b, for substrings
	i     int
	depth int
	pairs []pair // members of the objects being parsed, a stack
	// pairsUsed says whether pairs were used since the parser left the pool.
	pairsUsed bool

	at   []string   // where the object to summarise is
	args FieldTypes // its summary, once found
	keys []string   // member names of the objects being checked for repeats, a stack

	strs  []string    // items of the string arrays being read by the invocation reader, a stack
	types []typeEntry // members of argument_types read by the invocation reader, a stack
}

type pair struct {
	key string
	val any
}

func (p *parser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) unexpected() error {
	if p.i >= len(p.b) {
		return p.errorf("unexpected end of JSON")
	}
	return p.errorf("invalid character %q", p.b[p.i])
}

// value parses the value at p.i. match is how many tokens of p.at lead to
// it (-1: it is not on the way).
func (p *parser) value(match int) (any, error) {
	if p.i >= len(p.b) {
		return nil, p.unexpected()
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if match >= 0 && match == len(p.at) && p.args == nil {
			p.args = make(FieldTypes, 16)
			if err := p.summarizeObject("", 0); err != nil {
				return nil, err
			}
			return map[string]any{}, nil
		}
		return p.object(match)
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.unexpected()
}

func (p *parser) literal(word string) error {
	if !strings.HasPrefix(p.s[p.i:], word) {
		return p.errorf("invalid literal, want %s", word)
	}
	p.i += len(word)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return p.errorf("nested deeper than %d", maxJSONDepth)
	}
	return nil
}

func (p *parser) object(match int) (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.i++ // {
	base := len(p.pairs)
	defer func() { p.pairs = p.pairs[:base] }()
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.depth--
		return map[string]any{}, nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.unexpected()
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.unexpected()
		}
		p.i++
		p.skipSpace()
		childMatch := -1
		if match >= 0 && match < len(p.at) && key == p.at[match] {
			childMatch = match + 1
		}
		v, err := p.value(childMatch)
		if err != nil {
			var dup *pathError
			if errors.As(err, &dup) {
				dup.path = append(dup.path, key)
			}
			return nil, err
		}
		p.pairs = append(p.pairs, pair{key, v})
		p.pairsUsed = true
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.skipSpace()
			continue
		case '}':
			p.i++
			p.depth--
		default:
			return nil, p.unexpected()
		}
		// Build the map at its final size, refusing a repeated name.
		members := p.pairs[base:]
		m := make(map[string]any, len(members))
		for _, kv := range members {
			if _, ok := m[kv.key]; ok {
				return nil, &pathError{path: []string{kv.key}}
			}
			m[kv.key] = kv.val
		}
		return m, nil
	}
}

func (p *parser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.i++ // [
	arr := []any{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.depth--
		return arr, nil
	}
	for {
		v, err := p.value(-1)
		if err != nil {
			var dup *pathError
			if errors.As(err, &dup) {
				dup.path = append(dup.path, strconv.Itoa(len(arr)))
			}
			return nil, err
		}
		arr = append(arr, v)
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.skipSpace()
		case ']':
			p.i++
			p.depth--
			return arr, nil
		default:
			return nil, p.unexpected()
		}
	}
}

func (p *parser) number() (any, error) {
	start := p.i
	if err := p.scanNumber(); err != nil {
		return nil, err
	}
	if p.i-start > maxNumberLen {
		return nil, &pathError{msg: fmt.Sprintf("a number of %d characters, longer than %d", p.i-start, maxNumberLen)}
	}
	lit := p.s[start:p.i]
	if e := strings.IndexAny(lit, "eE"); e >= 0 && !smallExponent(lit[e+1:]) {
		return nil, &pathError{msg: fmt.Sprintf("a number with the exponent %s, beyond ±%d", lit[e+1:], maxExp10)}
	}
	return json.Number(lit), nil
}

// scanNumber moves past the number at p.i, checking its grammar.
func (p *parser) scanNumber() error {
	b := p.b
	if b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(b) && b[p.i] == '0':
		p.i++
	case p.i < len(b) && '1' <= b[p.i] && b[p.i] <= '9':
		for p.i < len(b) && '0' <= b[p.i] && b[p.i] <= '9' {
			p.i++
		}
	default:
		return p.errorf("invalid number")
	}
	if p.i < len(b) && b[p.i] == '.' {
		p.i++
		if p.i >= len(b) || b[p.i] < '0' || b[p.i] > '9' {
			return p.errorf("invalid number: no digit after the decimal point")
		}
		for p.i < len(b) && '0' <= b[p.i] && b[p.i] <= '9' {
			p.i++
		}
	}
	if p.i < len(b) && (b[p.i] == 'e' || b[p.i] == 'E') {
		p.i++
		if p.i < len(b) && (b[p.i] == '+' || b[p.i] == '-') {
			p.i++
		}
		if p.i >= len(b) || b[p.i] < '0' || b[p.i] > '9' {
			return p.errorf("invalid number: no digit in the exponent")
		}
		for p.i < len(b) && '0' <= b[p.i] && b[p.i] <= '9' {
			p.i++
		}
	}
	return nil
}

// str reads a string at p.i (an opening quote).
func (p *parser) str() (string, error) {
	p.i++ // "
	start := p.i
	b := p.b
	// Fast path: no escapes, ASCII or valid UTF-8.
	for p.i < len(b) {
		c := b[p.i]
		switch {
		case c == '"':
			s := p.s[start:p.i]
			p.i++
			return s, nil
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			return "", p.errorf("control character %q in a string", c)
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(b[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf("invalid UTF-8")
			}
			p.i += size
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) strSlow(start int) (string, error) {
	b := p.b
	out := make([]byte, 0, p.i-start+16)
	out = append(out, b[start:p.i]...)
	for p.i < len(b) {
		c := b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c == '\\':
			p.i++
			if p.i >= len(b) {
				return "", p.errorf("unterminated string")
			}
			e := b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.i+1 < len(b) && b[p.i] == '\\' && b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						var ok bool
						if r2, ok = p.hex4(); !ok {
							return "", p.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							continue
						}
						p.i = save // not a pair: the second escape stands alone
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", p.errorf("invalid escape \\%c", e)
			}
		case c < 0x20:
			return "", p.errorf("control character %q in a string", c)
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(b[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf("invalid UTF-8")
			}
			out = append(out, b[p.i:p.i+size]...)
			p.i += size
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	r, ok := hex4(p.b[p.i:])
	if ok {
		p.i += 4
	}
	return r, ok
}

// hex4 reads the four hex digits of a \u escape at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		d := unhex(c)
		if d < 0 {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// summarizeObject reads an object at p.i as part of a summarised arguments
// object found at path, recording each member's path and type in p.args.
func (p *parser) summarizeObject(path string, depth int) error {
	if depth >= MaxArgumentDepth {
		return &argumentsError{fmt.Sprintf("nested deeper than %d at %q", MaxArgumentDepth, path)}
	}
	p.i++ // {
	base := len(p.keys)
	defer func() { p.keys = p.keys[:base] }()
	var seen map[string]struct{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return p.unexpected()
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if p.repeated(base, key, &seen) {
			return &pathError{path: []string{key}}
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.unexpected()
		}
		p.i++
		p.skipSpace()
		// The path syntax of guards' schema diff: names joined by '.', with
		// . [ ] \ ( ) | * in a name escaped by '\'.
		child := toolschema.JoinSchemaPath(path, key)
		if depth == 0 {
			child = strings.Clone(child) // not a substring of the whole body
		}
		if err := p.summarizeValue(child, depth); err != nil {
			var dup *pathError
			if errors.As(err, &dup) {
				dup.path = append(dup.path, key)
			}
			return err
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.skipSpace()
		case '}':
			p.i++
			return nil
		default:
			return p.unexpected()
		}
	}
}

// repeated reports whether key is one of the member names of an object
// seen so far, and adds it to them: p.keys[base:], or once the object is
// large *seen, so that the search is not quadratic. The caller truncates
// p.keys to base when it is done with the object.
func (p *parser) repeated(base int, key string, seen *map[string]struct{}) bool {
	if *seen != nil {
		if _, dup := (*seen)[key]; dup {
			return true
		}
		(*seen)[key] = struct{}{}
		return false
	}
	if slices.Contains(p.keys[base:], key) {
		return true
	}
	p.keys = append(p.keys, key)
	if len(p.keys)-base > 16 {
		*seen = make(map[string]struct{}, 64)
		for _, k := range p.keys[base:] {
			(*seen)[k] = struct{}{}
		}
	}
	return false
}

// summarizeValue reads the value at p.i, found at path, and records its type
// there; containers are summarised in turn.
func (p *parser) summarizeValue(path string, depth int) error {
	if p.i >= len(p.b) {
		return p.unexpected()
	}
	var t toolschema.TypeSet
	switch c := p.b[p.i]; {
	case c == '{':
		t = toolschema.TypeObject
	case c == '[':
		t = toolschema.TypeArray
	case c == '"':
		if _, err := p.str(); err != nil {
			return err
		}
		t = toolschema.TypeString
	case c == '-' || '0' <= c && c <= '9':
		start := p.i
		if err := p.scanNumber(); err != nil {
			return err
		}
		t = toolschema.TypeNumber
		if isIntegerLiteral(p.s[start:p.i]) {
			t = toolschema.TypeInteger
		}
	case c == 't':
		if err := p.literal("true"); err != nil {
			return err
		}
		t = toolschema.TypeBoolean
	case c == 'f':
		if err := p.literal("false"); err != nil {
			return err
		}
		t = toolschema.TypeBoolean
	case c == 'n':
		if err := p.literal("null"); err != nil {
			return err
		}
		t = toolschema.TypeNull
	default:
		return p.unexpected()
	}
	if err := p.args.add(path, t); err != nil {
		return &argumentsError{err.Error()}
	}
	switch t {
	case toolschema.TypeObject:
		return p.summarizeObject(path, depth+1)
	case toolschema.TypeArray:
		return p.summarizeArray(toolschema.ItemsPath(path), depth+1)
	}
	return nil
}

func (p *parser) summarizeArray(path string, depth int) error {
	if depth >= MaxArgumentDepth {
		return &argumentsError{fmt.Sprintf("nested deeper than %d at %q", MaxArgumentDepth, path)}
	}
	p.i++ // [
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := p.summarizeValue(path, depth); err != nil {
			var dup *pathError
			if errors.As(err, &dup) {
				dup.path = append(dup.path, strconv.Itoa(n))
			}
			return err
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return p.unexpected()
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.skipSpace()
		case ']':
			p.i++
			return nil
		default:
			return p.unexpected()
		}
	}
}
