package toolschema

// This file writes the canonical form of normalised schemas and tools (RFC
// 8785 JSON: keys sorted by UTF-16 code units, ECMAScript number format,
// minimal string escaping) and hashes it into a fingerprint.

import (
	"github.com/toolsentry/toolsentry/guards"

	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ToolDefinition is one tool as toolsentry compares it: an MCP Tool object
// (spec 2025-06-18 and later) or a bare JSON Schema taken as the input schema.
type ToolDefinition struct {
	// Name, Title and Description are the MCP Tool's fields ("" when absent).
	Name        string
	Title       string
	Description string
	// Input is the normalised inputSchema; never nil.
	Input *SchemaNode
	// Output is the normalised outputSchema; nil when the tool declares none.
	Output *SchemaNode
	// Annotations are the MCP ToolAnnotations with the spec's defaults filled
	// in (readOnlyHint false, destructiveHint true, idempotentHint false,
	// openWorldHint true), so that leaving a hint out equals stating its
	// default. Nil for a bare schema.
	Annotations map[string]any
	// Extra holds other fields of the Tool object that can change behaviour
	// (for example "execution"), verbatim; "_meta" and "icons" are not
	// among them.
	Extra map[string]any
	// Informational holds the Tool fields that change no call, "_meta" and
	// "icons", verbatim. They are no part of the fingerprint (a new build
	// stamp in _meta is not a new contract); ToolFieldsDigest covers them,
	// and the diff reports their changes as ToolFieldChanged.
	Informational map[string]any
	// Bare is true when the document was a bare JSON Schema.
	Bare bool
	// Version is the tool's nominal version (for example the MCP server's
	// serverInfo.version), set by the caller: identity, not schema, so it is
	// not part of the fingerprint. The seed's SCHEMA_MATCH digest hashes it.
	Version string
	// ID is the tool's identity where the caller has one beside its MCP name
	// (the stream processor's tool id, "github/list_issues" for a tool named
	// "list_issues"): like Version, identity and not schema. EvaluateDrift
	// names the tool by ID, else by Name, in the seed's digests.
	ID string
}

// toolAnnotationDefaults are the MCP ToolAnnotations hints and their
// defaults when absent.
var toolAnnotationDefaults = map[string]bool{
	"readOnlyHint":    false,
	"destructiveHint": true,
	"idempotentHint":  false,
	"openWorldHint":   true,
}

// ParseToolDocument reads an MCP Tool object, an MCP tools/list result
// ({"tools": [...]}, also inside a JSON-RPC response's "result") or a bare
// JSON Schema (taken as the input schema of a tool without a name). Tools
// come back in document order; errors wrap ErrInvalid.
func ParseToolDocument(raw []byte) ([]ToolDefinition, error) {
	if err := checkJSONDepth(raw, maxSchemaJSONDepth); err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: not valid JSON: %v", guards.ErrInvalid, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		if b, isBool := doc.(bool); isBool {
			n, err := normalizeSchemaValue(b)
			if err != nil {
				return nil, err
			}
			return []ToolDefinition{{Input: n, Bare: true}}, nil
		}
		return nil, fmt.Errorf("%w: want a JSON object (a tool, a tools/list result or a schema), got %s", guards.ErrInvalid, guards.JSONKind(doc))
	}
	if res, ok := m["result"].(map[string]any); ok && m["jsonrpc"] != nil {
		m = res
	}
	if list, ok := m["tools"].([]any); ok && m["inputSchema"] == nil && m["properties"] == nil && m["type"] == nil {
		tools := make([]ToolDefinition, 0, len(list))
		seen := make(map[string]bool, len(list))
		for i, e := range list {
			obj, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: tools[%d]: want an object, got %s", guards.ErrInvalid, i, guards.JSONKind(e))
			}
			t, err := parseMCPTool(obj)
			if err != nil {
				return nil, fmt.Errorf("tools[%d]: %w", i, err)
			}
			if seen[t.Name] {
				return nil, fmt.Errorf("%w: tools[%d]: tool %q listed twice", guards.ErrInvalid, i, t.Name)
			}
			seen[t.Name] = true
			tools = append(tools, t)
		}
		return tools, nil
	}
	if _, ok := m["inputSchema"]; ok {
		t, err := parseMCPTool(m)
		if err != nil {
			return nil, err
		}
		return []ToolDefinition{t}, nil
	}
	n, err := normalizeSchemaValue(m)
	if err != nil {
		return nil, err
	}
	return []ToolDefinition{{Input: n, Bare: true}}, nil
}

