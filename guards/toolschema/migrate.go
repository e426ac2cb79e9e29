package toolschema

// This file derives an executable migration of an agent's input payload from
// a diff (the seed's migration_predicate) and applies it.

import (
	"github.com/toolsentry/toolsentry/guards"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MigrationOp names one kind of migration step.
type MigrationOp string

// The migration steps.
const (
	// OpMove moves the value at Path to To (a renamed field). Both paths have
	// the same parent; "[]" in it applies the move in every array item.
	OpMove MigrationOp = "move"
	// OpConvert converts the value at Path to Type (string, number, integer
	// or boolean) when that is lossless, and fails otherwise.
	OpConvert MigrationOp = "convert"
	// OpMapEnum replaces a string at Path by its counterpart in Mapping.
	OpMapEnum MigrationOp = "map_enum"
	// OpAddIfAbsent sets Path to Value when its parent object lacks it: the
	// old default the agent relied on, pinned.
	OpAddIfAbsent MigrationOp = "add_if_absent"
)

// MigrationStep is one step of a plan. JSON field names are stable.
type MigrationStep struct {
	Op   MigrationOp `json:"op"`
	Path string      `json:"path"`
	// To is the destination of a move.
	To string `json:"to,omitempty"`
	// Type is the target JSON type of a convert.
	Type string `json:"type,omitempty"`
	// Mapping maps old enum strings to new ones (map_enum).
	Mapping map[string]string `json:"mapping,omitempty"`
	// Value is the value add_if_absent sets (canonical JSON).
	Value  json.RawMessage `json:"value,omitempty"`
	Reason string          `json:"reason"`
}

// The conditions under which a MigrationBlocker stops a payload.
const (
	BlockWhenPresent = "present" // the payload has a value at Path
	BlockWhenAbsent  = "absent"  // the payload's object at Path's parent lacks it
	BlockWhenValue   = "value"   // the value at Path is one of Values
	BlockWhenNotIn   = "not_in"  // the value at Path is none of Values
)

// MigrationBlocker is a change that no step can migrate safely: a field
// removed without counterpart, an enum value with no mapping, a meaning
// changed only in a description. A payload that meets When at Path cannot
// be migrated; other payloads can.
type MigrationBlocker struct {
	Path   string            `json:"path"`
	When   string            `json:"when"`
	Values []json.RawMessage `json:"values,omitempty"`
	Reason string            `json:"reason"`
}

// MigrationPlan rewrites an agent's input payload for the new schema. Paths
// name the payload as it is when they apply: the steps run in order (the
// planner lists moves first, parents before children), then every blocker
// is checked on the result.
type MigrationPlan struct {
	Steps   []MigrationStep    `json:"steps"`
	Blocked []MigrationBlocker `json:"blocked"`
}

// ErrCannotMigrate is returned (as a *MigrationError) when a payload cannot
// be migrated without losing or misreading data.
var ErrCannotMigrate = errors.New("payload cannot be migrated")

// MigrationError names the payload path that cannot be migrated and why.
type MigrationError struct {
	Path   string // concrete: array positions filled in, as in "items[2].id"
	Reason string
}

func (e *MigrationError) Error() string {
	p := e.Path
	if p == "" {
		p = "the payload"
	}
	return fmt.Sprintf("cannot migrate %s: %s", p, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCannotMigrate) true.
func (e *MigrationError) Unwrap() error { return ErrCannotMigrate }

// planMigration turns the input side of a diff into a plan; loops are the
// diff's recursion points.
func planMigration(recs []diffRecord, loops []schemaLoop) MigrationPlan {
	p := &planner{recs: recs, added: map[string]bool{}, structural: map[string]bool{}}
	// Which paths have changes other than descriptions (a description
	// change alone may be a change of meaning).
	for _, r := range recs {
		if r.Side == SideInput && r.Kind != DescriptionChanged {
			p.structural[r.Path] = true
		}
	}
	for _, r := range recs {
		if r.Side == SideInput {
			p.plan(r)
		}
	}
	return p.finish(loops)
}

// planner collects a migration plan's steps by kind (applied in the order
// moves, pinned defaults, conversions, enum maps) and its blockers.
type planner struct {
	recs                        []diffRecord
	moves, adds, converts, maps []MigrationStep
	blocked                     []MigrationBlocker
	added                       map[string]bool // paths that have an add step
	structural                  map[string]bool // paths with more than a description change
}

func (p *planner) block(b MigrationBlocker) { p.blocked = append(p.blocked, b) }

// addPin adds the value v at path when a payload omits it, once per path.
func (p *planner) addPin(path string, v any, reason string) {
	if path == "" || p.added[path] {
		return
	}
	p.added[path] = true
	p.adds = append(p.adds, MigrationStep{Op: OpAddIfAbsent, Path: path, Value: canonicalRaw(v), Reason: reason})
}

// plan adds what the input-side change r needs: a step that carries an old
// payload over, or a blocker where none can.
func (p *planner) plan(r diffRecord) {
	switch r.Kind {
	case FieldRenamed:
		parent, _ := splitLastPathSegment(r.newPath)
		_, oldLeaf := splitLastPathSegment(r.Path)
		from := joinEscaped(parent, oldLeaf)
		p.moves = append(p.moves, MigrationStep{Op: OpMove, Path: from, To: r.newPath,
			Reason: fmt.Sprintf("field %s was renamed to %s", r.Path, r.newPath)})
	case FieldRemoved:
		p.planRemoved(r)
	case TypeChanged:
		if r.Path == "" && r.newNode.Types.Values()&TypeObject != 0 && !r.newNode.False {
			return // the arguments are an object, which the new root takes
		}
		step, blocker := planConvert(r)
		if step != nil {
			p.converts = append(p.converts, *step)
		}
		if blocker != nil {
			p.block(*blocker)
		}
	case NullableChanged:
		if !r.newNode.Nullable() && r.Path != "" { // the arguments are never null
			p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenValue, Values: []json.RawMessage{json.RawMessage("null")},
				Reason: fmt.Sprintf("%s no longer accepts null and null has no counterpart", describePath(r.Path))})
		}
	case EnumChanged:
		p.planEnum(r)
	case DefaultChanged:
		if r.oldNode.HasDefault {
			p.addPin(r.newPath, r.oldNode.Default, fmt.Sprintf("pin the old default of %s that an agent omitting it relied on", r.Path))
		}
	case RequiredChanged, FieldAdded:
		p.planRequired(r)
	case DescriptionChanged:
		if r.Keyword == "description" && r.Path != "" && !p.structural[r.Path] && r.descClass != DescriptionReworded {
			p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenPresent,
				Reason: fmt.Sprintf("only the description of %s changed: its meaning may have changed, and no migration can tell", r.Path)})
		}
	}
}

