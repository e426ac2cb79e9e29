package toolschema

// This file judges the keywords whose subschemas apply to a value in other
// ways than a property or an array item does: not, if/then/else, contains,
// propertyNames, unevaluatedItems and unevaluatedProperties,
// dependentSchemas (draft-07 dependencies), patternProperties; and tuples
// (prefixItems, the array form of items with additionalItems before
// 2020-12, items:false). Each is compared by what it accepts, so that a
// change is judged widening or narrowing for the side the agent is on.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// judgeSub compares two subschemas with a separate walk and says whether
// the new one accepts less (narrows) or more (widens) than the old one,
// with what the walk found; nil stands for a missing subschema, which
// accepts everything.
func (d *schemaDiffer) judgeSub(o, n *SchemaNode) (narrows, widens bool, found []string, err error) {
	for _, side := range []ChangeSide{SideInput, SideOutput} {
		sub := &schemaDiffer{side: side, visits: d.visits, stack: append([]nodePair(nil), d.stack...), tools: d.tools, known: d.known}
		if err := sub.walk(o, n, "", ""); err != nil {
			return false, false, nil, err
		}
		d.visits = sub.visits
		for _, r := range sub.out {
			switch {
			case side == SideInput:
				found = append(found, r.Reason)
				narrows = narrows || r.Breaking // a writer of the old can fail: the new accepts less
			default:
				widens = widens || r.Breaking // a reader of the old can fail: the new accepts more
			}
		}
	}
	return narrows, widens, found, nil
}

// judged records a change of keyword k from o to n (nil: absent), judged by
// what its subschema accepts. flip is set for not, where accepting less
// inside accepts more outside.
func (d *schemaDiffer) judged(at diffRecord, where, k string, o, n *SchemaNode, flip bool) error {
	ob, nb, err := canonPair(o, n)
	if err != nil {
		return err
	}
	if string(ob) == string(nb) {
		return nil
	}
	oo, nn := o, n
	if flip { // an absent not is not {false}: nothing is excluded
		if oo == nil {
			oo = &SchemaNode{False: true}
		}
		if nn == nil {
			nn = &SchemaNode{False: true}
		}
	}
	narrows, widens, found, err := d.judgeSub(oo, nn)
	if err != nil {
		return err
	}
	if flip {
		narrows, widens = widens, narrows
	}
	r := at
	r.Kind, r.Keyword, r.Breaking = ConstraintChanged, k, d.breaking(narrows, widens)
	switch {
	case o == nil:
		r.Reason = fmt.Sprintf("%s gained %s (%s)", where, k, directionWord(narrows, widens))
	case n == nil:
		r.Reason = fmt.Sprintf("%s lost %s (%s)", where, k, directionWord(narrows, widens))
	default:
		r.Reason = fmt.Sprintf("%s %s %s", where, k, directionWord(narrows, widens))
	}
	if !narrows && !widens {
		r.Reason = fmt.Sprintf("%s %s changed in annotations only", where, k)
	}
	if len(found) > 0 {
		if len(found) > 3 {
			found = append(found[:3], "...")
		}
		r.Reason += " inside: " + strings.Join(found, "; ")
	}
	r.Side = d.side
	if o != nil {
		r.Before = ob
	}
	if n != nil {
		r.After = nb
	}
	d.out = append(d.out, r)
	return nil
}

func canonPair(o, n *SchemaNode) (ob, nb []byte, err error) {
	if o != nil {
		if ob, err = CanonicalSchemaJSON(o); err != nil {
			return nil, nil, err
		}
	}
	if n != nil {
		if nb, err = CanonicalSchemaJSON(n); err != nil {
			return nil, nil, err
		}
	}
	return ob, nb, nil
}