func parseMCPTool(m map[string]any) (ToolDefinition, error) {
	var t ToolDefinition
	for _, k := range guards.SortedObjectKeys(m) {
		v := m[k]
		switch k {
		case "name", "title", "description":
			s, ok := v.(string)
			if !ok {
				return t, fmt.Errorf("%w: tool %s: want a string, got %s", guards.ErrInvalid, k, guards.JSONKind(v))
			}
			switch k {
			case "name":
				t.Name = s
			case "title":
				t.Title = s
			default:
				t.Description = s
			}
		case "inputSchema", "outputSchema":
			if _, ok := v.(map[string]any); !ok {
				return t, fmt.Errorf("%w: tool %s: want an object, got %s", guards.ErrInvalid, k, guards.JSONKind(v))
			}
			n, err := normalizeSchemaValue(v)
			if err != nil {
				return t, fmt.Errorf("%s: %w", k, err)
			}
			if k == "inputSchema" {
				t.Input = n
			} else {
				t.Output = n
			}
		case "annotations":
			obj, ok := v.(map[string]any)
			if !ok {
				return t, fmt.Errorf("%w: tool annotations: want an object, got %s", guards.ErrInvalid, guards.JSONKind(v))
			}
			t.Annotations = make(map[string]any, len(obj)+len(toolAnnotationDefaults))
			for _, ak := range guards.SortedObjectKeys(obj) {
				av := obj[ak]
				if _, hint := toolAnnotationDefaults[ak]; hint {
					if _, ok := av.(bool); !ok {
						return t, fmt.Errorf("%w: tool annotations.%s: want a boolean, got %s", guards.ErrInvalid, ak, guards.JSONKind(av))
					}
				}
				t.Annotations[ak] = av
			}
		case "_meta", "icons":
			// Metadata and display only: no behaviour, no fingerprint.
			if t.Informational == nil {
				t.Informational = map[string]any{}
			}
			t.Informational[k] = v
		default:
			if t.Extra == nil {
				t.Extra = map[string]any{}
			}
			t.Extra[k] = v
		}
	}
	if t.Name == "" {
		return t, fmt.Errorf("%w: tool name: missing", guards.ErrInvalid)
	}
	if t.Input == nil {
		return t, fmt.Errorf("%w: tool %q inputSchema: missing", guards.ErrInvalid, t.Name)
	}
	if t.Annotations == nil {
		t.Annotations = make(map[string]any, len(toolAnnotationDefaults))
	}
	for k, def := range toolAnnotationDefaults {
		if _, ok := t.Annotations[k]; !ok {
			t.Annotations[k] = def
		}
	}
	return t, nil
}

// Fingerprint is "sha256:" and the hex SHA-256 of the tool's canonical form
// (CanonicalToolJSON): equal meaning gives an equal fingerprint, and any
// change of names, types, required, defaults, enums, formats, constraints,
// additionalProperties, descriptions or annotations a different one.
func Fingerprint(t ToolDefinition) (string, error) {
	b, err := CanonicalToolJSON(t)
	if err != nil {
		return "", err
	}
	return fingerprintOf(b), nil
}

// ToolFieldsDigest is "sha256:" and the hex SHA-256 of the RFC 8785 form of
// the tool's Informational fields (an object of "_meta" and "icons", those
// present; {} when none): what Fingerprint leaves out. Two versions with
// equal fingerprints and different digests differ only there.
func ToolFieldsDigest(t ToolDefinition) (string, error) {
	m := t.Informational
	if m == nil {
		m = map[string]any{}
	}
	b, err := appendCanonicalValue(make([]byte, 0, 64), m, 0)
	if err != nil {
		return "", err
	}
	return fingerprintOf(b), nil
}

// SchemaFingerprint is the fingerprint of one normalised schema alone.
func SchemaFingerprint(n *SchemaNode) (string, error) {
	b, err := CanonicalSchemaJSON(n)
	if err != nil {
		return "", err
	}
	return fingerprintOf(b), nil
}

func fingerprintOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CanonicalToolJSON is the RFC 8785 form of a tool: an object with
// "annotations", "description", "inputSchema", "name", "outputSchema",
// "title" and the tool's extra fields, empty ones left out; schemas as
// CanonicalSchemaJSON writes them.
func CanonicalToolJSON(t ToolDefinition) ([]byte, error) {
	if t.Input == nil {
		return nil, fmt.Errorf("%w: tool %q has no input schema", guards.ErrInvalid, t.Name)
	}
	e := newCanonEncoder()
	keys := make([]string, 0, 6+len(t.Extra))
	if t.Annotations != nil {
		keys = append(keys, "annotations")
	}
	if t.Description != "" {
		keys = append(keys, "description")
	}
	keys = append(keys, "inputSchema")
	if t.Name != "" {
		keys = append(keys, "name")
	}
	if t.Output != nil {
		keys = append(keys, "outputSchema")
	}
	if t.Title != "" {
		keys = append(keys, "title")
	}
	for k := range t.Extra {
		switch k {
		case "annotations", "description", "inputSchema", "name", "outputSchema", "title":
			return nil, fmt.Errorf("%w: tool extra field %q shadows a tool field", guards.ErrInvalid, k)
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	dst := make([]byte, 0, 1024)
	dst = append(dst, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCanonicalString(dst, k)
		dst = append(dst, ':')
		switch k {
		case "annotations":
			dst, err = appendCanonicalValue(dst, t.Annotations, 0)
		case "description":
			dst = appendCanonicalString(dst, t.Description)
		case "inputSchema":
			dst, _, err = e.node(dst, t.Input)
		case "name":
			dst = appendCanonicalString(dst, t.Name)
		case "outputSchema":
			dst, _, err = e.node(dst, t.Output)
		case "title":
			dst = appendCanonicalString(dst, t.Title)
		default:
			dst, err = appendCanonicalValue(dst, t.Extra[k], 0)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// CanonicalSchemaJSON is the RFC 8785 form of a normalised schema. Keywords
// appear as JSON Schema 2020-12 spells them; "type" is always a sorted list;
// required and enum are sorted; anyOf, oneOf and allOf branches are sorted by
// their own canonical text; schemas that mean "anything" (items {},
// additionalProperties true) are left out. A schema reached again inside
// itself (a recursive $ref) is written {"$cycle": N}, N the number of levels
// up to the schema it repeats.
func CanonicalSchemaJSON(n *SchemaNode) ([]byte, error) {
	e := newCanonEncoder()
	dst, _, err := e.node(make([]byte, 0, 1024), n)
	return dst, err
}

// canonBudget bounds the work of writing one canonical form: a schema whose
// shared $refs expand beyond it is rejected rather than written for minutes.
const canonBudget = 64 << 20

// canonVisitCost is what one node visit takes from the budget (a cached
// subtree costs its length in bytes).
const canonVisitCost = 64

type canonEncoder struct {
	stack  []*SchemaNode
	cache  map[*SchemaNode][]byte
	budget int
	keys   [][]string // reusable key slices, one per depth
}

func newCanonEncoder() *canonEncoder {
	return &canonEncoder{budget: canonBudget}
}

var errCanonBudget = fmt.Errorf("%w: schema expands beyond %d MiB of canonical form (too many shared $refs)", guards.ErrInvalid, canonBudget>>20)

// node appends the canonical form of n. low is the shallowest stack index
// a {"$cycle"} inside it points to (math.MaxInt when none): a subtree whose
// cycles all stay inside it is the same text wherever it appears, so a
// shared one is written once and copied after.
func (e *canonEncoder) node(dst []byte, n *SchemaNode) (out []byte, low int, err error) {
	low = math.MaxInt
	if n == nil || n.IsAny() {
		return append(dst, '{', '}'), low, nil
	}
	if n.False {
		return append(dst, "false"...), low, nil
	}
	for i, s := range e.stack {
		if s == n {
			dst = append(dst, `{"$cycle":`...)
			dst = strconv.AppendInt(dst, int64(len(e.stack)-i), 10)
			return append(dst, '}'), i, nil
		}
	}
	if n.shared {
		if b, ok := e.cache[n]; ok {
			if e.budget -= len(b); e.budget < 0 {
				return nil, 0, errCanonBudget
			}
			return append(dst, b...), low, nil
		}
	}
	if e.budget -= canonVisitCost; e.budget < 0 {
		return nil, 0, errCanonBudget
	}
	if len(e.stack) > MaxSchemaDepth {
		return nil, 0, fmt.Errorf("%w: schema nests deeper than %d levels", guards.ErrInvalid, MaxSchemaDepth)
	}
	depth := len(e.stack)
	e.stack = append(e.stack, n)
	defer func() { e.stack = e.stack[:depth] }()
	start := len(dst)

	dst = append(dst, '{')
	for i, k := range e.nodeKeys(n, depth) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCanonicalString(dst, k)
		dst = append(dst, ':')
		var sub int
		if dst, sub, err = e.member(dst, n, k); err != nil {
			return nil, 0, err
		}
		low = min(low, sub)
	}
	dst = append(dst, '}')
	if n.shared && low >= depth {
		if e.cache == nil {
			e.cache = map[*SchemaNode][]byte{}
		}
		e.cache[n] = slices.Clone(dst[start:])
	}
	return dst, low, nil
}

// nodeKeys are the keywords of n's canonical form, sorted by UTF-16 code
// units, in the encoder's reusable slice for the depth.
func (e *canonEncoder) nodeKeys(n *SchemaNode, depth int) []string {
	if len(e.keys) <= depth {
		e.keys = append(e.keys, make([]string, 0, 16))
	}
	keys := e.keys[depth][:0]
	// In code-unit order already, so that the sort below has little to do.
	if n.Ref != "" {
		keys = append(keys, "$ref")
	}
	if !n.AdditionalProperties.IsAny() {
		keys = append(keys, "additionalProperties")
	}
	if n.AllOf != nil {
		keys = append(keys, "allOf")
	}
	if n.AnyOf != nil {
		keys = append(keys, "anyOf")
	}
	if n.HasDefault {
		keys = append(keys, "default")
	}
	if len(n.DependentSchemas) > 0 {
		keys = append(keys, "dependentSchemas")
	}
	if n.Description != "" {
		keys = append(keys, "description")
	}
	if n.HasEnum {
		keys = append(keys, "enum")
	}
	if n.Format != "" {
		keys = append(keys, "format")
	}
	if !n.Items.IsAny() {
		keys = append(keys, "items")
	}
	if n.Not != nil {
		keys = append(keys, "not")
	}
	if n.OneOf != nil {
		keys = append(keys, "oneOf")
	}
	if len(n.PatternProperties) > 0 {
		keys = append(keys, "patternProperties")
	}
	if len(n.PrefixItems) > 0 {
		keys = append(keys, "prefixItems")
	}
	if len(n.Properties) > 0 {
		keys = append(keys, "properties")
	}
	if len(n.Required) > 0 {
		keys = append(keys, "required")
	}
	if n.Title != "" {
		keys = append(keys, "title")
	}
	if n.Types != 0 {
		keys = append(keys, "type")
	}
	for k := range n.Constraints {
		keys = append(keys, k)
	}
	for k := range n.Applicators {
		keys = append(keys, k)
	}
	for k := range n.Extra {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	e.keys[depth] = keys
	return keys
}

// member appends the canonical value of n's keyword k; low is as node's.
func (e *canonEncoder) member(dst []byte, n *SchemaNode, k string) (out []byte, low int, err error) {
	switch k {
	case "$ref":
		return appendCanonicalString(dst, n.Ref), math.MaxInt, nil
	case "additionalProperties":
		return e.node(dst, n.AdditionalProperties)
	case "allOf":
		return e.unordered(dst, n.AllOf)
	case "anyOf":
		return e.unordered(dst, n.AnyOf)
	case "oneOf":
		return e.unordered(dst, n.OneOf)
	case "default":
		dst, err = appendCanonicalValue(dst, n.Default, 0)
		return dst, math.MaxInt, err
	case "dependentSchemas":
		return e.nodeMap(dst, n.DependentSchemas)
	case "description":
		return appendCanonicalString(dst, n.Description), math.MaxInt, nil
	case "enum":
		return appendRawList(dst, n.enumKeys), math.MaxInt, nil
	case "format":
		return appendCanonicalString(dst, n.Format), math.MaxInt, nil
	case "items":
		return e.node(dst, n.Items)
	case "not":
		return e.node(dst, n.Not)
	case "patternProperties":
		return e.nodeMap(dst, n.PatternProperties)
	case "prefixItems":
		return e.ordered(dst, n.PrefixItems)
	case "properties":
		return e.nodeMap(dst, n.Properties)
	case "required":
		return appendStringList(dst, n.Required), math.MaxInt, nil
	case "title":
		return appendCanonicalString(dst, n.Title), math.MaxInt, nil
	case "type":
		return appendTypeList(dst, n.Types), math.MaxInt, nil
	}
	if c, ok := n.Applicators[k]; ok {
		return e.node(dst, c)
	}
	v, ok := n.Constraints[k]
	if !ok {
		v = n.Extra[k]
	}
	dst, err = appendCanonicalValue(dst, v, 0)
	return dst, math.MaxInt, err
}

// ordered writes a list of schemas in its order (prefixItems).
func (e *canonEncoder) ordered(dst []byte, list []*SchemaNode) ([]byte, int, error) {
	low := math.MaxInt
	dst = append(dst, '[')
	for i, c := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		var l int
		var err error
		if dst, l, err = e.node(dst, c); err != nil {
			return nil, 0, err
		}
		low = min(low, l)
	}
	return append(dst, ']'), low, nil
}

// appendRawList writes a JSON array of values already in canonical text.
func appendRawList(dst []byte, items []string) []byte {
	dst = append(dst, '[')
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, it...)
	}
	return append(dst, ']')
}

// appendStringList writes a JSON array of strings.
func appendStringList(dst []byte, items []string) []byte {
	dst = append(dst, '[')
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCanonicalString(dst, it)
	}
	return append(dst, ']')
}

// sortedTypeNames are the type names in code-unit order with their bits.
var sortedTypeNames = [...]struct {
	name string
	bit  TypeSet
}{{"array", TypeArray}, {"boolean", TypeBoolean}, {"integer", TypeInteger}, {"null", TypeNull}, {"number", TypeNumber}, {"object", TypeObject}, {"string", TypeString}}

func appendTypeList(dst []byte, t TypeSet) []byte {
	dst = append(dst, '[')
	first := true
	for _, tn := range sortedTypeNames {
		if t&tn.bit != 0 {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, '"')
			dst = append(dst, tn.name...)
			dst = append(dst, '"')
		}
	}
	return append(dst, ']')
}