// planRemoved blocks a payload that sends a removed field (its value would
// be lost), and one that omits it when it had a default no new field
// restores.
func (p *planner) planRemoved(r diffRecord) {
	if r.oldNode.False {
		return // no valid payload carried it
	}
	p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenPresent,
		Reason: fmt.Sprintf("field %s was removed without a counterpart: its value would be lost", r.Path)})
	if r.oldNode.HasDefault && !restoredDefault(p.recs, r) {
		p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenAbsent,
			Reason: fmt.Sprintf("field %s (default %s) was removed: a payload that omits it relied on its default, and no new field restores it",
				r.Path, canonicalRaw(r.oldNode.Default))})
	}
}

// planEnum maps the enum values that changed spelling and blocks those
// with no counterpart (or every value outside a new enum).
func (p *planner) planEnum(r diffRecord) {
	o, n := r.oldNode, r.newNode
	switch {
	case !n.HasEnum:
	case !o.HasEnum:
		vals := make([]json.RawMessage, len(n.enumKeys))
		for i, k := range n.enumKeys {
			vals[i] = json.RawMessage(k)
		}
		p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenNotIn, Values: vals,
			Reason: fmt.Sprintf("%s is now restricted to an enum: a value outside it has no mapping", describePath(r.Path))})
	default:
		mapping, unmapped := mapEnum(o, n)
		if len(mapping) > 0 {
			p.maps = append(p.maps, MigrationStep{Op: OpMapEnum, Path: r.newPath, Mapping: mapping,
				Reason: fmt.Sprintf("enum values of %s changed spelling", describePath(r.Path))})
		}
		if len(unmapped) > 0 {
			p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenValue, Values: unmapped,
				Reason: fmt.Sprintf("enum values of %s were removed and have no unique counterpart", describePath(r.Path))})
		}
	}
}

