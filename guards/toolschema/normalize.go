package toolschema

// This file turns one JSON Schema document (draft-04 to 2020-12, as MCP
// tools carry them) into a SchemaNode graph in which every spelling of the
// same meaning looks the same: local $refs resolved, "type" as a TypeSet,
// required and enum as sorted sets, const as an enum of one, draft-04
// exclusive bounds as 2020-12 ones, Optional[X] (anyOf [X, {"type":
// "null"}]) as a nullable X. The fingerprint (fingerprint.go) and
// the diff (diff.go) work on this graph only.

import (
	"github.com/toolsentry/toolsentry/guards"

	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MaxSchemaDepth is how deeply schemas may nest (properties, items,
// combinators and $ref hops each count one level). A deeper schema is
// rejected with an error wrapping ErrInvalid, never a stack overflow.
const MaxSchemaDepth = 128

// maxSchemaJSONDepth bounds the JSON nesting of a whole document (schema
// nesting takes two JSON levels per schema level, plus enum and default
// values), checked before decoding.
const maxSchemaJSONDepth = 4*MaxSchemaDepth + 64

// SchemaNode is a normalised JSON Schema: local $refs resolved (cycles
// terminate by sharing the node), "type" as a TypeSet. Nodes are immutable
// once NormalizeSchema returns and may be shared between goroutines.
//
// A nil *SchemaNode in Items or AdditionalProperties, and a node with every
// field zero, both mean "any value"; a node with False set means "no value"
// (the boolean schema false).
type SchemaNode struct {
	// False is the schema false: nothing validates. Every other field is zero.
	False bool
	// Types are the allowed JSON types; 0 means no type constraint. number
	// absorbs integer ({"type": ["integer", "number"]} is just number), and a
	// set of all types is 0. Null in the set is what Nullable reports.
	Types TypeSet
	// Properties by name; nil when the schema declares none.
	Properties map[string]*SchemaNode
	// Required property names, sorted and distinct; nil when none.
	Required []string
	// AdditionalProperties applies to properties not in Properties or
	// PatternProperties; nil when absent, true or {}.
	AdditionalProperties *SchemaNode
	// PatternProperties by regular expression; nil when none.
	PatternProperties map[string]*SchemaNode
	// PrefixItems are positional item schemas (2020-12 prefixItems, or the
	// array form of items before 2020-12).
	PrefixItems []*SchemaNode
	// Items applies to array items after PrefixItems (2020-12 items, draft-07
	// additionalItems, or the single-schema items); nil when absent.
	Items *SchemaNode
	// Default is the decoded default value (numbers as float64); HasDefault
	// tells a null default from none.
	Default    any
	HasDefault bool
	// Enum holds the allowed values, distinct, sorted by their canonical JSON
	// (const is an enum of one value); HasEnum tells an empty enum from none.
	Enum    []any
	HasEnum bool
	// Format is the "format" annotation ("date-time", "uri", ...).
	Format string
	// Constraints are the validation keywords with their normalised values:
	// minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf
	// (float64); minLength, maxLength, minItems, maxItems, minContains,
	// maxContains, minProperties, maxProperties (float64); pattern (string);
	// uniqueItems (true); dependentRequired (map[string][]string, sorted).
	// Keywords whose value means "no constraint" (minLength 0, uniqueItems
	// false) are left out; a bound made redundant by a stricter one is too.
	Constraints map[string]any
	// Description and Title are the schema's annotations.
	Description string
	Title       string
	// AnyOf, OneOf and AllOf are the combinators, in document order (their
	// order does not matter to the fingerprint); Not is the negation.
	AnyOf []*SchemaNode
	OneOf []*SchemaNode
	AllOf []*SchemaNode
	Not   *SchemaNode
	// Applicators are the other single-schema keywords: if, then, else,
	// contains, propertyNames, unevaluatedItems, unevaluatedProperties.
	Applicators map[string]*SchemaNode
	// DependentSchemas (and the schema form of draft-07 dependencies).
	DependentSchemas map[string]*SchemaNode
	// Ref is a $ref this package cannot resolve without I/O (another
	// document), kept as written.
	Ref string
	// Extra holds every other keyword verbatim (examples, deprecated,
	// readOnly, writeOnly, contentMediaType, vendor x-* keys, ...), except
	// those without meaning for validation or the model: $schema, $id,
	// $comment, $anchor, $defs and definitions (their content is reached
	// through $ref).
	Extra map[string]any

	// enumKeys are the canonical JSON texts of Enum, in the same order.
	enumKeys []string
	// shared marks a node that a $ref reaches: the encoder caches its text.
	shared bool
}

// Nullable reports whether the schema admits null.
func (n *SchemaNode) Nullable() bool {
	if n == nil {
		return true
	}
	if n.False {
		return false
	}
	if n.HasEnum {
		for _, k := range n.enumKeys {
			if k == "null" {
				return true
			}
		}
		return false
	}
	return n.Types == 0 || n.Types&TypeNull != 0
}

// IsAny reports whether the schema constrains nothing and says nothing:
// nil, true, {} or a schema with annotations only is not "any" (it says
// something), so IsAny is true only for a node with every field zero.
func (n *SchemaNode) IsAny() bool {
	return n == nil || (!n.False && n.Types == 0 && n.Properties == nil && n.Required == nil &&
		n.AdditionalProperties == nil && n.PatternProperties == nil && n.PrefixItems == nil &&
		n.Items == nil && !n.HasDefault && !n.HasEnum && n.Format == "" && len(n.Constraints) == 0 &&
		n.Description == "" && n.Title == "" && n.AnyOf == nil && n.OneOf == nil && n.AllOf == nil &&
		n.Not == nil && len(n.Applicators) == 0 && len(n.DependentSchemas) == 0 && n.Ref == "" &&
		len(n.Extra) == 0)
}

// constrainsNothing reports whether the schema accepts every value: IsAny,
// or a schema with annotations only (description, title, default and the
// keywords Extra holds: examples, deprecated, readOnly, $comment, ...) and
// no type, constraint, format or applicator. Such a schema is typeless
// ("anything goes") as {} is, though it says something: the diff still
// reports its annotations.
func (n *SchemaNode) constrainsNothing() bool {
	if n == nil {
		return true
	}
	bare := *n
	bare.Description, bare.Title, bare.Default, bare.HasDefault, bare.Extra = "", "", nil, false, nil
	return bare.IsAny()
}

// EnumContains reports whether the enum holds a value equal to v (by
// canonical JSON, so 1 equals 1.0). A node without enum contains nothing.
func (n *SchemaNode) EnumContains(v any) bool {
	if n == nil || !n.HasEnum {
		return false
	}
	key, err := canonicalValueString(v)
	if err != nil {
		return false
	}
	i := sort.SearchStrings(n.enumKeys, key)
	return i < len(n.enumKeys) && n.enumKeys[i] == key
}

// NormalizeSchema decodes one JSON Schema document (an object or a boolean)
// and normalises it. Errors wrap ErrInvalid and say where in the document the
// problem is.
func NormalizeSchema(raw []byte) (*SchemaNode, error) {
	if err := checkJSONDepth(raw, maxSchemaJSONDepth); err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: schema is not valid JSON: %v", guards.ErrInvalid, err)
	}
	return normalizeSchemaValue(doc)
}

// normalizeSchemaValue normalises a decoded schema document.
func normalizeSchemaValue(doc any) (*SchemaNode, error) {
	z := &schemaNormalizer{root: doc, memo: make(map[uintptr]normMemo, 32)}
	if m, ok := doc.(map[string]any); ok {
		if id, ok := m["$id"].(string); ok {
			z.rootID, _, _ = strings.Cut(id, "#")
		}
	}
	n, err := z.normalize(doc, 0)
	if err != nil {
		return nil, err
	}
	if err := z.finish(); err != nil {
		return nil, err
	}
	return n, nil
}

// checkJSONDepth rejects a document nested deeper than limit before it is
// decoded: a clear error instead of a deep recursion.
func checkJSONDepth(raw []byte, limit int) error {
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
			if depth > limit {
				return fmt.Errorf("%w: schema document nests deeper than %d JSON levels", guards.ErrInvalid, limit)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// where is the current location in the document, as a JSON pointer.
func (z *schemaNormalizer) where() string {
	if len(z.path) == 0 {
		return "the schema root"
	}
	var b strings.Builder
	b.WriteByte('#')
	for _, k := range z.path {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

func (z *schemaNormalizer) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: schema at %s: %s", guards.ErrInvalid, z.where(), fmt.Sprintf(format, args...))
}

// child normalises a subschema found under keys (one or two path steps).
func (z *schemaNormalizer) child(v any, depth int, key string, more ...string) (*SchemaNode, error) {
	n := len(z.path)
	z.path = append(z.path, key)
	z.path = append(z.path, more...)
	c, err := z.normalize(v, depth+1)
	z.path = z.path[:n]
	return c, err
}

type normMemo struct {
	node      *SchemaNode
	resolving bool // a pure $ref whose target is being normalised
}

// normPending is a node whose content is a copy of target (once complete)
// with nullability and sibling keywords merged in, filled after the whole
// document is normalised because target may be an ancestor still being
// filled.
type normPending struct {
	node     *SchemaNode
	target   *SchemaNode
	siblings *SchemaNode
	addNull  bool
	where    string // the location, for errors
	state    int8   // 0 waiting, 1 resolving, 2 done
}

type schemaNormalizer struct {
	// stack holds the nodes being filled, one per schema level as the
	// canonical form nests them, so {"$cycle": N} finds its target.
	stack   []*SchemaNode
	path    []string // the keys from the document root to the current location
	root    any
	rootID  string
	memo    map[uintptr]normMemo
	pending []*normPending
	byNode  map[*SchemaNode]*normPending
	anchors map[string]any
}

// ignoredKeywords carry no meaning for validation or for the model.
func ignoredKeyword(k string) bool {
	switch k {
	case "$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs", "definitions":
		return true
	}
	return false
}

func (z *schemaNormalizer) normalize(v any, depth int) (*SchemaNode, error) {
	if depth > MaxSchemaDepth {
		return nil, fmt.Errorf("%w: schema nests deeper than %d levels (at %s)", guards.ErrInvalid, MaxSchemaDepth, z.where())
	}
	switch x := v.(type) {
	case bool:
		if x {
			return &SchemaNode{}, nil
		}
		return &SchemaNode{False: true}, nil
	case map[string]any:
		return z.normalizeObject(x, depth)
	}
	return nil, z.errorf("want an object or a boolean, got %s", guards.JSONKind(v))
}

func (z *schemaNormalizer) normalizeObject(m map[string]any, depth int) (*SchemaNode, error) {
	// {"$cycle": N}: the canonical form's back reference, N levels up.
	if c, ok := m["$cycle"]; ok && len(m) == 1 {
		f, isNum := c.(float64)
		if !isNum || f < 1 || f > float64(len(z.stack)) || f != math.Trunc(f) {
			return nil, z.errorf("$cycle %v does not point to an enclosing schema", c)
		}
		t := z.stack[len(z.stack)-int(f)]
		t.shared = true
		return t, nil
	}
	id := reflect.ValueOf(m).Pointer()
	if e, ok := z.memo[id]; ok {
		if e.resolving {
			return nil, z.errorf("$ref loop that never reaches a schema")
		}
		e.node.shared = true
		return e.node, nil
	}

	// $ref: a pure reference is its target; with sibling keywords it is the
	// target merged with them.
	if ref, ok := m["$ref"].(string); ok {
		if target, local, err := z.resolveRef(ref); err != nil {
			return nil, err
		} else if local {
			return z.normalizeAlias(m, id, "$ref", target, false, depth, "$ref")
		}
	}
	// allOf with one branch: the branch merged with the siblings
	// (draft-07 generators wrap a $ref this way to describe it).
	if all, ok := m["allOf"].([]any); ok && len(all) == 1 {
		return z.normalizeAlias(m, id, "allOf", all[0], false, depth, "allOf", "0")
	}
	// Optional[X]: anyOf (or oneOf) [X, {"type": "null"}] is a nullable X.
	for _, kw := range [...]string{"anyOf", "oneOf"} {
		if br, ok := m[kw].([]any); ok && len(br) == 2 {
			if isNullSchema(br[1]) && !isNullSchema(br[0]) {
				return z.normalizeAlias(m, id, kw, br[0], true, depth, kw, "0")
			}
			if isNullSchema(br[0]) && !isNullSchema(br[1]) {
				return z.normalizeAlias(m, id, kw, br[1], true, depth, kw, "1")
			}
		}
	}

	n := &SchemaNode{}
	z.memo[id] = normMemo{node: n}
	z.stack = append(z.stack, n)
	err := z.fill(n, m, "", depth)
	z.stack = z.stack[:len(z.stack)-1]
	if err != nil {
		return nil, err
	}
	return n, nil
}

// normalizeAlias handles a keyword (skip) whose one schema (target, found
// under keys) stands for the whole object, merged with its other keywords.
func (z *schemaNormalizer) normalizeAlias(m map[string]any, id uintptr, skip string, target any, addNull bool, depth int, keys ...string) (*SchemaNode, error) {
	hasSiblings := false
	for k := range m {
		if k != skip && !ignoredKeyword(k) {
			hasSiblings = true
			break
		}
	}
	if !hasSiblings && !addNull {
		z.memo[id] = normMemo{resolving: true}
		t, err := z.child(target, depth, keys[0], keys[1:]...)
		if err != nil {
			return nil, err
		}
		t.shared = true
		z.memo[id] = normMemo{node: t}
		return t, nil
	}
	p := &SchemaNode{}
	z.memo[id] = normMemo{node: p}
	if z.byNode == nil {
		z.byNode = map[*SchemaNode]*normPending{}
	}
	pend := &normPending{node: p, addNull: addNull, where: z.where()}
	z.byNode[p] = pend
	// The placeholder stands at this level for the target and the
	// siblings' subschemas, as the merged node will in the canonical form.
	z.stack = append(z.stack, p)
	defer func() { z.stack = z.stack[:len(z.stack)-1] }()
	t, err := z.child(target, depth, keys[0], keys[1:]...)
	if err != nil {
		return nil, err
	}
	t.shared = true
	pend.target = t
	if hasSiblings {
		s := &SchemaNode{}
		if err := z.fill(s, m, skip, depth); err != nil {
			return nil, err
		}
		pend.siblings = s
	}
	z.pending = append(z.pending, pend)
	return p, nil
}

func isNullSchema(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	switch t := m["type"].(type) {
	case string:
		return t == "null"
	case []any:
		return len(t) == 1 && t[0] == "null"
	}
	return false
}

// resolveRef finds the target of a $ref in the document. local is false for
// a reference to another document, which is kept unresolved.
func (z *schemaNormalizer) resolveRef(ref string) (target any, local bool, err error) {
	base, frag, hasFrag := strings.Cut(ref, "#")
	if base != "" && base != z.rootID {
		return nil, false, nil
	}
	if !hasFrag || frag == "" {
		return z.root, true, nil
	}
	if !strings.HasPrefix(frag, "/") {
		// A plain-name fragment: an $anchor.
		if z.anchors == nil {
			z.anchors = map[string]any{}
			collectAnchors(z.root, z.anchors, 0)
		}
		t, ok := z.anchors[frag]
		if !ok {
			return nil, true, z.errorf("$ref %q: no $anchor %q in the document", ref, frag)
		}
		return t, true, nil
	}
	if unescaped, err := url.PathUnescape(frag); err == nil {
		frag = unescaped
	}
	cur := z.root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return nil, true, z.errorf("$ref %q: no %q in the document", ref, tok)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, true, z.errorf("$ref %q: no item %q in the document", ref, tok)
			}
			cur = c[i]
		default:
			return nil, true, z.errorf("$ref %q: %q is inside a %s", ref, tok, guards.JSONKind(cur))
		}
	}
	return cur, true, nil
}

func collectAnchors(v any, into map[string]any, depth int) {
	if depth > maxSchemaJSONDepth {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := x[k].(string); ok {
				if _, dup := into[a]; !dup {
					into[a] = x
				}
			}
		}
		for _, k := range sortedKeysOf(x) { // the first anchor of a name wins, in a fixed order
			collectAnchors(x[k], into, depth+1)
		}
	case []any:
		for _, e := range x {
			collectAnchors(e, into, depth+1)
		}
	}
}