func (e *canonEncoder) nodeMap(dst []byte, m map[string]*SchemaNode) ([]byte, int, error) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, compareUTF16)
	low := math.MaxInt
	dst = append(dst, '{')
	for i, name := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCanonicalString(dst, name)
		dst = append(dst, ':')
		var l int
		var err error
		if dst, l, err = e.node(dst, m[name]); err != nil {
			return nil, 0, err
		}
		low = min(low, l)
	}
	return append(dst, '}'), low, nil
}

// unordered writes a list of schemas whose order has no meaning, sorted by
// their canonical text.
func (e *canonEncoder) unordered(dst []byte, list []*SchemaNode) ([]byte, int, error) {
	low := math.MaxInt
	parts := make([][]byte, len(list))
	for i, c := range list {
		b, l, err := e.node(nil, c)
		if err != nil {
			return nil, 0, err
		}
		parts[i] = b
		low = min(low, l)
	}
	slices.SortFunc(parts, func(a, b []byte) int { return compareUTF16(string(a), string(b)) })
	dst = append(dst, '[')
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p...)
	}
	return append(dst, ']'), low, nil
}

// canonicalValueString is the RFC 8785 text of a decoded JSON value.
func canonicalValueString(v any) (string, error) {
	b, err := appendCanonicalValue(nil, v, 0)
	return string(b), err
}