// planRequired supplies a newly required field's default (the old one
// first), or blocks a payload that omits it when there is none.
func (p *planner) planRequired(r diffRecord) {
	if !r.required {
		return
	}
	switch {
	case r.oldNode != nil && r.oldNode.HasDefault:
		p.addPin(r.newPath, r.oldNode.Default, fmt.Sprintf("%s is now required: pin the old default", r.Path))
	case r.newNode.HasDefault:
		p.addPin(r.newPath, r.newNode.Default, fmt.Sprintf("%s is now required: send its default", r.Path))
	default:
		p.block(MigrationBlocker{Path: r.newPath, When: BlockWhenAbsent,
			Reason: fmt.Sprintf("%s is now required and has no default to supply", r.Path)})
	}
}

// finish orders the steps, repeats them at every depth of a recursive
// schema (compared at its first occurrence only), and sorts and dedupes
// the blockers.
func (p *planner) finish(loops []schemaLoop) MigrationPlan {
	plan := MigrationPlan{Steps: []MigrationStep{}, Blocked: []MigrationBlocker{}}
	plan.Steps = append(plan.Steps, p.moves...)
	plan.Steps = append(plan.Steps, p.adds...)
	plan.Steps = append(plan.Steps, p.converts...)
	plan.Steps = append(plan.Steps, p.maps...)
	plan.Blocked = append(plan.Blocked, p.blocked...)
	for i := range plan.Steps {
		plan.Steps[i].Path = repeatPath(plan.Steps[i].Path, loops)
		if plan.Steps[i].To != "" {
			plan.Steps[i].To = repeatPath(plan.Steps[i].To, loops)
		}
	}
	for i := range plan.Blocked {
		plan.Blocked[i].Path = repeatPath(plan.Blocked[i].Path, loops)
	}
	slices.SortStableFunc(plan.Blocked, func(a, b MigrationBlocker) int {
		return strings.Compare(a.Path+"\x00"+a.When, b.Path+"\x00"+b.When)
	})
	plan.Blocked = slices.CompactFunc(plan.Blocked, func(a, b MigrationBlocker) bool {
		return a.Path == b.Path && a.When == b.When && a.Reason == b.Reason
	})
	return plan
}

// restoredDefault reports whether a field added next to the removed one
// (same parent, same side) restores its default: the same type and the
// same default value.
func restoredDefault(recs []diffRecord, removed diffRecord) bool {
	parent, _ := splitLastPathSegment(removed.Path)
	for _, a := range recs {
		if a.Side != removed.Side || a.Kind != FieldAdded || a.newNode == nil || !a.newNode.HasDefault {
			continue
		}
		if p, _ := splitLastPathSegment(a.Path); p == parent && sameValue(a.newNode.Default, removed.oldNode.Default) &&
			coreTypes(a.newNode) == coreTypes(removed.oldNode) {
			return true
		}
	}
	return false
}

// repeatPath rewrites a path (new names) that lies inside recursive
// schemas: below each loop's entry, a repetition group of the loop's steps
// ("filter.op" with filter repeating at filter.and[] becomes
// "filter(.and[])*.op"). Inner loops are rewritten first.
func repeatPath(path string, loops []schemaLoop) string {
	type group struct {
		entry string
		steps []string
	}
	var groups []group
	for _, l := range loops {
		if l.side != SideInput || !pathWithin(path, l.newEntry) {
			continue
		}
		step := strings.TrimPrefix(l.newRepeat, l.newEntry)
		if l.newEntry != "" && !strings.HasPrefix(step, ".") && !strings.HasPrefix(step, "[") {
			continue // not below the entry after all (a name sharing its prefix)
		}
		found := false
		for i := range groups {
			if groups[i].entry == l.newEntry {
				groups[i].steps = append(groups[i].steps, step)
				found = true
			}
		}
		if !found {
			groups = append(groups, group{l.newEntry, []string{step}})
		}
	}
	// Innermost (longest) entries first, so outer prefixes stay plain.
	slices.SortFunc(groups, func(a, b group) int { return len(b.entry) - len(a.entry) })
	for _, g := range groups {
		steps := guards.SortedSet(g.steps)
		for i, s := range steps {
			if !strings.HasPrefix(s, ".") && !strings.HasPrefix(s, "[") {
				steps[i] = "." + s
			}
		}
		rest := path[len(g.entry):]
		if g.entry == "" && rest != "" && !strings.HasPrefix(rest, "[") {
			rest = "." + rest
		}
		path = g.entry + "(" + strings.Join(steps, "|") + ")*" + rest
	}
	return path
}