// numericConstraints are the keywords whose value is a number.
var numericConstraints = map[string]bool{
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "minContains": true,
	"maxContains": true, "minProperties": true, "maxProperties": true,
}

// applicatorKeywords take one schema.
var applicatorKeywords = map[string]bool{
	"if": true, "then": true, "else": true, "contains": true, "propertyNames": true,
	"unevaluatedItems": true, "unevaluatedProperties": true,
}

// fill normalises the keywords of m (except skip) into n: each keyword in
// sorted order (fillKeyword), then those whose meaning depends on their
// siblings (fillDeferred.apply).
func (z *schemaNormalizer) fill(n *SchemaNode, m map[string]any, skip string, depth int) error {
	var later fillDeferred
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	base := len(z.path)
	defer func() { z.path = z.path[:base] }()
	for _, k := range keys {
		if (skip != "" && k == skip) || ignoredKeyword(k) {
			continue
		}
		z.path = append(z.path[:base], k)
		if err := z.fillKeyword(n, k, m[k], depth, &later); err != nil {
			return err
		}
	}
	z.path = z.path[:base]
	return later.apply(z, n, depth)
}

// fillDeferred are the keywords fill applies after all others, because
// their meaning depends on siblings: const (narrows the type and enum),
// OpenAPI's nullable (adds null to a type), draft-04's boolean
// exclusiveMinimum/Maximum (modify minimum/maximum), and the tuple form
// of items with additionalItems (prefixItems wins over it).
type fillDeferred struct {
	hasConst     bool
	constVal     any
	nullable     bool
	draft4ExMin  *bool
	draft4ExMax  *bool
	itemsArray   []any
	additional   any
	hasAdditItem bool
}

