package workflow

// Compatibility between stages (the seed's "semantic contamination").
//
// Data flow: in a chain each stage receives the previous stage's output. A
// parallel or k_of_n block passes its input to every branch, and its
// successor receives the union of the branches' outputs (an object merge:
// a field is present when some branch guarantees it, and may carry any
// declaring branch's value). A conditional passes its input to every branch,
// and its successor receives exactly one branch's output, so it must fit each
// of them. An edge is a consumer tool call with the outputs feeding it.
//
// An edge is checked by schema when the consumer has an input_schema and
// every producer has an output_schema; otherwise by the seed's rule, the
// producer's output_schema_hash equal to the consumer's
// expected_input_schema_hash (one edge per producer).
//
// Schema check: every field the consumer's input requires must be guaranteed
// by the producers' output (listed in "required" there), else it is
// "missing" (not declared) or "optional" (declared, not required); the
// types the producers may send must be accepted by the consumer
// (TypeSet.Accepts: integer fits number, a nullable output does not fit a
// non-null input), else "type"; an output enum must lie within the input's
// enum, else "enum". Fields the consumer declares but does not require are
// type-checked when a producer declares them. The check descends into
// required and declared properties and array items. allOf on either side is
// a conjunction; anyOf/oneOf in an output are alternatives that must all
// fit; anyOf/oneOf in an input are alternatives of which one must fit (the
// issues of the closest one are reported). A pair of (input schema node,
// output schema nodes) met again is not checked again, which ends recursive
// schemas; its issues are reported at the first path only. Field paths are
// written as the schema diff writes them (JoinSchemaPath, ItemsPath):
// "user.id", "items[].sku", and "" for the value itself.

import (
	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"

	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The problems a field can have at an edge.
const (
	FieldMissing  = "missing"  // required by the consumer, not declared by the producers
	FieldOptional = "optional" // required by the consumer, declared but not guaranteed
	FieldType     = "type"     // the producers may send a type the consumer does not accept
	FieldEnum     = "enum"     // the producers may send a value outside the consumer's enum
)

// The ways an edge is checked.
const (
	CheckSchema = "schema"
	CheckHash   = "hash"
)

// FieldIssue is one field of the consumer's input that the producers'
// output does not provide as required.
type FieldIssue struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
	Want    string `json:"want,omitempty"`
	Got     string `json:"got,omitempty"`
}

// EdgeIncompatibility is an edge whose output does not fit its input: From
// are the producing tools, To the consuming tool at path At.
type EdgeIncompatibility struct {
	From  []string `json:"from"`
	To    string   `json:"to"`
	At    string   `json:"at"`
	Check string   `json:"check"`
	// Fields name the problems found by a schema check.
	Fields []FieldIssue `json:"fields,omitempty"`
	// The two hashes compared by a hash check.
	OutputSchemaHash        string `json:"output_schema_hash,omitempty"`
	ExpectedInputSchemaHash string `json:"expected_input_schema_hash,omitempty"`
}

// describe is the incompatibility in a directive's words.
func (e EdgeIncompatibility) describe() string {
	head := strings.Join(e.From, " + ") + " output schema != " + e.To + " input schema"
	if e.Check == CheckHash {
		return head
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		field := f.Field
		if field == "" {
			field = "the value"
		}
		switch f.Problem {
		case FieldMissing:
			parts[i] = field + " missing"
		case FieldOptional:
			parts[i] = field + " not guaranteed"
		default:
			parts[i] = field + " is " + f.Got + ", want " + f.Want
		}
	}
	return head + ": " + strings.Join(parts, "; ")
}

// dataFlow is what reaches a consumer: one tool call's output, the union of
// parallel branches' outputs, or one of a conditional's alternatives.
type dataFlow struct {
	kind flowKind
	leaf int
	of   []*dataFlow
}

type flowKind uint8

const (
	flowLeaf flowKind = iota
	flowUnion
	flowAlt
)

type flowEdge struct {
	from *dataFlow
	to   int // leaf index
}