// pathWithin reports whether path is base or below it.
func pathWithin(path, base string) bool {
	return base == "" || path == base || strings.HasPrefix(path, base+".") || strings.HasPrefix(path, base+"[]")
}

var scalarTypeNames = map[TypeSet]string{TypeString: "string", TypeNumber: "number", TypeInteger: "integer", TypeBoolean: "boolean"}

// planConvert plans a type change: a convert step when the new schema has
// one scalar type, a blocker when the old types cannot be converted at all.
func planConvert(r diffRecord) (*MigrationStep, *MigrationBlocker) {
	o, n := r.oldNode, r.newNode
	oc := coreTypes(o)
	if oc == 0 || (coreTypes(n) != 0 && n.Types.Accepts(o.Types&^TypeNull|boolSet(o.Types == 0, TypeAny&^TypeNull))) {
		return nil, nil // every old value is still accepted
	}
	target := n.Types &^ TypeNull
	name, scalar := scalarTypeNames[target]
	if !scalar || n.False {
		return nil, &MigrationBlocker{Path: r.newPath, When: BlockWhenPresent,
			Reason: fmt.Sprintf("%s changed type from %s to %s: no lossless conversion", describePath(r.Path), typeLabel(o), typeLabel(n))}
	}
	if oc&(TypeString|TypeNumber|TypeInteger|TypeBoolean) == 0 {
		return nil, &MigrationBlocker{Path: r.newPath, When: BlockWhenPresent,
			Reason: fmt.Sprintf("%s changed type from %s to %s: no lossless conversion", describePath(r.Path), typeLabel(o), typeLabel(n))}
	}
	return &MigrationStep{Op: OpConvert, Path: r.newPath, Type: name,
		Reason: fmt.Sprintf("%s changed type from %s to %s", describePath(r.Path), typeLabel(o), typeLabel(n))}, nil
}

// mapEnum maps each removed old string value to the one new value equal to
// it ignoring case; the rest are unmapped.
func mapEnum(o, n *SchemaNode) (map[string]string, []json.RawMessage) {
	mapping := map[string]string{}
	var unmapped []json.RawMessage
	for i, v := range o.Enum {
		if n.EnumContains(v) {
			continue
		}
		s, isStr := v.(string)
		match, count := "", 0
		if isStr {
			for _, nv := range n.Enum {
				if ns, ok := nv.(string); ok && strings.EqualFold(s, ns) {
					match, count = ns, count+1
				}
			}
		}
		if count == 1 {
			mapping[s] = match
		} else {
			unmapped = append(unmapped, json.RawMessage(o.enumKeys[i]))
		}
	}
	if len(mapping) == 0 {
		mapping = nil
	}
	return mapping, unmapped
}

// pathTok is one step of a path: a property name, into array items, or a
// repetition group (zero or more of its alternatives, in a recursive schema).
type pathTok struct {
	name  string
	items bool
	alts  [][]pathTok
}

// CheckSchemaPath reports, as an error wrapping ErrInvalid, a path that is
// not well formed: one that Change.Path, UsedSurface or a MigrationPlan
// could not hold.
func CheckSchemaPath(path string) error {
	_, err := parseSchemaPath(path)
	return err
}

// parseSchemaPath reads a path as JoinSchemaPath and ItemsPath write it,
// with migration plans' repetition groups: "filter(.and[]|.or[])*.op" is
// filter.op, filter.and[].op, filter.or[].and[].op and so on.
func parseSchemaPath(p string) ([]pathTok, error) {
	toks, i, err := parsePathSeq(p, 0, false)
	if err != nil {
		return nil, err
	}
	if i != len(p) {
		return nil, fmt.Errorf("%w: path %q: unexpected %q", guards.ErrInvalid, p, p[i])
	}
	return toks, nil
}