// fillKeyword normalises one keyword k with value v into n; z.path ends
// with k. Keywords that depend on their siblings go to later.
func (z *schemaNormalizer) fillKeyword(n *SchemaNode, k string, v any, depth int, later *fillDeferred) error {
	switch {
	case k == "$ref":
		s, ok := v.(string)
		if !ok {
			return z.errorf("want a string, got %s", guards.JSONKind(v))
		}
		n.Ref = s
	case k == "type":
		t, err := z.parseTypeKeyword(v)
		if err != nil {
			return err
		}
		n.Types = t
	case k == "properties", k == "patternProperties", k == "dependentSchemas":
		return z.fillSchemaMap(n, k, v, depth)
	case k == "required":
		names, err := z.stringList(v)
		if err != nil {
			return err
		}
		n.Required = sortedSetOrNil(names)
	case k == "items", k == "additionalItems", k == "prefixItems":
		return z.fillItems(n, k, v, depth, later)
	case k == "anyOf", k == "oneOf", k == "allOf":
		return z.fillCombinator(n, k, v, depth)
	case k == "additionalProperties", k == "not", applicatorKeywords[k]:
		return z.fillSubschema(n, k, v, depth)
	case k == "default":
		n.Default, n.HasDefault = v, true
	case k == "enum":
		arr, ok := v.([]any)
		if !ok {
			return z.errorf("want an array, got %s", guards.JSONKind(v))
		}
		return n.setEnum(arr, z)
	case k == "const":
		later.hasConst, later.constVal = true, v
	case k == "format", k == "description", k == "title", k == "pattern":
		return z.fillString(n, k, v)
	case k == "nullable": // OpenAPI 3.0
		b, ok := v.(bool)
		if !ok {
			return z.errorf("want a boolean, got %s", guards.JSONKind(v))
		}
		later.nullable = b
	case (k == "exclusiveMinimum" || k == "exclusiveMaximum") && isBool(v): // draft-04
		b := v.(bool)
		if k == "exclusiveMinimum" {
			later.draft4ExMin = &b
		} else {
			later.draft4ExMax = &b
		}
	case numericConstraints[k]:
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return z.errorf("want a number, got %s", guards.JSONKind(v))
		}
		n.setConstraint(k, f)
	case k == "uniqueItems", k == "deprecated", k == "readOnly", k == "writeOnly":
		return z.fillFlag(n, k, v)
	case k == "dependentRequired", k == "dependencies":
		return z.fillDependencies(n, k, v, depth)
	default: // annotations, vendor keys, $dynamicRef, $recursiveRef and the like
		n.setExtra(k, v)
	}
	return nil
}