func combineFlows(kind flowKind, of []*dataFlow) *dataFlow {
	if len(of) == 1 {
		return of[0]
	}
	return &dataFlow{kind: kind, of: of}
}

// buildFlow returns the leaves receiving n's input, n's output, and appends
// n's edges in data-flow order; next numbers the leaves in structure order.
func buildFlow(n Node, next *int, edges *[]flowEdge) (entries []int, out *dataFlow) {
	switch n.Kind {
	case KindTool:
		i := *next
		*next++
		return []int{i}, &dataFlow{kind: flowLeaf, leaf: i}
	case KindChain:
		var prev *dataFlow
		for i, c := range n.Of {
			var inner []flowEdge
			ent, o := buildFlow(c, next, &inner)
			if i == 0 {
				entries = ent
			} else {
				for _, e := range ent {
					*edges = append(*edges, flowEdge{from: prev, to: e})
				}
			}
			*edges = append(*edges, inner...)
			prev = o
		}
		return entries, prev
	}
	outs := make([]*dataFlow, len(n.Of))
	for i, c := range n.Of {
		var ent []int
		ent, outs[i] = buildFlow(c, next, edges)
		entries = append(entries, ent...)
	}
	if n.Kind == KindConditional {
		return entries, combineFlows(flowAlt, outs)
	}
	return entries, combineFlows(flowUnion, outs)
}

func (f *dataFlow) leaves(into []int) []int {
	if f.kind == flowLeaf {
		return append(into, f.leaf)
	}
	for _, c := range f.of {
		into = c.leaves(into)
	}
	return into
}

// toolSchemas are a tool's normalised schemas (nil when absent).
type toolSchemas struct{ in, out *toolschema.SchemaNode }

// normalizeToolSchemas normalises the schemas of the used tools.
func normalizeToolSchemas(w Workflow, p *structProgram) (map[string]toolSchemas, error) {
	out := make(map[string]toolSchemas, len(p.tools))
	for _, id := range p.tools {
		t := w.Tools[id]
		var s toolSchemas
		var err error
		if hasSchemaDoc(t.InputSchema) {
			if s.in, err = toolschema.NormalizeSchema(t.InputSchema); err != nil {
				return nil, fmt.Errorf("tools.%s.input_schema: %w", id, err)
			}
		}
		if hasSchemaDoc(t.OutputSchema) {
			if s.out, err = toolschema.NormalizeSchema(t.OutputSchema); err != nil {
				return nil, fmt.Errorf("tools.%s.output_schema: %w", id, err)
			}
		}
		out[id] = s
	}
	return out, nil
}

// edgeReport is the outcome of checking every edge of a structure.
type edgeReport struct {
	found     []EdgeIncompatibility // the first MaxReportedIncompatibilities
	firstEdge int                   // the index of found[0]'s edge in data-flow order
	total     int                   // every incompatible edge
}

func (r *edgeReport) add(e EdgeIncompatibility, edge int) {
	if r.total == 0 {
		r.firstEdge = edge
	}
	r.total++
	if len(r.found) < MaxReportedIncompatibilities {
		r.found = append(r.found, e)
	}
}