// parsePathSeq reads tokens from p[i:] up to the end, or up to '|' or ')'
// inside a group.
func parsePathSeq(p string, i int, inGroup bool) ([]pathTok, int, error) {
	var toks []pathTok
	bad := func(format string, args ...any) ([]pathTok, int, error) {
		return nil, 0, fmt.Errorf("%w: path %q: %s", guards.ErrInvalid, p, fmt.Sprintf(format, args...))
	}
	for i < len(p) {
		switch c := p[i]; c {
		case '|', ')':
			if !inGroup {
				return bad("unexpected %q", c)
			}
			return toks, i, nil
		case '[':
			if i+1 >= len(p) || p[i+1] != ']' {
				return bad("want [] for array items")
			}
			toks = append(toks, pathTok{items: true})
			i += 2
		case '(':
			tok := pathTok{}
			i++
			for {
				alt, j, err := parsePathSeq(p, i, true)
				if err != nil {
					return nil, 0, err
				}
				if len(alt) == 0 || alt[0].alts != nil {
					return bad("a repetition's alternatives must start with a name or []")
				}
				tok.alts = append(tok.alts, alt)
				i = j
				if p[i] == ')' {
					break
				}
				i++ // '|'
			}
			if i+1 >= len(p) || p[i+1] != '*' {
				return bad("want )* to close a repetition")
			}
			i += 2
			toks = append(toks, tok)
		case '.':
			if len(toks) == 0 && !inGroup || i+1 >= len(p) || strings.IndexByte(".[]()|*", p[i+1]) >= 0 {
				return bad("a dot needs a name on both sides")
			}
			i++
			fallthrough
		default:
			if strings.IndexByte(".[]()|*", p[i]) >= 0 {
				return bad("want a name at %d", i)
			}
			var name strings.Builder
			for i < len(p) && strings.IndexByte(".[]()|*", p[i]) < 0 {
				if p[i] == '\\' {
					if i+1 >= len(p) {
						return bad("ends in an escape")
					}
					i++
				}
				name.WriteByte(p[i])
				i++
			}
			if i < len(p) && (p[i] == ']' || p[i] == '*') {
				return bad("unexpected %q", p[i])
			}
			toks = append(toks, pathTok{name: name.String()})
		}
	}
	if inGroup {
		return bad("unclosed repetition")
	}
	return toks, i, nil
}

func formatSchemaPath(toks []pathTok) string {
	var b strings.Builder
	for i, t := range toks {
		switch {
		case t.items:
			b.WriteString("[]")
		case t.alts != nil:
			b.WriteByte('(')
			for j, alt := range t.alts {
				if j > 0 {
					b.WriteByte('|')
				}
				a := formatSchemaPath(alt)
				if alt[0].items || strings.HasPrefix(a, ".") {
					b.WriteString(a)
				} else {
					b.WriteString("." + a)
				}
			}
			b.WriteString(")*")
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(escapePathName(t.name))
		}
	}
	return b.String()
}

// splitLastPathSegment splits a path into its parent and its last name
// (escaped as written). A path ending in [] has no last name.
func splitLastPathSegment(p string) (parent, leaf string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != '.' {
			continue
		}
		// A dot escaped by an odd number of backslashes is part of a name.
		bs := 0
		for j := i - 1; j >= 0 && p[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return p[:i], p[i+1:]
		}
	}
	return "", p
}

func joinEscaped(parent, escapedLeaf string) string {
	if parent == "" {
		return escapedLeaf
	}
	return parent + "." + escapedLeaf
}

// Apply rewrites a payload (a decoded JSON value; numbers as float64 or
// json.Number) for the new schema. The payload is not modified. A payload
// that cannot be migrated is a *MigrationError naming the path; a plan that
// is malformed is an error wrapping ErrInvalid.
//
// The plan is compiled first (paths parsed, values decoded, every step and
// blocker checked), then its steps run in order on a copy of the payload,
// then every blocker is checked on the result.
func (p MigrationPlan) Apply(payload any) (any, error) {
	steps := make([]compiledStep, len(p.Steps))
	for i, s := range p.Steps {
		c, err := compileStep(i, s)
		if err != nil {
			return nil, err
		}
		steps[i] = c
	}
	blockers := make([]compiledBlocker, len(p.Blocked))
	for i, b := range p.Blocked {
		c, err := compileBlocker(i, b)
		if err != nil {
			return nil, err
		}
		blockers[i] = c
	}

	holder := map[string]any{"": deepCopyJSON(payload)}
	root := payloadSlot{obj: holder, key: ""}
	sv := &slotVisitor{budget: maxApplyVisits}
	for _, c := range steps {
		if err := c.run(sv, root); err != nil {
			return nil, err
		}
	}
	for _, c := range blockers {
		if err := c.check(sv, root); err != nil {
			return nil, err
		}
	}
	return holder[""], nil
}