// fillSchemaMap normalises properties, patternProperties or
// dependentSchemas: an object of schemas by name.
func (z *schemaNormalizer) fillSchemaMap(n *SchemaNode, k string, v any, depth int) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return z.errorf("want an object, got %s", guards.JSONKind(v))
	}
	if len(obj) == 0 {
		return nil
	}
	sub := make(map[string]*SchemaNode, len(obj))
	for _, name := range sortedKeysOf(obj) {
		c, err := z.child(obj[name], depth, name)
		if err != nil {
			return err
		}
		sub[name] = c
	}
	switch k {
	case "properties":
		n.Properties = sub
	case "patternProperties":
		n.PatternProperties = sub
	default:
		n.DependentSchemas = mergeNodeMaps(n.DependentSchemas, sub)
	}
	return nil
}

// fillItems normalises items, additionalItems and prefixItems. The array
// form of items (a tuple before 2020-12) and additionalItems wait for
// fillDeferred.apply.
func (z *schemaNormalizer) fillItems(n *SchemaNode, k string, v any, depth int, later *fillDeferred) error {
	switch k {
	case "additionalItems":
		later.additional, later.hasAdditItem = v, true
	case "items":
		if arr, ok := v.([]any); ok {
			later.itemsArray = arr
			return nil
		}
		c, err := z.normalize(v, depth+1)
		if err != nil {
			return err
		}
		n.Items = c
	default: // prefixItems
		arr, ok := v.([]any)
		if !ok {
			return z.errorf("want an array, got %s", guards.JSONKind(v))
		}
		list, err := z.normalizeList(arr, depth)
		if err != nil {
			return err
		}
		n.PrefixItems = list
	}
	return nil
}