// incompatibilities checks every edge of the structure, in data-flow order.
func incompatibilities(w Workflow, p *structProgram, schemas map[string]toolSchemas) (edgeReport, error) {
	var edges []flowEdge
	next := 0
	buildFlow(w.Structure, &next, &edges)
	var report edgeReport
	steps := 0
	for i, e := range edges {
		to := p.tools[p.leaves[e.to].tool]
		producers := e.from.leaves(nil)
		var from []string
		seen := map[string]bool{}
		bySchema := schemas[to].in != nil
		for _, l := range producers {
			id := p.tools[p.leaves[l].tool]
			if !seen[id] {
				seen[id] = true
				from = append(from, id)
			}
			bySchema = bySchema && schemas[id].out != nil
		}
		at := p.leaves[e.to].path
		if !bySchema {
			want := w.Tools[to].ExpectedInputSchemaHash
			for _, id := range from {
				if got := w.Tools[id].OutputSchemaHash; got != want {
					report.add(EdgeIncompatibility{
						From: []string{id}, To: to, At: at, Check: CheckHash,
						OutputSchemaHash: got, ExpectedInputSchemaHash: want,
					}, i)
				}
			}
			continue
		}
		c := newCompatChecker(&steps)
		c.check(schemas[to].in, c.flowExpr(e.from, p, schemas), "", 0)
		if steps > MaxCompatibilitySteps {
			return edgeReport{}, fmt.Errorf("%w: %s: the schemas need more than %d comparisons to check", guards.ErrInvalid, at, MaxCompatibilitySteps)
		}
		if len(c.issues) > 0 {
			report.add(EdgeIncompatibility{From: from, To: to, At: at, Check: CheckSchema, Fields: c.issues}, i)
		}
	}
	return report, nil
}

// sexpr describes what a producer may send at one place in its output.
type sexpr struct {
	kind sexprKind
	node *toolschema.SchemaNode // sLeaf: the schema's own keywords; nil is any value
	of   []*sexpr
}

type sexprKind uint8

const (
	sLeaf  sexprKind = iota
	sUnion           // merged parallel outputs: any member's value may be the one seen
	sAlt             // exactly one member, not known which (conditional, anyOf, oneOf)
	sAll             // the value satisfies every member (allOf)
)

// MaxCompatibilitySteps bounds the schema comparisons of one workflow's
// compatibility check (nested anyOfs in inputs multiply them); a workflow
// that needs more is rejected with an error wrapping ErrInvalid rather than
// checked in part.
const MaxCompatibilitySteps = 1_000_000

// MaxReportedIncompatibilities is how many incompatible edges a manifest
// lists (the first in data-flow order); WorkflowManifest.IncompatibleEdges
// counts them all. It keeps a verdict within a message's size.
const MaxReportedIncompatibilities = 64

type compatChecker struct {
	issues []FieldIssue
	seen   map[string]bool
	steps  *int
	ids    map[*toolschema.SchemaNode]int // small numbers for the memo's keys, shared
}

func newCompatChecker(steps *int) *compatChecker {
	return &compatChecker{seen: map[string]bool{}, steps: steps, ids: map[*toolschema.SchemaNode]int{}}
}

func (c *compatChecker) flowExpr(f *dataFlow, p *structProgram, schemas map[string]toolSchemas) *sexpr {
	switch f.kind {
	case flowLeaf:
		return expandSchema(schemas[p.tools[p.leaves[f.leaf].tool]].out, map[*toolschema.SchemaNode]bool{}, 0)
	case flowUnion:
		e := &sexpr{kind: sUnion}
		for _, m := range f.of {
			e.of = append(e.of, c.flowExpr(m, p, schemas))
		}
		return e
	default:
		e := &sexpr{kind: sAlt}
		for _, m := range f.of {
			e.of = append(e.of, c.flowExpr(m, p, schemas))
		}
		return e
	}
}

// expandSchema turns a producer's schema node and its combinators into an
// expression; a node already being expanded (a cycle) stands for itself.
func expandSchema(n *toolschema.SchemaNode, open map[*toolschema.SchemaNode]bool, depth int) *sexpr {
	base := &sexpr{kind: sLeaf, node: n}
	if n == nil || open[n] || depth > toolschema.MaxSchemaDepth || (n.AllOf == nil && n.AnyOf == nil && n.OneOf == nil) {
		return base
	}
	open[n] = true
	defer delete(open, n)
	all := &sexpr{kind: sAll, of: []*sexpr{base}}
	for _, m := range n.AllOf {
		all.of = append(all.of, expandSchema(m, open, depth+1))
	}
	for _, alts := range [][]*toolschema.SchemaNode{n.AnyOf, n.OneOf} {
		if alts == nil {
			continue
		}
		alt := &sexpr{kind: sAlt}
		for _, m := range alts {
			alt.of = append(alt.of, expandSchema(m, open, depth+1))
		}
		all.of = append(all.of, alt)
	}
	return all
}

