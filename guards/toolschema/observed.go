package toolschema

// An agent that keeps sending the payload it was written for, after the tool
// changed under it, is the seed's silent rename. Its invocations show the
// field paths it sends and their value types (never the values). This file
// turns that surface into the input schema the agent behaves as if the tool
// still had, so that the ordinary diff, verdict and migration apply to it.

import (
	"github.com/toolsentry/toolsentry/guards"

	"fmt"
	"sort"
)

// InputDeviations returns the paths of fields (the keys of fields, paths as
// JoinSchemaPath writes them) that the tool's input schema does not declare,
// or declares with a type that does not accept what the agent sends. Paths
// under a combinator (anyOf, oneOf, allOf) or a $ref to another document are
// not judged: without a single declared shape there is nothing to lack.
func InputDeviations(input *SchemaNode, fields map[string]TypeSet) ([]string, error) {
	var out []string
	for _, p := range sortedPaths(fields) {
		toks, err := parseSchemaPath(p)
		if err != nil {
			return nil, err
		}
		node, judged := lookupDeclared(input, toks)
		switch {
		case !judged:
		case node == nil:
			out = append(out, p)
		case fields[p] != 0 && !acceptsTypes(node, fields[p]):
			out = append(out, p)
		}
	}
	return out, nil
}

// ObservedInputTool returns the tool as the agent's payloads describe it: the
// current tool with its input schema cut down to the fields the agent sends
// (with their declared definitions), the fields it sends that the tool does
// not declare added with the types observed, and declared fields whose type
// does not accept the observed values given the observed type. Diffing it
// against current (EvaluateDrift(observed, current, surface)) reports the
// agent's fields that the tool lost (a rename where a declared field it does
// not send matches by name or shape), type changes, and fields the tool now
// requires that the agent does not send, with the migration of its payload.
func ObservedInputTool(current ToolDefinition, fields map[string]TypeSet) (ToolDefinition, error) {
	root := &pathTrie{}
	for _, p := range sortedPaths(fields) {
		toks, err := parseSchemaPath(p)
		if err != nil {
			return ToolDefinition{}, err
		}
		t := root
		for _, tok := range toks {
			if tok.alts != nil {
				return ToolDefinition{}, fmt.Errorf("%w: observed path %q has a repetition", guards.ErrInvalid, p)
			}
			t = t.child(tok)
		}
		t.types |= fields[p]
	}
	observed := current
	observed.Input = root.observe(current.Input, 0)
	return observed, nil
}

type pathTrie struct {
	types TypeSet
	names map[string]*pathTrie
	items *pathTrie
}

func (t *pathTrie) child(tok pathTok) *pathTrie {
	if tok.items {
		if t.items == nil {
			t.items = &pathTrie{}
		}
		t.types |= TypeArray
		return t.items
	}
	if t.names == nil {
		t.names = map[string]*pathTrie{}
	}
	c := t.names[tok.name]
	if c == nil {
		c = &pathTrie{}
		t.names[tok.name] = c
	}
	t.types |= TypeObject
	return c
}

// observe returns the schema the agent's sent values describe at this node,
// starting from the declared node decl (nil when the tool does not declare
// it).
func (t *pathTrie) observe(decl *SchemaNode, depth int) *SchemaNode {
	if hasCombinator(decl) {
		return decl // not judged: kept as declared
	}
	var n SchemaNode
	if decl != nil {
		n = *decl // a shallow copy: its maps are replaced below, never written
	}
	if decl == nil || t.types != 0 && !acceptsTypes(decl, t.types) {
		n.False = false
		n.Types = normalTypes(t.types)
	}
	if depth >= MaxSchemaDepth {
		return &n
	}
	if t.names != nil || n.Properties != nil {
		props := make(map[string]*SchemaNode, len(t.names))
		for name, c := range t.names {
			var d *SchemaNode
			if decl != nil {
				d = decl.Properties[name]
			}
			props[name] = c.observe(d, depth+1)
		}
		var required []string
		for _, r := range n.Required {
			if _, sent := t.names[r]; sent {
				required = append(required, r)
			}
		}
		n.Properties, n.Required = props, required
		if len(props) == 0 {
			n.Properties = nil
		}
	}
	if t.items != nil {
		var d *SchemaNode
		if decl != nil {
			d = decl.Items
		}
		n.Items = t.items.observe(d, depth+1)
	}
	return &n
}

func hasCombinator(n *SchemaNode) bool {
	return n != nil && (n.AnyOf != nil || n.OneOf != nil || n.AllOf != nil || n.Ref != "")
}

// lookupDeclared walks toks through the declared properties and items of n.
// judged is false where a combinator or an external $ref hides the shape.
func lookupDeclared(n *SchemaNode, toks []pathTok) (node *SchemaNode, judged bool) {
	for _, tok := range toks {
		if n == nil || hasCombinator(n) {
			return nil, n == nil
		}
		if tok.items {
			if len(n.PrefixItems) > 0 {
				// A tuple: "[]" stands for every position, each with its
				// own schema; not judged here (the diff judges tuples).
				return nil, false
			}
			if n.Items == nil {
				if n.constrainsNothing() {
					return nil, false
				}
				return nil, true
			}
			n = n.Items
			continue
		}
		child, ok := n.Properties[tok.name]
		if !ok {
			if len(n.PatternProperties) > 0 {
				return nil, false // a pattern may declare it; not judged here
			}
			if n.constrainsNothing() {
				// A schema without type, properties or any constraint
				// (anything goes, as a typeless inputSchema, annotated
				// or not): it declares nothing, so nothing sent under it
				// is undeclared, as with items.
				return nil, false
			}
			return nil, true
		}
		n = child
	}
	return n, true
}

// acceptsTypes reports whether a declared node accepts values of the types
// sent, judging by type alone.
func acceptsTypes(n *SchemaNode, sent TypeSet) bool {
	return !n.False && n.Types.Accepts(sent)
}

// normalTypes writes a type set as the normaliser does: number absorbs
// integer.
func normalTypes(t TypeSet) TypeSet {
	if t&TypeNumber != 0 {
		t &^= TypeInteger
	}
	return t
}

func sortedPaths(fields map[string]TypeSet) []string {
	out := make([]string, 0, len(fields))
	for p := range fields {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