// fillCombinator normalises anyOf, oneOf or allOf: a non-empty array of
// schemas.
func (z *schemaNormalizer) fillCombinator(n *SchemaNode, k string, v any, depth int) error {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return z.errorf("want a non-empty array of schemas")
	}
	list, err := z.normalizeList(arr, depth)
	if err != nil {
		return err
	}
	switch k {
	case "anyOf":
		n.AnyOf = list
	case "oneOf":
		n.OneOf = list
	default:
		n.AllOf = list
	}
	return nil
}

// fillSubschema normalises a keyword that takes one schema:
// additionalProperties, not and the applicatorKeywords.
func (z *schemaNormalizer) fillSubschema(n *SchemaNode, k string, v any, depth int) error {
	c, err := z.normalize(v, depth+1)
	if err != nil {
		return err
	}
	switch k {
	case "additionalProperties":
		n.AdditionalProperties = c
	case "not":
		n.Not = c
	default:
		if n.Applicators == nil {
			n.Applicators = map[string]*SchemaNode{}
		}
		n.Applicators[k] = c
	}
	return nil
}

// fillString normalises a keyword that takes a string: format,
// description, title and pattern.
func (z *schemaNormalizer) fillString(n *SchemaNode, k string, v any) error {
	s, ok := v.(string)
	if !ok {
		return z.errorf("want a string, got %s", guards.JSONKind(v))
	}
	switch k {
	case "format":
		n.Format = s
	case "description":
		n.Description = s
	case "title":
		n.Title = s
	default:
		n.setConstraint(k, s)
	}
	return nil
}

// fillFlag normalises a boolean keyword: uniqueItems (a constraint),
// deprecated, readOnly, writeOnly (annotations). false is the default and
// has no meaning, so it is left out.
func (z *schemaNormalizer) fillFlag(n *SchemaNode, k string, v any) error {
	b, ok := v.(bool)
	if !ok {
		return z.errorf("want a boolean, got %s", guards.JSONKind(v))
	}
	switch {
	case !b:
	case k == "uniqueItems":
		n.setConstraint(k, true)
	default:
		n.setExtra(k, true)
	}
	return nil
}

// fillDependencies normalises dependentRequired (names by name) and
// draft-07's dependencies, whose arrays are dependentRequired and whose
// schemas are dependentSchemas.
func (z *schemaNormalizer) fillDependencies(n *SchemaNode, k string, v any, depth int) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return z.errorf("want an object, got %s", guards.JSONKind(v))
	}
	at := len(z.path)
	for _, name := range sortedKeysOf(obj) {
		z.path = append(z.path[:at], name)
		if _, isArray := obj[name].([]any); k == "dependentRequired" || isArray {
			names, err := z.stringList(obj[name])
			if err != nil {
				return err
			}
			n.addDependentRequired(name, names)
			continue
		}
		c, err := z.normalize(obj[name], depth+1)
		if err != nil {
			return err
		}
		n.DependentSchemas = mergeNodeMaps(n.DependentSchemas, map[string]*SchemaNode{name: c})
	}
	return nil
}