// id numbers a schema node for memo keys (nil is 0).
func (c *compatChecker) id(n *toolschema.SchemaNode) int {
	if n == nil {
		return 0
	}
	i, ok := c.ids[n]
	if !ok {
		i = len(c.ids) + 1
		c.ids[n] = i
	}
	return i
}

// signature identifies an expression by the schema nodes it is made of.
func (c *compatChecker) signature(b []byte, e *sexpr) []byte {
	if e.kind == sLeaf {
		return strconv.AppendInt(b, int64(c.id(e.node)), 36)
	}
	b = append(b, "LUAX"[e.kind], '(')
	for i, m := range e.of {
		if i > 0 {
			b = append(b, ',')
		}
		b = c.signature(b, m)
	}
	return append(b, ')')
}

// sent is the set of JSON types the expression may produce, with integer
// included in number; 0 means no value at all.
func (e *sexpr) sent() toolschema.TypeSet {
	switch e.kind {
	case sLeaf:
		switch {
		case e.node == nil:
			return toolschema.TypeAny
		case e.node.False:
			return 0
		case e.node.HasEnum:
			return e.node.Types.Values() & toolschema.EnumTypes(e.node.Enum)
		}
		return e.node.Types.Values()
	case sAll:
		t := toolschema.TypeAny
		for _, m := range e.of {
			t &= m.sent()
		}
		return t
	default:
		var t toolschema.TypeSet
		for _, m := range e.of {
			t |= m.sent()
		}
		return t
	}
}

// guaranteed reports whether the field is always present in the object.
func (e *sexpr) guaranteed(field string) bool {
	switch e.kind {
	case sLeaf:
		if e.node == nil {
			return false
		}
		i := sort.SearchStrings(e.node.Required, field)
		return i < len(e.node.Required) && e.node.Required[i] == field
	case sAlt:
		for _, m := range e.of {
			if !m.guaranteed(field) {
				return false
			}
		}
		return true
	default:
		for _, m := range e.of {
			if m.guaranteed(field) {
				return true
			}
		}
		return false
	}
}

// project is what the expression may send in the field; nil when no
// member declares it.
func (e *sexpr) project(field string) *sexpr {
	if e.kind == sLeaf {
		if e.node == nil {
			return nil
		}
		if s, ok := e.node.Properties[field]; ok {
			return expandSchema(s, map[*toolschema.SchemaNode]bool{}, 0)
		}
		if e.guaranteed(field) {
			return &sexpr{kind: sLeaf}
		}
		return nil
	}
	return e.projectEach(func(m *sexpr) *sexpr { return m.project(field) })
}

// items is what the expression may send as an array item; nil when it
// cannot send an array.
func (e *sexpr) items() *sexpr {
	if e.kind == sLeaf {
		if e.sent()&toolschema.TypeArray == 0 {
			return nil
		}
		if e.node == nil || e.node.Items == nil {
			return &sexpr{kind: sLeaf}
		}
		return expandSchema(e.node.Items, map[*toolschema.SchemaNode]bool{}, 0)
	}
	return e.projectEach(func(m *sexpr) *sexpr { return m.items() })
}

func (e *sexpr) projectEach(f func(*sexpr) *sexpr) *sexpr {
	out := &sexpr{kind: e.kind}
	for _, m := range e.of {
		if p := f(m); p != nil {
			out.of = append(out.of, p)
		}
	}
	switch len(out.of) {
	case 0:
		return nil
	case 1:
		return out.of[0]
	}
	return out
}

// enumOutside lists the enum values the expression may send that want's
// enum does not hold. A member without an enum is not checked; neither is
// an allOf (its enums intersect).
func (e *sexpr) enumOutside(want *toolschema.SchemaNode, into []string) []string {
	switch e.kind {
	case sLeaf:
		if e.node == nil || !e.node.HasEnum {
			return into
		}
		for _, v := range e.node.Enum {
			if !want.EnumContains(v) {
				text, _ := json.Marshal(v)
				into = append(into, string(text))
			}
		}
		return into
	case sAll:
		return into
	default:
		for _, m := range e.of {
			into = m.enumOutside(want, into)
		}
		return into
	}
}

