package toolschema

// This file compares combinators by what they accept: allOf merged into one
// schema, anyOf and oneOf as unions of alternatives that are matched across
// versions by structure, not by position. A change inside a matched
// alternative is reported at the field's path with its own kind; the types
// of the union are compared once, as a whole; an alternative added or
// removed where the other version has one of the same type widens or
// narrows the field.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

func hasUnion(n *SchemaNode) bool { return n != nil && (n.AnyOf != nil || n.OneOf != nil) }

// flatten returns n with its allOf branches (duplicates dropped) and its
// other keywords merged into one schema, when they merge exactly; n itself
// when they do not (two branches constraining the same keyword, say).
func (d *schemaDiffer) flatten(n *SchemaNode) *SchemaNode {
	if n == nil || n.AllOf == nil {
		return n
	}
	if f, ok := d.flat[n]; ok {
		return f
	}
	if d.flat == nil {
		d.flat = map[*SchemaNode]*SchemaNode{}
	}
	d.flat[n] = n // a branch that reaches n again keeps it as it is
	f := d.mergeAllOf(n)
	d.flat[n] = f
	return f
}

func (d *schemaDiffer) mergeAllOf(n *SchemaNode) *SchemaNode {
	shell := *n
	shell.AllOf = nil
	type branch struct {
		key  string
		node *SchemaNode
	}
	var branches []branch
	for _, b := range n.AllOf {
		fb := d.flatten(b)
		if fb.AllOf != nil {
			return n
		}
		key, err := CanonicalSchemaJSON(fb)
		if err != nil {
			return n
		}
		branches = append(branches, branch{string(key), fb})
	}
	slices.SortFunc(branches, func(a, b branch) int { return strings.Compare(a.key, b.key) })
	branches = slices.CompactFunc(branches, func(a, b branch) bool { return a.key == b.key })
	acc := branches[0].node
	merge := func(s *SchemaNode) bool {
		m := mergeSiblings(acc, s)
		if len(m.AllOf) == 2 && m.AllOf[0] == acc && m.AllOf[1] == s {
			return false // they constrain the same keyword: no exact merge
		}
		acc = m
		return true
	}
	for _, b := range branches[1:] {
		if !merge(b.node) {
			return n
		}
	}
	if !shell.IsAny() && !merge(&shell) { // the node's own keywords last: its annotations win
		return n
	}
	if acc == branches[0].node {
		c := *acc
		acc = &c
	}
	return acc
}

// unionForm is a schema seen as a union: its annotations, and the
// alternatives it accepts.
type unionForm struct {
	// shell holds the node's annotations: description, title, default and
	// annotation keywords (examples, deprecated, x-*).
	shell *SchemaNode
	// alts are the alternatives with the node's other keywords distributed
	// into each, sorted by their canonical form (keys); a branch that
	// accepts null alone is not one, it makes the union nullable.
	alts []*SchemaNode
	keys []string
	// types are the JSON types the union accepts (0: any), null included
	// when it accepts null.
	types TypeSet
	// none is true when no alternative accepts anything.
	none bool
	// oneOf is true when the alternatives are oneOf's (exclusive).
	oneOf bool
	// plain is true when the node has nothing but annotations besides its
	// anyOf or oneOf, so that a union holding it as a branch may take its
	// alternatives as its own.
	plain bool
}

// unionPending marks a union being computed: a branch that reaches its own
// node again is kept as an opaque alternative.
var unionPending = &unionForm{}

// union returns n as a union of alternatives; nil when it cannot be seen as
// one (anyOf and oneOf together, or a form that cannot be written).
func (d *schemaDiffer) union(n *SchemaNode) *unionForm {
	if n.AnyOf != nil && n.OneOf != nil {
		return nil
	}
	if u, ok := d.alts[n]; ok {
		if u == unionPending {
			return nil
		}
		return u
	}
	if d.alts == nil {
		d.alts = map[*SchemaNode]*unionForm{}
	}
	d.alts[n] = unionPending
	u := d.makeUnion(n)
	d.alts[n] = u
	return u
}