// apply applies the deferred keywords to n, once every keyword of its
// object is in, and writes its type set canonically.
func (later *fillDeferred) apply(z *schemaNormalizer, n *SchemaNode, depth int) error {
	base := len(z.path)
	// Tuple items before 2020-12: items [...] and additionalItems.
	if later.itemsArray != nil {
		z.path = append(z.path, "items")
		list, err := z.normalizeList(later.itemsArray, depth)
		z.path = z.path[:base]
		if err != nil {
			return err
		}
		if len(n.PrefixItems) == 0 {
			n.PrefixItems = list
		}
		if later.hasAdditItem && n.Items == nil {
			c, err := z.child(later.additional, depth, "additionalItems")
			if err != nil {
				return err
			}
			n.Items = c
		}
	}
	if len(n.PrefixItems) == 0 {
		n.PrefixItems = nil
	}
	if later.hasConst {
		z.path = append(z.path, "const")
		if err := n.applyConst(later.constVal, z); err != nil {
			return err
		}
	}
	n.normalizeBounds(later.draft4ExMin, later.draft4ExMax)
	n.Types = canonicalTypes(n.Types)
	if later.nullable && n.Types != 0 {
		n.Types |= TypeNull
	}
	return nil
}

func (z *schemaNormalizer) normalizeList(arr []any, depth int) ([]*SchemaNode, error) {
	out := make([]*SchemaNode, len(arr))
	for i, e := range arr {
		c, err := z.child(e, depth, strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

func isBool(v any) bool { _, ok := v.(bool); return ok }

func (z *schemaNormalizer) parseTypeKeyword(v any) (TypeSet, error) {
	var t TypeSet
	switch x := v.(type) {
	case string:
		p, err := ParseType(x)
		if err != nil {
			return 0, z.errorf("unknown type %q", x)
		}
		t = p
	case []any:
		if len(x) == 0 {
			return 0, z.errorf("empty type list")
		}
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return 0, z.errorf("want type names, got %s", guards.JSONKind(e))
			}
			p, err := ParseType(s)
			if err != nil {
				return 0, z.errorf("unknown type %q", s)
			}
			t |= p
		}
	default:
		return 0, z.errorf("want a type name or a list of them, got %s", guards.JSONKind(v))
	}
	return t, nil
}

// canonicalTypes lets number absorb integer and turns "every type" into the
// empty set (no constraint).
func canonicalTypes(t TypeSet) TypeSet {
	if t&TypeNumber != 0 {
		t &^= TypeInteger
	}
	if t == TypeAny&^TypeInteger {
		return 0
	}
	return t
}

func (z *schemaNormalizer) stringList(v any) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, z.errorf("want an array of strings, got %s", guards.JSONKind(v))
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, z.errorf("want an array of strings, item %d is %s", i, guards.JSONKind(e))
		}
		out[i] = s
	}
	return out, nil
}

// sortedKeysOf returns an object's keys sorted.
func sortedKeysOf(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedSetOrNil(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	return guards.SortedSet(in)
}

func mergeNodeMaps(a, b map[string]*SchemaNode) map[string]*SchemaNode {
	if a == nil {
		return b
	}
	for k, v := range b {
		a[k] = v
	}
	return a
}

func (n *SchemaNode) setConstraint(k string, v any) {
	if n.Constraints == nil {
		n.Constraints = map[string]any{}
	}
	n.Constraints[k] = v
}

func (n *SchemaNode) setExtra(k string, v any) {
	if n.Extra == nil {
		n.Extra = map[string]any{}
	}
	n.Extra[k] = v
}

func (n *SchemaNode) addDependentRequired(name string, names []string) {
	if len(names) == 0 {
		return
	}
	dr, _ := n.Constraints["dependentRequired"].(map[string][]string)
	if dr == nil {
		dr = map[string][]string{}
		n.setConstraint("dependentRequired", dr)
	}
	dr[name] = guards.SortedSet(append(dr[name], names...))
}

// setEnum stores the distinct values of arr sorted by canonical JSON.
func (n *SchemaNode) setEnum(arr []any, z *schemaNormalizer) error {
	type kv struct {
		key string
		val any
	}
	items := make([]kv, 0, len(arr))
	for _, v := range arr {
		key, err := canonicalValueString(v)
		if err != nil {
			if z != nil {
				return z.errorf("%v", err)
			}
			return err
		}
		items = append(items, kv{key, v})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].key < items[j].key })
	n.Enum, n.enumKeys, n.HasEnum = make([]any, 0, len(items)), make([]string, 0, len(items)), true
	for i, it := range items {
		if i > 0 && it.key == items[i-1].key {
			continue
		}
		n.Enum = append(n.Enum, it.val)
		n.enumKeys = append(n.enumKeys, it.key)
	}
	return nil
}

// applyConst folds const into the enum: an enum of one value, or the
// intersection when both are present.
func (n *SchemaNode) applyConst(v any, z *schemaNormalizer) error {
	if !n.HasEnum {
		return n.setEnum([]any{v}, z)
	}
	if n.EnumContains(v) {
		return n.setEnum([]any{v}, z)
	}
	n.Enum, n.enumKeys = []any{}, []string{}
	return nil
}