// compiledStep is a migration step ready to run: its paths parsed, its
// value decoded.
type compiledStep struct {
	step     MigrationStep
	toks, to []pathTok
	value    any
}

// isFieldPath reports whether a parsed path ends in a field name (not in
// "[]" nor in a repetition), as add_if_absent and an absent blocker need.
func isFieldPath(toks []pathTok) bool {
	return len(toks) > 0 && !toks[len(toks)-1].items && toks[len(toks)-1].alts == nil
}

// compileStep checks step i of a plan and parses it.
func compileStep(i int, s MigrationStep) (compiledStep, error) {
	toks, err := parseSchemaPath(s.Path)
	if err != nil {
		return compiledStep{}, fmt.Errorf("migration step %d: %w", i, err)
	}
	c := compiledStep{step: s, toks: toks}
	switch s.Op {
	case OpMove:
		to, err := parseSchemaPath(s.To)
		if err != nil {
			return compiledStep{}, fmt.Errorf("migration step %d: %w", i, err)
		}
		if !renamesInPlace(toks, to) {
			return compiledStep{}, fmt.Errorf("%w: migration step %d: move %q to %q must rename one field in place", guards.ErrInvalid, i, s.Path, s.To)
		}
		c.to = to
	case OpConvert:
		if _, ok := map[string]bool{"string": true, "number": true, "integer": true, "boolean": true}[s.Type]; !ok {
			return compiledStep{}, fmt.Errorf("%w: migration step %d: cannot convert to %q", guards.ErrInvalid, i, s.Type)
		}
	case OpMapEnum:
	case OpAddIfAbsent:
		if !isFieldPath(toks) {
			return compiledStep{}, fmt.Errorf("%w: migration step %d: add_if_absent needs a field path, got %q", guards.ErrInvalid, i, s.Path)
		}
		v, err := decodeJSONValue(s.Value)
		if err != nil {
			return compiledStep{}, fmt.Errorf("%w: migration step %d: value: %v", guards.ErrInvalid, i, err)
		}
		c.value = v
	default:
		return compiledStep{}, fmt.Errorf("%w: migration step %d: unknown op %q", guards.ErrInvalid, i, s.Op)
	}
	return c, nil
}

// renamesInPlace reports whether a move from toks to to renames one field
// under the same parent.
func renamesInPlace(toks, to []pathTok) bool {
	if len(toks) == 0 || len(to) != len(toks) {
		return false
	}
	from, dest := toks[len(toks)-1], to[len(to)-1]
	return from.name != "" && dest.name != "" && !from.items && !dest.items && from.alts == nil && dest.alts == nil &&
		formatSchemaPath(toks[:len(toks)-1]) == formatSchemaPath(to[:len(to)-1])
}

// run applies the step to every place of the payload its path reaches.
func (c compiledStep) run(sv *slotVisitor, root payloadSlot) error {
	switch c.step.Op {
	case OpMove:
		return c.move(sv, root)
	case OpAddIfAbsent:
		return c.addIfAbsent(sv, root)
	case OpConvert:
		return c.convert(sv, root)
	case OpMapEnum:
		return c.mapEnum(sv, root)
	}
	return nil
}

// move renames the field in every object its parent path reaches; a
// payload that already has the new name cannot be migrated.
func (c compiledStep) move(sv *slotVisitor, root payloadSlot) error {
	parent, from, to := c.toks[:len(c.toks)-1], c.toks[len(c.toks)-1].name, c.to[len(c.to)-1].name
	return sv.visit(root, parent, "", func(s payloadSlot, path string) error {
		obj, ok := s.get().(map[string]any)
		if !ok {
			return nil
		}
		v, has := obj[from]
		if !has {
			return nil
		}
		if _, taken := obj[to]; taken && from != to {
			return &MigrationError{Path: JoinSchemaPath(path, from),
				Reason: fmt.Sprintf("cannot move it to %s: the payload already has %s", JoinSchemaPath(path, to), to)}
		}
		delete(obj, from)
		obj[to] = v
		return nil
	})
}

// addIfAbsent sets the field, in every object its parent path reaches,
// where the object lacks it.
func (c compiledStep) addIfAbsent(sv *slotVisitor, root payloadSlot) error {
	parent, name := c.toks[:len(c.toks)-1], c.toks[len(c.toks)-1].name
	return sv.visit(root, parent, "", func(s payloadSlot, _ string) error {
		if obj, ok := s.get().(map[string]any); ok {
			if _, has := obj[name]; !has {
				obj[name] = deepCopyJSON(c.value)
			}
		}
		return nil
	})
}