// compareApplicators judges not, the single-schema applicators,
// dependentSchemas and patternProperties of two schemas at one path.
func (d *schemaDiffer) compareApplicators(o, n *SchemaNode, at diffRecord, where string) error {
	if err := d.judged(at, where, "not", o.Not, n.Not, true); err != nil {
		return err
	}
	ifChanged := false
	if oi, ni := o.Applicators["if"], n.Applicators["if"]; oi != nil || ni != nil {
		ob, nb, err := canonPair(oi, ni)
		if err != nil {
			return err
		}
		ifChanged = string(ob) != string(nb)
	}
	for _, k := range unionKeys(o.Applicators, n.Applicators) {
		oa, na := o.Applicators[k], n.Applicators[k]
		if k == "if" || (ifChanged && (k == "then" || k == "else")) {
			// The condition changed: then and else now apply to other
			// values, which cannot be judged one way.
			ob, nb, err := canonPair(oa, na)
			if err != nil {
				return err
			}
			if string(ob) == string(nb) {
				continue
			}
			r := at
			r.Kind, r.Keyword, r.Breaking = ConstraintChanged, k, true
			r.Reason = fmt.Sprintf("%s %s changed with the condition (if) it depends on; compatibility cannot be told one way, so it counts as breaking", where, k)
			r.Side = d.side
			if oa != nil {
				r.Before = ob
			}
			if na != nil {
				r.After = nb
			}
			d.out = append(d.out, r)
			continue
		}
		if err := d.judged(at, where, k, oa, na, false); err != nil {
			return err
		}
	}
	for _, k := range unionKeys(o.DependentSchemas, n.DependentSchemas) {
		if err := d.judged(at, where, "dependentSchemas."+k, o.DependentSchemas[k], n.DependentSchemas[k], false); err != nil {
			return err
		}
	}
	for _, k := range unionKeys(o.PatternProperties, n.PatternProperties) {
		if err := d.judged(at, where, "patternProperties."+k, o.PatternProperties[k], n.PatternProperties[k], false); err != nil {
			return err
		}
	}
	return nil
}

// walkTuple compares two array schemas' positional items (prefixItems, or
// items as an array before 2020-12) position by position, a position that
// one version lacks against the other's items for the rest (nil: any,
// items:false: none), then the rest. Changes are reported at the items
// path ("coords[]") and name the position in their reason.
func (d *schemaDiffer) walkTuple(o, n *SchemaNode, oldPath, newPath string) error {
	d.dedupe = true
	count := max(len(o.PrefixItems), len(n.PrefixItems))
	for i := 0; i < count; i++ {
		oi, ni := o.Items, n.Items
		if i < len(o.PrefixItems) {
			oi = o.PrefixItems[i]
		}
		if i < len(n.PrefixItems) {
			ni = n.PrefixItems[i]
		}
		start := len(d.out)
		if err := d.walk(oi, ni, ItemsPath(oldPath), ItemsPath(newPath)); err != nil {
			return err
		}
		for j := start; j < len(d.out); j++ {
			d.out[j].Reason = fmt.Sprintf("tuple position %d: %s", i, d.out[j].Reason)
		}
	}
	if o.Items != nil || n.Items != nil {
		return d.walk(o.Items, n.Items, ItemsPath(oldPath), ItemsPath(newPath))
	}
	return nil
}

// openSchemaFor is what an object schema says about a property it does
// not declare: the first patternProperties schema whose pattern matches
// the name, else additionalProperties, else unevaluatedProperties; nil when
// nothing constrains it.
func openSchemaFor(n *SchemaNode, name string) (s *SchemaNode, keyword string) {
	for _, p := range unionKeys(n.PatternProperties, nil) {
		re, err := regexp.Compile(p)
		if err == nil && re.MatchString(name) {
			return n.PatternProperties[p], "patternProperties " + p
		}
	}
	if n.AdditionalProperties != nil {
		return n.AdditionalProperties, "additionalProperties"
	}
	if u := n.Applicators["unevaluatedProperties"]; u != nil {
		return u, "unevaluatedProperties"
	}
	return nil, ""
}

// schemaText is a schema's canonical JSON for a reason, shortened.
func schemaText(n *SchemaNode) string {
	b, err := CanonicalSchemaJSON(n)
	if err != nil {
		return "a schema"
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(json.RawMessage(b))
}