// normalizeBounds rewrites draft-04 boolean exclusive bounds as 2020-12
// numeric ones, drops keywords whose value constrains nothing and a bound
// made redundant by a stricter one.
func (n *SchemaNode) normalizeBounds(exMin, exMax *bool) {
	c := n.Constraints
	if exMin != nil && *exMin {
		if m, ok := c["minimum"]; ok {
			delete(c, "minimum")
			if em, ok := c["exclusiveMinimum"].(float64); !ok || m.(float64) > em {
				n.setConstraint("exclusiveMinimum", m)
			}
			c = n.Constraints
		}
	}
	if exMax != nil && *exMax {
		if m, ok := c["maximum"]; ok {
			delete(c, "maximum")
			if em, ok := c["exclusiveMaximum"].(float64); !ok || m.(float64) < em {
				n.setConstraint("exclusiveMaximum", m)
			}
			c = n.Constraints
		}
	}
	if c == nil {
		return
	}
	// An inclusive and an exclusive bound: keep the stricter one.
	if lo, ok := c["minimum"].(float64); ok {
		if elo, ok := c["exclusiveMinimum"].(float64); ok {
			if elo >= lo {
				delete(c, "minimum")
			} else {
				delete(c, "exclusiveMinimum")
			}
		}
	}
	if hi, ok := c["maximum"].(float64); ok {
		if ehi, ok := c["exclusiveMaximum"].(float64); ok {
			if ehi <= hi {
				delete(c, "maximum")
			} else {
				delete(c, "exclusiveMaximum")
			}
		}
	}
	for _, k := range [...]string{"minLength", "minItems", "minProperties"} {
		if f, ok := c[k].(float64); ok && f <= 0 {
			delete(c, k)
		}
	}
	if f, ok := c["minContains"].(float64); ok && f == 1 {
		delete(c, "minContains")
	}
	if len(c) == 0 {
		n.Constraints = nil
	}
}

// finish fills the pending nodes (aliases with siblings and Optional[X])
// now that every node they copy is complete.
func (z *schemaNormalizer) finish() error {
	for _, p := range z.pending {
		if err := z.resolvePending(p, 0); err != nil {
			return err
		}
	}
	return nil
}

func (z *schemaNormalizer) resolvePending(p *normPending, depth int) error {
	switch p.state {
	case 2:
		return nil
	case 1:
		return fmt.Errorf("%w: schema at %s: $ref loop that never reaches a schema", guards.ErrInvalid, p.where)
	}
	if depth > MaxSchemaDepth {
		return fmt.Errorf("%w: schema nests deeper than %d levels (at %s)", guards.ErrInvalid, MaxSchemaDepth, p.where)
	}
	p.state = 1
	if tp := z.byNode[p.target]; tp != nil {
		if err := z.resolvePending(tp, depth+1); err != nil {
			return err
		}
	}
	t := p.target
	var r *SchemaNode
	if p.addNull {
		r = nullableOf(t)
	} else {
		c := *t
		r = &c
	}
	if p.siblings != nil {
		r = mergeSiblings(r, p.siblings)
	}
	r.shared = true
	*p.node = *r
	p.state = 2
	return nil
}

// nullableOf returns anyOf [t, null] as one node when that is exact.
func nullableOf(t *SchemaNode) *SchemaNode {
	if t.False {
		return &SchemaNode{Types: TypeNull}
	}
	if t.AnyOf != nil || t.OneOf != nil || t.AllOf != nil || t.Not != nil || len(t.Applicators) > 0 || t.Ref != "" {
		return &SchemaNode{AnyOf: []*SchemaNode{t, {Types: TypeNull}}}
	}
	c := *t
	if c.Types != 0 {
		c.Types |= TypeNull
	}
	if c.HasEnum && !c.Nullable() {
		vals := append(append([]any{}, c.Enum...), nil)
		// setEnum cannot fail on values that were already canonicalised.
		_ = c.setEnum(vals, nil)
	}
	return &c
}

// mergeSiblings merges the keywords written next to a $ref (or a single
// allOf branch) into a copy of its target: annotations next to the
// reference win; required is the union, type and enum the intersection;
// any other keyword that both set makes the result allOf [r, s].
func mergeSiblings(r, s *SchemaNode) *SchemaNode {
	if r.False {
		return r
	}
	if siblingsConflict(r, s) {
		return &SchemaNode{AllOf: []*SchemaNode{r, s}}
	}
	out := *r
	if !out.intersectTypes(s.Types) { // no type in common: nothing validates
		return &SchemaNode{False: true}
	}
	out.mergeShape(s)
	out.mergeValues(s)
	out.mergeSubschemas(s)
	out.mergeAnnotations(s)
	return &out
}