// convert converts every value the path reaches, failing where that
// would lose data.
func (c compiledStep) convert(sv *slotVisitor, root payloadSlot) error {
	return sv.visit(root, c.toks, "", func(s payloadSlot, path string) error {
		v, ok := s.lookup()
		if !ok {
			return nil
		}
		nv, reason := convertJSONValue(v, c.step.Type)
		if reason != "" {
			return &MigrationError{Path: path, Reason: reason}
		}
		s.set(nv)
		return nil
	})
}

// mapEnum replaces every string the path reaches that the mapping names.
func (c compiledStep) mapEnum(sv *slotVisitor, root payloadSlot) error {
	return sv.visit(root, c.toks, "", func(s payloadSlot, _ string) error {
		if str, ok := s.get().(string); ok {
			if to, ok := c.step.Mapping[str]; ok {
				s.set(to)
			}
		}
		return nil
	})
}

// compiledBlocker is a migration blocker ready to check: its path parsed,
// its values as canonical JSON texts.
type compiledBlocker struct {
	b    MigrationBlocker
	toks []pathTok
	vals map[string]bool
}

// compileBlocker checks blocker i of a plan and parses it.
func compileBlocker(i int, b MigrationBlocker) (compiledBlocker, error) {
	toks, err := parseSchemaPath(b.Path)
	if err != nil {
		return compiledBlocker{}, fmt.Errorf("migration blocker %d: %w", i, err)
	}
	c := compiledBlocker{b: b, toks: toks}
	switch b.When {
	case BlockWhenPresent:
	case BlockWhenAbsent:
		if !isFieldPath(toks) {
			return compiledBlocker{}, fmt.Errorf("%w: migration blocker %d: %q needs a field path", guards.ErrInvalid, i, b.Path)
		}
	case BlockWhenValue, BlockWhenNotIn:
		c.vals = make(map[string]bool, len(b.Values))
		for _, raw := range b.Values {
			v, err := decodeJSONValue(raw)
			if err != nil {
				return compiledBlocker{}, fmt.Errorf("%w: migration blocker %d: value: %v", guards.ErrInvalid, i, err)
			}
			k, err := canonicalValueString(v)
			if err != nil {
				return compiledBlocker{}, fmt.Errorf("migration blocker %d: %w", i, err)
			}
			c.vals[k] = true
		}
	default:
		return compiledBlocker{}, fmt.Errorf("%w: migration blocker %d: unknown condition %q", guards.ErrInvalid, i, b.When)
	}
	return c, nil
}

// check fails with a *MigrationError at the first place of the migrated
// payload that meets the blocker's condition.
func (c compiledBlocker) check(sv *slotVisitor, root payloadSlot) error {
	if c.b.When == BlockWhenAbsent {
		parent, name := c.toks[:len(c.toks)-1], c.toks[len(c.toks)-1].name
		return sv.visit(root, parent, "", func(s payloadSlot, path string) error {
			if obj, ok := s.get().(map[string]any); ok {
				if _, has := obj[name]; !has {
					return &MigrationError{Path: JoinSchemaPath(path, name), Reason: c.b.Reason}
				}
			}
			return nil
		})
	}
	return sv.visit(root, c.toks, "", func(s payloadSlot, path string) error {
		v, ok := s.lookup()
		if !ok {
			return nil
		}
		fail := c.b.When == BlockWhenPresent
		if c.vals != nil {
			k, kerr := canonicalValueString(v)
			if kerr != nil {
				return &MigrationError{Path: path, Reason: kerr.Error()}
			}
			fail = c.vals[k] == (c.b.When == BlockWhenValue)
		}
		if fail {
			return &MigrationError{Path: path, Reason: c.b.Reason}
		}
		return nil
	})
}

// payloadSlot is a place in a payload: a key of an object or an index of an
// array.
type payloadSlot struct {
	obj map[string]any
	key string
	arr []any
	idx int
}

func (s payloadSlot) lookup() (any, bool) {
	if s.obj != nil {
		v, ok := s.obj[s.key]
		return v, ok
	}
	return s.arr[s.idx], true
}

func (s payloadSlot) get() any {
	v, _ := s.lookup()
	return v
}