// appendCanonicalValue appends the RFC 8785 text of a decoded JSON value:
// nil, bool, float64, json.Number, string, []any, map[string]any, and the
// []string and map[string][]string that normalised constraints hold.
func appendCanonicalValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxSchemaJSONDepth {
		return nil, fmt.Errorf("%w: value nests deeper than %d levels", guards.ErrInvalid, maxSchemaJSONDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case float64:
		s, err := jcs.NumberToJSON(x)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", guards.ErrInvalid, err)
		}
		return append(dst, s...), nil
	case int:
		return appendCanonicalValue(dst, float64(x), depth)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, fmt.Errorf("%w: number %s is out of range", guards.ErrInvalid, x)
		}
		return appendCanonicalValue(dst, f, depth)
	case string:
		return appendCanonicalString(dst, x), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonicalValue(dst, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case []string:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonicalString(dst, e)
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonicalString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendCanonicalValue(dst, x[k], depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case map[string][]string: // dependentRequired: rare, so written as the general object
		m := make(map[string]any, len(x))
		for k, v := range x {
			m[k] = v
		}
		return appendCanonicalValue(dst, m, depth)
	}
	return nil, fmt.Errorf("%w: %T is not a JSON value", guards.ErrInvalid, v)
}

// appendCanonicalString writes s as RFC 8785 does (guards.Canonical):
// quote, backslash and the control characters escaped, everything else as
// UTF-8, invalid UTF-8 as U+FFFD.
func appendCanonicalString(dst []byte, s string) []byte {
	return guards.AppendJSONString(dst, s, guards.Canonical)
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts
// object keys.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ka, kb := utf16Key(ra), utf16Key(rb)
			if ka < kb {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

// utf16Key maps a rune to its UTF-16 code units packed high to low, so
// that keys compare as the code unit sequences do.
func utf16Key(r rune) uint32 {
	if r >= 0x10000 {
		r -= 0x10000
		return (0xd800+uint32(r>>10))<<16 | (0xdc00 + uint32(r&0x3ff))
	}
	return uint32(r) << 16
}