// siblingsConflict reports whether r and s set a keyword that cannot be
// merged into one node: properties of both when either restricts the
// other's names (additionalProperties, patternProperties), items of both,
// two formats, two anyOf, oneOf, not or $ref, a constraint, applicator,
// dependent schema or property of the same name, or s false.
func siblingsConflict(r, s *SchemaNode) bool {
	sObj := s.Properties != nil || s.AdditionalProperties != nil || s.PatternProperties != nil
	rObj := r.Properties != nil || r.AdditionalProperties != nil || r.PatternProperties != nil
	if sObj && rObj && (r.AdditionalProperties != nil || r.PatternProperties != nil ||
		s.AdditionalProperties != nil || s.PatternProperties != nil) {
		return true
	}
	if (s.Items != nil || s.PrefixItems != nil) && (r.Items != nil || r.PrefixItems != nil) ||
		s.Format != "" && r.Format != "" && s.Format != r.Format ||
		(s.AnyOf != nil && r.AnyOf != nil) || (s.OneOf != nil && r.OneOf != nil) ||
		(s.Not != nil && r.Not != nil) || (s.Ref != "" && r.Ref != "") || s.False {
		return true
	}
	return sharesKey(r.Constraints, s.Constraints) || sharesKey(r.Applicators, s.Applicators) ||
		sharesKey(r.DependentSchemas, s.DependentSchemas) || sharesKey(r.Properties, s.Properties)
}

// sharesKey reports whether a and b have a key in common.
func sharesKey[V any](a, b map[string]V) bool {
	for k := range b {
		if _, both := a[k]; both {
			return true
		}
	}
	return false
}

// mergedCopy is a new map with a's entries, then b's.
func mergedCopy[V any](a, b map[string]V) map[string]V {
	out := make(map[string]V, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// intersectTypes narrows n's types to those t allows too (0: any); false
// when none is left.
func (n *SchemaNode) intersectTypes(t TypeSet) bool {
	switch {
	case t == 0:
	case n.Types == 0:
		n.Types = t
	default:
		n.Types = canonicalTypes(n.Types.Values() & t.Values())
		return n.Types != 0
	}
	return true
}

// mergeShape merges the object and array keywords of s into n (they do
// not conflict): properties and required are unions, the others s's.
func (n *SchemaNode) mergeShape(s *SchemaNode) {
	if s.Properties != nil {
		n.Properties = mergedCopy(n.Properties, s.Properties)
	}
	if s.Required != nil {
		n.Required = guards.SortedSet(append(append([]string{}, n.Required...), s.Required...))
	}
	if s.AdditionalProperties != nil {
		n.AdditionalProperties = s.AdditionalProperties
	}
	if s.PatternProperties != nil {
		n.PatternProperties = s.PatternProperties
	}
	if s.Items != nil {
		n.Items = s.Items
	}
	if s.PrefixItems != nil {
		n.PrefixItems = s.PrefixItems
	}
}

// mergeValues merges the value keywords of s into n: s's default and
// format, the intersection of the enums, the union of the constraints.
func (n *SchemaNode) mergeValues(s *SchemaNode) {
	if s.HasDefault {
		n.Default, n.HasDefault = s.Default, true
	}
	if s.HasEnum {
		if !n.HasEnum {
			n.Enum, n.enumKeys, n.HasEnum = s.Enum, s.enumKeys, true
		} else {
			var vals []any
			for i, v := range s.Enum {
				if j := sort.SearchStrings(n.enumKeys, s.enumKeys[i]); j < len(n.enumKeys) && n.enumKeys[j] == s.enumKeys[i] {
					vals = append(vals, v)
				}
			}
			_ = n.setEnum(append([]any{}, vals...), nil)
		}
	}
	if s.Format != "" {
		n.Format = s.Format
	}
	n.Constraints = mergeAnyMaps(n.Constraints, s.Constraints)
}

// mergeSubschemas merges the combinators and applicators of s into n:
// allOf, applicators and dependent schemas are unions, the others s's.
func (n *SchemaNode) mergeSubschemas(s *SchemaNode) {
	if s.AnyOf != nil {
		n.AnyOf = s.AnyOf
	}
	if s.OneOf != nil {
		n.OneOf = s.OneOf
	}
	if s.AllOf != nil {
		n.AllOf = append(append([]*SchemaNode{}, n.AllOf...), s.AllOf...)
	}
	if s.Not != nil {
		n.Not = s.Not
	}
	if s.Ref != "" {
		n.Ref = s.Ref
	}
	if len(s.Applicators) > 0 {
		n.Applicators = mergedCopy(n.Applicators, s.Applicators)
	}
	if len(s.DependentSchemas) > 0 {
		n.DependentSchemas = mergedCopy(n.DependentSchemas, s.DependentSchemas)
	}
}

// mergeAnnotations merges the annotations of s into n: s's description
// and title win, other keywords are a union.
func (n *SchemaNode) mergeAnnotations(s *SchemaNode) {
	if s.Description != "" {
		n.Description = s.Description
	}
	if s.Title != "" {
		n.Title = s.Title
	}
	n.Extra = mergeAnyMaps(n.Extra, s.Extra)
}

// mergeAnyMaps returns a new map with b's entries over a's; nil when both
// are empty.
func mergeAnyMaps(a, b map[string]any) map[string]any {
	if len(b) == 0 {
		return a
	}
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