func (d *schemaDiffer) makeUnion(n *SchemaNode) *unionForm {
	shell, rest := splitAnnotations(n)
	u := &unionForm{shell: shell, oneOf: n.OneOf != nil}
	branches := n.AnyOf
	if u.oneOf {
		branches = n.OneOf
	}
	rest.AnyOf, rest.OneOf = nil, nil
	u.plain = rest.IsAny()
	nullable := false
	var alts []*SchemaNode
	if !hasUnion(n) {
		if !n.False {
			alts = append(alts, rest)
		}
	} else {
		var add func(b *SchemaNode)
		add = func(b *SchemaNode) {
			fb := d.flatten(b)
			if hasUnion(fb) && (fb.OneOf != nil) == u.oneOf {
				if inner := d.union(fb); inner != nil && inner.plain {
					alts = append(alts, inner.alts...)
					nullable = nullable || inner.types&TypeNull != 0 && inner.types != 0
					return
				}
			}
			alt := fb
			if !u.plain {
				alt = mergeSiblings(fb, rest)
			}
			switch {
			case alt.False, alt.HasEnum && altTypes(alt) == 0: // accepts nothing
			case isPureNull(alt):
				nullable = true
			default:
				alts = append(alts, alt)
			}
		}
		for _, b := range branches {
			add(b)
		}
	}
	alts = collapseEnums(alts)
	type keyed struct {
		key  string
		node *SchemaNode
	}
	list := make([]keyed, 0, len(alts))
	for _, a := range alts {
		k, err := CanonicalSchemaJSON(a)
		if err != nil {
			return nil
		}
		list = append(list, keyed{string(k), a})
	}
	slices.SortStableFunc(list, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	list = slices.CompactFunc(list, func(a, b keyed) bool { return a.key == b.key })
	anyType := false
	for _, k := range list {
		u.alts = append(u.alts, k.node)
		u.keys = append(u.keys, k.key)
		t := altTypes(k.node)
		if t == 0 {
			anyType = true
		}
		u.types |= t
	}
	if nullable {
		u.types |= TypeNull
	}
	switch {
	case anyType:
		u.types = 0
	case u.types == 0:
		u.none = true
	default:
		u.types = canonicalTypes(u.types)
	}
	return u
}

// splitAnnotations copies n's annotations (description, title, default,
// annotation keywords) into shell and the rest into rest.
func splitAnnotations(n *SchemaNode) (shell, rest *SchemaNode) {
	s := &SchemaNode{Description: n.Description, Title: n.Title, Default: n.Default, HasDefault: n.HasDefault}
	r := *n
	r.Description, r.Title, r.Default, r.HasDefault = "", "", nil, false
	r.shared = false
	if len(n.Extra) > 0 {
		r.Extra = nil
		for k, v := range n.Extra {
			if annotationKeyword(k) {
				s.setExtra(k, v)
			} else {
				r.setExtra(k, v)
			}
		}
	}
	return s, &r
}

// isPureNull reports whether a schema accepts null and nothing else, saying
// nothing more.
func isPureNull(n *SchemaNode) bool {
	c := *n
	c.Description, c.Title, c.Extra, c.shared = "", "", nil, false
	if c.Types == TypeNull {
		c.Types = 0
		return c.IsAny()
	}
	if c.HasEnum && len(c.Enum) == 1 && c.Enum[0] == nil {
		c.Types, c.HasEnum, c.Enum, c.enumKeys = 0, false, nil, nil
		return c.IsAny()
	}
	return false
}

// collapseEnums merges the alternatives that are enums and nothing else
// (zod's union of literals, anyOf of consts) into one enum.
func collapseEnums(alts []*SchemaNode) []*SchemaNode {
	var enums []*SchemaNode
	var out []*SchemaNode
	for _, a := range alts {
		c := *a
		c.Types, c.HasEnum, c.Enum, c.enumKeys, c.Description, c.Title, c.shared = 0, false, nil, nil, "", "", false
		if a.HasEnum && c.IsAny() {
			enums = append(enums, a)
		} else {
			out = append(out, a)
		}
	}
	if len(enums) < 2 {
		return alts
	}
	m := &SchemaNode{}
	var vals []any
	for _, e := range enums {
		vals = append(vals, e.Enum...)
	}
	types := TypeSet(0)
	typed := true
	for _, e := range enums {
		if e.Types == 0 {
			typed = false
		}
		types |= e.Types
	}
	if typed {
		m.Types = canonicalTypes(types)
	}
	// The values were canonicalised once already: setEnum cannot fail.
	_ = m.setEnum(vals, nil)
	return append(out, m)
}

// altTypes are the JSON types an alternative accepts (0: any), null
// included: an enum's are its values' types (0 when none of them is
// accepted: an enum that accepts nothing is never an alternative).
func altTypes(n *SchemaNode) TypeSet {
	if n.HasEnum {
		t := EnumTypes(n.Enum)
		if n.Types != 0 {
			t &= n.Types.Values()
		}
		return canonicalTypes(t)
	}
	return n.Types
}

// walkUnion compares two schemas seen as unions at one path. skipTypes is
// set when the pair is itself two alternatives of an enclosing union, whose
// types were compared there.
func (d *schemaDiffer) walkUnion(uo, un *unionForm, o, n *SchemaNode, oldPath, newPath string, skipTypes bool) error {
	where := describePath(oldPath)
	at := diffRecord{Change: Change{Path: oldPath}, newPath: newPath, oldNode: o, newNode: n}
	// Annotations: description, title, default.
	d.skipTypes = true
	if err := d.walk(uo.shell, un.shell, oldPath, newPath); err != nil {
		return err
	}
	if !skipTypes {
		to := &SchemaNode{Types: uo.types, False: uo.none}
		tn := &SchemaNode{Types: un.types, False: un.none}
		r := at
		r.oldNode, r.newNode = to, tn
		d.compareTypes(to, tn, r, where)
	}
	// oneOf rejects a value that two alternatives accept: anyOf to oneOf
	// narrows, unless the alternatives cannot overlap.
	if uo.oneOf != un.oneOf {
		excl := uo
		if un.oneOf {
			excl = un
		}
		if len(excl.alts) > 1 && !disjointTypes(excl.alts) {
			r := at
			r.Kind, r.Keyword = ConstraintChanged, "oneOf"
			r.Breaking = d.breaking(un.oneOf, uo.oneOf)
			if un.oneOf {
				r.Reason = where + " alternatives became exclusive (anyOf to oneOf): narrowed"
			} else {
				r.Reason = where + " alternatives are no longer exclusive (oneOf to anyOf): widened"
			}
			d.rec(r, absent, absent)
		}
	}

	po, pn := matchAlternatives(uo, un)
	for i, j := range po {
		if j < 0 || uo.keys[i] == un.keys[j] {
			continue
		}
		d.skipTypes = true
		if err := d.walk(uo.alts[i], un.alts[j], oldPath, newPath); err != nil {
			return err
		}
	}
	d.skipTypes = false
	// An alternative without a counterpart where the other version has one
	// of the same types: one more (or one less) shape of that type. Where
	// the other version has none of its types, the type change says it.
	sameType := func(t TypeSet, u *unionForm) bool {
		for _, a := range u.alts {
			if altTypes(a) == t {
				return true
			}
		}
		return false
	}
	kw := func(u *unionForm) string {
		if u.oneOf {
			return "oneOf"
		}
		return "anyOf"
	}
	for i, j := range po {
		if j >= 0 || !(skipTypes || sameType(altTypes(uo.alts[i]), un)) {
			continue
		}
		r := at
		r.Kind, r.Keyword, r.Breaking = ConstraintChanged, kw(uo), d.breaking(true, false)
		r.oldNode = uo.alts[i]
		r.Reason = fmt.Sprintf("%s no longer accepts the alternative %s (narrowed)", where, uo.keys[i])
		d.rec(r, json.RawMessage(uo.keys[i]), absent)
	}
	for j, i := range pn {
		if i >= 0 || !(skipTypes || sameType(altTypes(un.alts[j]), uo)) {
			continue
		}
		r := at
		r.Kind, r.Keyword, r.Breaking = ConstraintChanged, kw(un), d.breaking(false, true)
		r.newNode = un.alts[j]
		r.Reason = fmt.Sprintf("%s accepts a new alternative %s (widened)", where, un.keys[j])
		d.rec(r, absent, json.RawMessage(un.keys[j]))
	}
	return nil
}

// disjointTypes reports whether no two alternatives share a JSON type, so
// that no value can match two of them.
func disjointTypes(alts []*SchemaNode) bool {
	var seen TypeSet
	for _, a := range alts {
		t := altTypes(a)
		if t == 0 || seen&t.Values() != 0 {
			return false
		}
		seen |= t.Values()
	}
	return true
}

// matchAlternatives pairs the alternatives of two unions: equal ones first,
// then by types: the one alternative of a type on each side, else by a
// discriminating constant property, else by the most property names in
// common. po[i] is the new index paired with old alternative i (-1: none),
// pn[j] the old index paired with new alternative j.
func matchAlternatives(uo, un *unionForm) (po, pn []int) {
	po, pn = make([]int, len(uo.alts)), make([]int, len(un.alts))
	for i := range po {
		po[i] = -1
	}
	for j := range pn {
		pn[j] = -1
	}
	pair := func(i, j int) { po[i], pn[j] = j, i }
	for i, k := range uo.keys {
		for j, l := range un.keys {
			if pn[j] < 0 && k == l {
				pair(i, j)
				break
			}
		}
	}
	// The rest, grouped by types.
	groups := map[TypeSet][2][]int{}
	var order []TypeSet
	for i, a := range uo.alts {
		if po[i] < 0 {
			t := altTypes(a)
			g, ok := groups[t]
			if !ok {
				order = append(order, t)
			}
			g[0] = append(g[0], i)
			groups[t] = g
		}
	}
	for j, a := range un.alts {
		if pn[j] < 0 {
			t := altTypes(a)
			g, ok := groups[t]
			if !ok {
				order = append(order, t)
			}
			g[1] = append(g[1], j)
			groups[t] = g
		}
	}
	for _, t := range order {
		g := groups[t]
		os, ns := g[0], g[1]
		if len(os) == 0 || len(ns) == 0 {
			continue
		}
		if len(os) == 1 && len(ns) == 1 {
			pair(os[0], ns[0])
			continue
		}
		// A property with one constant value that tells the alternatives
		// apart (a discriminated union: "kind": {"const": "email"}).
		count := map[string][2]int{}
		tagsO := make([][]string, len(os))
		tagsN := make([][]string, len(ns))
		for x, i := range os {
			tagsO[x] = discriminators(uo.alts[i])
			for _, tag := range tagsO[x] {
				c := count[tag]
				c[0]++
				count[tag] = c
			}
		}
		for y, j := range ns {
			tagsN[y] = discriminators(un.alts[j])
			for _, tag := range tagsN[y] {
				c := count[tag]
				c[1]++
				count[tag] = c
			}
		}
		for x, i := range os {
			for _, tag := range tagsO[x] {
				if po[i] >= 0 || count[tag] != [2]int{1, 1} {
					continue
				}
				for y, j := range ns {
					if pn[j] < 0 && slices.Contains(tagsN[y], tag) {
						pair(i, j)
						break
					}
				}
			}
		}
		// The most property names in common.
		for _, i := range os {
			if po[i] >= 0 {
				continue
			}
			best, bestScore := -1, 0
			for _, j := range ns {
				if pn[j] >= 0 {
					continue
				}
				if s := sharedNames(uo.alts[i], un.alts[j]); s > bestScore {
					best, bestScore = j, s
				}
			}
			if best >= 0 {
				pair(i, best)
			}
		}
	}
	return po, pn
}

// discriminators are "name=value" for the properties of an object schema
// that have one constant value.
func discriminators(n *SchemaNode) []string {
	var out []string
	for _, name := range sortedNodeKeys(n.Properties) {
		if p := n.Properties[name]; p.HasEnum && len(p.enumKeys) == 1 {
			out = append(out, name+"="+p.enumKeys[0])
		}
	}
	return out
}

func sharedNames(a, b *SchemaNode) int {
	s := 0
	for name := range a.Properties {
		if _, ok := b.Properties[name]; ok {
			s++
		}
	}
	return s
}

func sortedNodeKeys(m map[string]*SchemaNode) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