func (c *compatChecker) add(field, problem, want, got string) {
	c.issues = append(c.issues, FieldIssue{Field: field, Problem: problem, Want: want, Got: got})
}

// check records where got does not provide what want requires at path.
func (c *compatChecker) check(want *toolschema.SchemaNode, got *sexpr, path string, depth int) {
	if want == nil || got == nil || depth > toolschema.MaxSchemaDepth || *c.steps > MaxCompatibilitySteps {
		return
	}
	*c.steps++
	key := strconv.AppendInt(nil, int64(c.id(want)), 36)
	key = c.signature(append(key, '|'), got)
	if c.seen[string(key)] {
		return
	}
	c.seen[string(key)] = true

	sent := got.sent()
	if sent == 0 { // the producers never send a value here
		return
	}
	if want.False {
		c.add(path, FieldType, "nothing", sentTypeNames(sent))
		return
	}
	for _, m := range want.AllOf {
		c.check(m, got, path, depth+1)
	}
	for _, alts := range [][]*toolschema.SchemaNode{want.AnyOf, want.OneOf} {
		if alts != nil {
			c.checkAlternatives(alts, got, path, depth)
		}
	}
	if want.Types != 0 && !want.Types.Accepts(sent) {
		c.add(path, FieldType, sentTypeNames(want.Types.Values()), sentTypeNames(sent))
		return
	}
	if want.HasEnum {
		if outside := got.enumOutside(want, nil); len(outside) > 0 {
			c.add(path, FieldEnum, "one of the input's enum", strings.Join(outside, ", "))
		}
	}
	if sent&toolschema.TypeObject != 0 {
		c.checkFields(want, got, path, depth)
	}
	if want.Items != nil {
		if items := got.items(); items != nil {
			c.check(want.Items, items, toolschema.ItemsPath(path), depth+1)
		}
	}
}

func (c *compatChecker) checkFields(want *toolschema.SchemaNode, got *sexpr, path string, depth int) {
	names := append([]string(nil), want.Required...)
	for name := range want.Properties {
		names = append(names, name)
	}
	required := map[string]bool{}
	for _, r := range want.Required {
		required[r] = true
	}
	for _, name := range guards.SortedSet(names) {
		fpath := toolschema.JoinSchemaPath(path, name)
		sub := got.project(name)
		if required[name] && !got.guaranteed(name) {
			if sub == nil {
				c.add(fpath, FieldMissing, "", "")
			} else {
				c.add(fpath, FieldOptional, "required", "optional")
			}
			continue
		}
		c.check(want.Properties[name], sub, fpath, depth+1)
	}
}

// checkAlternatives: want is one of alts; report nothing if got fits one,
// else the issues of the alternative with the fewest (the first on a tie).
func (c *compatChecker) checkAlternatives(alts []*toolschema.SchemaNode, got *sexpr, path string, depth int) {
	var best []FieldIssue
	for i, a := range alts {
		sub := &compatChecker{seen: map[string]bool{}, steps: c.steps, ids: c.ids}
		sub.check(a, got, path, depth+1)
		if len(sub.issues) == 0 {
			return
		}
		if i == 0 || len(sub.issues) < len(best) {
			best = sub.issues
		}
	}
	c.issues = append(c.issues, best...)
}

// sentTypeNames writes a values set (integer included in number) as the type
// names a reader expects: "any", "string", "null|string", "number".
func sentTypeNames(t toolschema.TypeSet) string {
	if t&toolschema.TypeNumber != 0 {
		t &^= toolschema.TypeInteger
	}
	if t == toolschema.TypeAny&^toolschema.TypeInteger {
		return "any"
	}
	return t.String()
}