func (s payloadSlot) set(v any) {
	if s.obj != nil {
		s.obj[s.key] = v
	} else {
		s.arr[s.idx] = v
	}
}

// maxApplyVisits bounds the places one Apply visits: a plan whose
// repetitions overlap cannot make it run for long.
const maxApplyVisits = 1 << 20

// slotVisitor walks the places a path reaches in a payload.
type slotVisitor struct{ budget int }

// visit calls fn for every place the path reaches that exists (all items of
// arrays on the way, every depth a repetition allows), with its concrete
// path, parents before children.
func (sv *slotVisitor) visit(s payloadSlot, toks []pathTok, path string, fn func(payloadSlot, string) error) error {
	if sv.budget--; sv.budget < 0 {
		return fmt.Errorf("%w: the migration plan visits more than %d places", guards.ErrInvalid, maxApplyVisits)
	}
	if len(toks) == 0 {
		return fn(s, path)
	}
	v, ok := s.lookup()
	if !ok {
		return nil
	}
	t := toks[0]
	switch {
	case t.alts != nil:
		if err := sv.visit(s, toks[1:], path, fn); err != nil {
			return err
		}
		for _, alt := range t.alts {
			next := make([]pathTok, 0, len(alt)+len(toks))
			next = append(append(next, alt...), toks...)
			if err := sv.visit(s, next, path, fn); err != nil {
				return err
			}
		}
		return nil
	case t.items:
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i := range arr {
			if err := sv.visit(payloadSlot{arr: arr, idx: i}, toks[1:], path+"["+strconv.Itoa(i)+"]", fn); err != nil {
				return err
			}
		}
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return sv.visit(payloadSlot{obj: obj, key: t.name}, toks[1:], JoinSchemaPath(path, t.name), fn)
}

func decodeJSONValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the value")
	}
	return v, nil
}

func deepCopyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopyJSON(e)
		}
		return out
	}
	return v
}

// convertJSONValue converts v to the JSON type named to without loss, or
// says why it cannot. null and values already of the type pass unchanged.
func convertJSONValue(v any, to string) (any, string) {
	if v == nil {
		return nil, ""
	}
	switch to {
	case "string":
		switch x := v.(type) {
		case string:
			return x, ""
		case json.Number:
			return string(x), ""
		case float64:
			if s, err := canonicalValueString(x); err == nil {
				return s, ""
			}
		case bool:
			return strconv.FormatBool(x), ""
		}
	case "boolean":
		switch x := v.(type) {
		case bool:
			return x, ""
		case string:
			if x == "true" || x == "false" {
				return x == "true", ""
			}
			return nil, fmt.Sprintf("the string %s is not a boolean", quoteForError(x))
		}
	case "number":
		switch x := v.(type) {
		case json.Number, float64:
			return x, ""
		case string:
			if isJSONNumber(x) {
				return json.Number(x), ""
			}
			return nil, fmt.Sprintf("the string %s is not a number", quoteForError(x))
		}
	case "integer":
		switch x := v.(type) {
		case json.Number:
			return integerValue(string(x))
		case float64:
			if x != math.Trunc(x) || math.IsInf(x, 0) {
				return nil, "the number is not a whole number"
			}
			return x, ""
		case string:
			if isJSONNumber(x) {
				return integerValue(x)
			}
			return nil, fmt.Sprintf("the string %s is not an integer", quoteForError(x))
		}
	}
	return nil, fmt.Sprintf("a %s cannot be converted to %s without loss", guards.JSONKind(v), to)
}

// integerValue turns a JSON number text into an integer if it is a whole
// number that converts exactly.
func integerValue(s string) (any, string) {
	if isJSONInteger(s) {
		return json.Number(s), ""
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, fmt.Sprintf("the number %s is out of range", quoteForError(s))
	}
	if f != math.Trunc(f) {
		return nil, fmt.Sprintf("the number %s is not a whole number", quoteForError(s))
	}
	if math.Abs(f) > 1<<53 {
		return nil, fmt.Sprintf("the number %s is too large to convert exactly", quoteForError(s))
	}
	return json.Number(strconv.FormatInt(int64(f), 10)), ""
}

func quoteForError(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

// isJSONInteger reports whether s is -?(0|[1-9][0-9]*).
func isJSONInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isJSONNumber reports whether s is exactly a JSON number literal.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
