package toolschema

// This file compares two tools: every difference that the fingerprint sees
// becomes a Change, judged breaking or not by who reads and who writes.

import (
	"github.com/toolsentry/toolsentry/guards"

	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ChangeSide says which part of a tool changed.
type ChangeSide string

// The sides of a tool. The agent writes the input and reads the output.
const (
	SideTool   ChangeSide = "tool"   // name, title, description, annotations, other Tool fields
	SideInput  ChangeSide = "input"  // inputSchema
	SideOutput ChangeSide = "output" // outputSchema
)

// ChangeKind names what changed.
type ChangeKind string

// The kinds of change.
const (
	FieldAdded                  ChangeKind = "field_added"
	FieldRemoved                ChangeKind = "field_removed"
	FieldRenamed                ChangeKind = "field_renamed"
	TypeChanged                 ChangeKind = "type_changed"
	DefaultChanged              ChangeKind = "default_changed"
	RequiredChanged             ChangeKind = "required_changed"
	EnumChanged                 ChangeKind = "enum_changed"
	FormatChanged               ChangeKind = "format_changed"
	ConstraintChanged           ChangeKind = "constraint_changed"
	NullableChanged             ChangeKind = "nullable_changed"
	AdditionalPropertiesChanged ChangeKind = "additional_properties_changed"
	DescriptionChanged          ChangeKind = "description_changed"
	AnnotationChanged           ChangeKind = "annotation_changed"
	// ToolFieldChanged is a change of a Tool field outside the fingerprint
	// ("_meta", "icons"): never breaking, it affects only the agents that
	// depend on the field (UsedSurface.Tool).
	ToolFieldChanged ChangeKind = "tool_field_changed"
)

// Change is one difference between two versions of a tool. Its JSON field
// names are stable: changes travel in verdict events and are stored.
type Change struct {
	Side ChangeSide `json:"side"`
	// Path is the dotted property path from the schema root in the old
	// schema's names ("options.timeout"), "[]" stepping into array items
	// ("items[].id"), "" for the root; an added field has its new name. Names
	// escape the characters . [ ] \ ( ) | * with '\'. Tool-level changes
	// use the tool's field: "name", "title", "description",
	// "annotations.readOnlyHint".
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	// Keyword is the JSON Schema keyword of a constraint, annotation or
	// description change ("maximum", "pattern", "title", "examples").
	Keyword string `json:"keyword,omitempty"`
	// Before and After are canonical JSON values, left out when absent: type
	// names joined by "|", the default, the enum, the format, the keyword's
	// value, the description, required as a boolean.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	// To is a renamed field's new path (the tool's new name for "name").
	To string `json:"to,omitempty"`
	// Breaking is true when an agent that worked with the old tool can fail
	// or silently change behaviour with the new one: for the input, the new
	// schema must accept what the agent sends (and default the same way);
	// for the output, the agent must be able to read what the new tool
	// returns.
	Breaking bool `json:"breaking"`
	// Security marks changes to text the model reads (descriptions: how tool
	// poisoning and rug pulls arrive) and annotations that make a tool less
	// safe (readOnlyHint true to false, destructiveHint false to true).
	Security bool   `json:"security,omitempty"`
	Reason   string `json:"reason"`
}

// DiffTools lists the changes from old to new, sorted by side, path, kind
// and keyword. Two tools with equal fingerprints have no changes but
// ToolFieldChanged ones (their ToolFieldsDigest differs).
func DiffTools(old, new ToolDefinition) ([]Change, error) {
	recs, _, err := diffToolRecords(old, new)
	if err != nil {
		return nil, err
	}
	out := make([]Change, len(recs))
	for i, r := range recs {
		out[i] = r.Change
	}
	return out, nil
}

// diffRecord is a Change with what the migration planner and the used
// surface need besides.
type diffRecord struct {
	Change
	newPath  string      // the path in the new schema's names
	oldNode  *SchemaNode // the field's (or node's) old schema, nil when added
	newNode  *SchemaNode // its new schema, nil when removed
	required bool        // the field is required in the new schema
	// descClass classifies a description or title change.
	descClass DescriptionClass
}

// anySchema stands for an absent schema: it allows everything.
var anySchema = &SchemaNode{}

// maxDiffVisits bounds a diff's work: schemas whose shared $refs expand
// beyond it are rejected.
const maxDiffVisits = 1 << 20

// diffToolRecords diffs two tools; loops are the recursion points of both
// schemas.
func diffToolRecords(oldT, newT ToolDefinition) (recs []diffRecord, loops []schemaLoop, err error) {
	if oldT.Input == nil || newT.Input == nil {
		return nil, nil, fmt.Errorf("%w: a tool has no input schema", guards.ErrInvalid)
	}
	d := &schemaDiffer{visits: maxDiffVisits, tools: []ToolDefinition{oldT, newT}}
	d.diffToolFields(oldT, newT)
	d.side = SideInput
	if err := d.walk(oldT.Input, newT.Input, "", ""); err != nil {
		return nil, nil, err
	}
	if oldT.Output != nil || newT.Output != nil {
		d.side = SideOutput
		o, n := oldT.Output, newT.Output
		if o == nil {
			o = anySchema
		}
		if n == nil {
			n = anySchema
		}
		if err := d.walk(o, n, "", ""); err != nil {
			return nil, nil, err
		}
	}
	slices.SortStableFunc(d.out, func(a, b diffRecord) int {
		return cmp.Or(cmp.Compare(a.Side, b.Side), cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Keyword, b.Keyword))
	})
	if d.alts != nil || d.dedupe { // union branches and tuple positions can report one change twice
		type key struct {
			side                         ChangeSide
			path, kind, kw, to, bef, aft string
		}
		seen := map[key]bool{}
		out := d.out[:0]
		for _, r := range d.out {
			k := key{r.Side, r.Path, string(r.Kind), r.Keyword, r.To, string(r.Before), string(r.After)}
			if !seen[k] {
				seen[k] = true
				out = append(out, r)
			}
		}
		d.out = out
	}
	return d.out, d.loops, nil
}

type nodePair struct {
	o, n             *SchemaNode
	oldPath, newPath string
}

// schemaLoop is where a recursive schema repeats: the first occurrence
// (entry) and the repetition, where the walk stops, in old and new names.
type schemaLoop struct {
	side                ChangeSide
	oldEntry, oldRepeat string
	newEntry, newRepeat string
}

type schemaDiffer struct {
	side   ChangeSide
	out    []diffRecord
	stack  []nodePair
	visits int
	loops  []schemaLoop
	// skipTypes tells the next walk that its nodes are a pair of union
	// branches whose types the union comparison already judged.
	skipTypes bool
	// flat and alts cache the allOf-merged form and the union alternatives
	// of a node: the same node yields the same pointers, so that the walk
	// still finds the loops of recursive schemas through them.
	flat map[*SchemaNode]*SchemaNode
	alts map[*SchemaNode]*unionForm
	// dedupe is set when several walks report at one path (tuple
	// positions, union alternatives).
	dedupe bool
	// tools are the two versions; known their names and field names, which
	// a description may mention without referring to another tool.
	tools []ToolDefinition
	known map[string]bool
}

func canonicalRaw(v any) json.RawMessage {
	if raw, ok := v.(json.RawMessage); ok {
		return raw
	}
	b, err := appendCanonicalValue(nil, v, 0)
	if err != nil { // values come from decoded JSON; keep the record anyway
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	return b
}

// rec appends a change; before and after are left out when absent is passed.
func (d *schemaDiffer) rec(r diffRecord, before, after any) {
	r.Side = d.side
	if _, none := before.(absentValue); !none {
		r.Before = canonicalRaw(before)
	}
	if _, none := after.(absentValue); !none {
		r.After = canonicalRaw(after)
	}
	d.out = append(d.out, r)
}

// recText records a changed description or title, classified by
// ClassifyDescription: what is the text's name in the reason.
func (d *schemaDiffer) recText(r diffRecord, what, before, after string) {
	class, found := classifyDescription(before, after, func() map[string]bool {
		if d.known == nil {
			d.known = knownNames(d.tools...)
		}
		return d.known
	})
	r.descClass = class
	switch class {
	case DescriptionInstructions:
		r.Security = true
		r.Reason = fmt.Sprintf("%s changed and now holds text addressed to the model: %s; review it before accepting this version (tool poisoning, rug pull)",
			what, describeFindings(found))
	case DescriptionMeaning:
		r.Reason = fmt.Sprintf("%s changed its numbers, units or negations: its meaning may have changed; review the new text", what)
	default:
		r.Reason = fmt.Sprintf("%s was reworded, with no instruction, reference, link or hidden text added; review hint: check the new wording", what)
		if before == "" {
			r.Reason = fmt.Sprintf("%s was added, with no instruction, reference, link or hidden text in it; review hint: check the new wording", what)
		}
	}
	d.rec(r, optString(before), optString(after))
}

// absentValue marks a missing before or after.
type absentValue struct{}

var absent any = absentValue{}

// breaking judges a change by direction: narrowing (the new schema accepts
// less) breaks the agent as a writer, widening (it may produce more) breaks
// the agent as a reader.
func (d *schemaDiffer) breaking(narrows, widens bool) bool {
	if d.side == SideOutput {
		return widens
	}
	return narrows
}

func (d *schemaDiffer) diffToolFields(o, n ToolDefinition) {
	d.side = SideTool
	if o.Name != n.Name {
		d.rec(diffRecord{Change: Change{Path: "name", Kind: FieldRenamed, To: n.Name, Breaking: true,
			Reason: "the tool's name changed: calls by the old name fail"}}, o.Name, n.Name)
	}
	if o.Title != n.Title {
		d.recText(diffRecord{Change: Change{Path: "title", Kind: DescriptionChanged, Keyword: "title"}}, "the tool's title", o.Title, n.Title)
	}
	if o.Description != n.Description {
		d.recText(diffRecord{Change: Change{Path: "description", Kind: DescriptionChanged, Keyword: "description"}}, "the tool's description", o.Description, n.Description)
	}
	for _, k := range unionKeys(o.Annotations, n.Annotations) {
		ov, oOK := o.Annotations[k]
		nv, nOK := n.Annotations[k]
		if oOK && nOK && sameValue(ov, nv) {
			continue
		}
		sec := false
		switch k {
		case "readOnlyHint", "idempotentHint":
			sec = ov == true && nv != true
		case "destructiveHint", "openWorldHint":
			sec = ov == false && nv != false
		}
		reason := fmt.Sprintf("annotation %s changed", k)
		if sec {
			reason += ": the tool now declares itself less safe"
		}
		d.rec(diffRecord{Change: Change{Path: "annotations." + escapePathName(k), Kind: AnnotationChanged, Keyword: k, Security: sec,
			Reason: reason}}, optValue(ov, oOK), optValue(nv, nOK))
	}
	for _, k := range unionKeys(o.Extra, n.Extra) {
		ov, oOK := o.Extra[k]
		nv, nOK := n.Extra[k]
		if oOK && nOK && sameValue(ov, nv) {
			continue
		}
		r := diffRecord{Change: Change{Path: escapePathName(k), Kind: AnnotationChanged, Keyword: k,
			Reason: fmt.Sprintf("tool field %s changed; it affects only agents that depend on it", k)}}
		if k == "execution" {
			r.Breaking, r.Reason = executionChange(ov, nv)
		}
		d.rec(r, optValue(ov, oOK), optValue(nv, nOK))
	}
	for _, k := range unionKeys(o.Informational, n.Informational) {
		ov, oOK := o.Informational[k]
		nv, nOK := n.Informational[k]
		if oOK && nOK && sameValue(ov, nv) {
			continue
		}
		d.rec(diffRecord{Change: Change{Path: escapePathName(k), Kind: ToolFieldChanged, Keyword: k,
			Reason: fmt.Sprintf("tool field %s changed: metadata and display only, no call changes; it affects only agents that depend on it", k)}},
			optValue(ov, oOK), optValue(nv, nOK))
	}
}

// taskSupport is a Tool's execution.taskSupport (MCP 2025-11-25), with
// the spec's default "forbidden" when absent.
func taskSupport(execution any) string {
	if m, ok := execution.(map[string]any); ok {
		if s, ok := m["taskSupport"].(string); ok {
			return s
		}
	}
	return "forbidden"
}

// executionChange judges a change of the Tool's execution field: a tool
// that now requires task execution breaks every plain call; one that no
// longer allows it breaks only agents that run it as a task (they depend
// on "execution", see UsedSurface.Tool).
func executionChange(o, n any) (breaking bool, reason string) {
	ot, nt := taskSupport(o), taskSupport(n)
	switch {
	case ot == nt:
		return false, fmt.Sprintf("tool field execution changed but task support is still %q (absent means forbidden): no call changes", nt)
	case nt == "required":
		return true, fmt.Sprintf("task support changed from %q to %q: a call that is not a task is refused", ot, nt)
	case nt == "forbidden" || ot == "required":
		return false, fmt.Sprintf("task support changed from %q to %q: it affects only agents that run the tool as a task", ot, nt)
	}
	return false, fmt.Sprintf("task support changed from %q to %q", ot, nt)
}

func optString(s string) any {
	if s == "" {
		return absent
	}
	return s
}

func optValue(v any, ok bool) any {
	if !ok {
		return absent
	}
	return v
}

func sameValue(a, b any) bool {
	ca, errA := canonicalValueString(a)
	cb, errB := canonicalValueString(b)
	return errA == nil && errB == nil && ca == cb
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// pathSpecials are the characters a name escapes with '\' in a path.
const pathSpecials = `.[]\()|*`

// JoinSchemaPath appends a property name to a path, escaping the characters
// . [ ] \ ( ) | * in the name with '\'.
func JoinSchemaPath(path, name string) string {
	name = escapePathName(name)
	if path == "" {
		return name
	}
	return path + "." + name
}

// ItemsPath is the path of a path's array items.
func ItemsPath(path string) string { return path + "[]" }

func escapePathName(name string) string {
	if !strings.ContainsAny(name, pathSpecials) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(pathSpecials, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// coreTypes is the set of non-null JSON types a schema admits, integer
// included in number.
func coreTypes(n *SchemaNode) TypeSet {
	if n.False {
		return 0
	}
	return n.Types.Values() &^ TypeNull
}

func typeLabel(n *SchemaNode) string {
	if n.False {
		return "none"
	}
	return n.Types.String()
}

// admitsObjects and admitsArrays say whether a schema's properties or items
// can apply at all.
func admitsObjects(n *SchemaNode) bool { return !n.False && (n.Types == 0 || n.Types&TypeObject != 0) }
func admitsArrays(n *SchemaNode) bool  { return !n.False && (n.Types == 0 || n.Types&TypeArray != 0) }

// walk compares two schemas at one path: oldPath in the old names, newPath
// in the new names. After the recursion and budget checks, unions go to
// walkUnion; other pairs compare their types, then each keyword family
// (compareDefault ... compareApplicators), then their children
// (walkChildren).
func (d *schemaDiffer) walk(o, n *SchemaNode, oldPath, newPath string) error {
	if o == nil {
		o = anySchema
	}
	if n == nil {
		n = anySchema
	}
	if d.recursion(o, n, oldPath, newPath) {
		return nil // a recursive schema: compared at its first occurrence
	}
	if d.visits--; d.visits < 0 {
		return fmt.Errorf("%w: schemas expand beyond %d nodes (too many shared $refs)", guards.ErrInvalid, maxDiffVisits)
	}
	if len(d.stack) > MaxSchemaDepth {
		return fmt.Errorf("%w: schema nests deeper than %d levels", guards.ErrInvalid, MaxSchemaDepth)
	}
	d.stack = append(d.stack, nodePair{o, n, oldPath, newPath})
	defer func() { d.stack = d.stack[:len(d.stack)-1] }()
	if o.AllOf != nil || n.AllOf != nil || hasUnion(o) || hasUnion(n) {
		o, n = d.flatten(o), d.flatten(n)
		if uo, un := d.union(o), d.union(n); (hasUnion(o) || hasUnion(n)) && uo != nil && un != nil {
			skip := d.skipTypes
			d.skipTypes = false
			return d.walkUnion(uo, un, o, n, oldPath, newPath, skip)
		}
	}
	at := diffRecord{Change: Change{Path: oldPath}, newPath: newPath, oldNode: o, newNode: n}
	where := describePath(oldPath)

	if d.skipTypes {
		// A pair of union branches: their types were compared for the union.
		d.skipTypes = false
	} else {
		d.compareTypes(o, n, at, where)
	}
	if o.False != n.False {
		// false accepts nothing: the type change (from or to none) says it
		// all; the other side's keywords narrow nothing that was accepted.
		return nil
	}
	d.compareDefault(o, n, &at, where)
	d.compareEnum(o, n, &at, where)
	d.compareFormat(o, n, &at, where)
	d.compareConstraints(o, n, &at, where)
	d.compareAdditionalProperties(o, n, &at, where)
	d.compareTexts(o, n, &at, where)
	d.compareExtra(o, n, &at, where)
	// Keywords with subschemas this diff does not look into: compared whole.
	if err := d.compareOpaque(o, n, at, where); err != nil {
		return err
	}
	if err := d.compareApplicators(o, n, at, where); err != nil {
		return err
	}
	return d.walkChildren(o, n, oldPath, newPath)
}

// recursion reports whether the pair is being walked already, further up
// (a recursive schema), and records the loop.
func (d *schemaDiffer) recursion(o, n *SchemaNode, oldPath, newPath string) bool {
	for _, p := range d.stack {
		if p.o == o && p.n == n {
			d.loops = append(d.loops, schemaLoop{d.side, p.oldPath, oldPath, p.newPath, newPath})
			return true
		}
	}
	return false
}

// compareDefault records a default that changed, appeared or went away.
func (d *schemaDiffer) compareDefault(o, n *SchemaNode, at *diffRecord, where string) {
	if o.HasDefault == n.HasDefault && (!o.HasDefault || sameValue(o.Default, n.Default)) {
		return
	}
	r := *at
	r.Kind = DefaultChanged
	r.Breaking = d.side == SideInput
	switch {
	case !n.HasDefault:
		r.Reason = where + " lost its default: an agent that omits it no longer gets the old value"
	case !o.HasDefault:
		r.Reason = where + " gained a default: an omitted value may now mean something else"
	default:
		r.Reason = where + " default changed: an agent that omits it gets a different value"
	}
	if d.side != SideInput {
		r.Reason = where + " default changed"
	}
	d.rec(r, optValue(o.Default, o.HasDefault), optValue(n.Default, n.HasDefault))
}

// compareEnum records an enum that changed, appeared or went away, with
// the values removed and added.
func (d *schemaDiffer) compareEnum(o, n *SchemaNode, at *diffRecord, where string) {
	if o.HasEnum == n.HasEnum && (!o.HasEnum || slices.Equal(o.enumKeys, n.enumKeys)) {
		return
	}
	removed, added := enumDelta(o, n)
	narrows := (!o.HasEnum && n.HasEnum) || len(removed) > 0
	widens := (o.HasEnum && !n.HasEnum) || len(added) > 0
	r := *at
	r.Kind, r.Breaking = EnumChanged, d.breaking(narrows, widens)
	switch {
	case !o.HasEnum:
		r.Reason = where + " is now restricted to an enum"
	case !n.HasEnum:
		r.Reason = where + " is no longer restricted to an enum"
	default:
		var parts []string
		if len(removed) > 0 {
			parts = append(parts, "removed "+strings.Join(removed, ", "))
		}
		if len(added) > 0 {
			parts = append(parts, "added "+strings.Join(added, ", "))
		}
		r.Reason = where + " enum " + strings.Join(parts, "; ")
	}
	d.rec(r, optValue(o.Enum, o.HasEnum), optValue(n.Enum, n.HasEnum))
}

// compareFormat records a changed format.
func (d *schemaDiffer) compareFormat(o, n *SchemaNode, at *diffRecord, where string) {
	if o.Format == n.Format {
		return
	}
	r := *at
	r.Kind, r.Breaking = FormatChanged, d.breaking(n.Format != "", o.Format != "")
	r.Reason = fmt.Sprintf("%s format changed from %q to %q", where, o.Format, n.Format)
	d.rec(r, optString(o.Format), optString(n.Format))
}

// compareConstraints records each validation keyword that changed,
// judged by its direction.
func (d *schemaDiffer) compareConstraints(o, n *SchemaNode, at *diffRecord, where string) {
	for _, k := range unionKeys(o.Constraints, n.Constraints) {
		ov, oOK := o.Constraints[k]
		nv, nOK := n.Constraints[k]
		if oOK && nOK && sameValue(ov, nv) {
			continue
		}
		narrows, widens := constraintDirection(k, ov, oOK, nv, nOK)
		r := *at
		r.Kind, r.Keyword, r.Breaking = ConstraintChanged, k, d.breaking(narrows, widens)
		r.Reason = fmt.Sprintf("%s %s %s", where, k, directionWord(narrows, widens))
		d.rec(r, optValue(ov, oOK), optValue(nv, nOK))
	}
}

// compareAdditionalProperties records a changed additionalProperties.
func (d *schemaDiffer) compareAdditionalProperties(o, n *SchemaNode, at *diffRecord, where string) {
	oa, na := apValue(o.AdditionalProperties), apValue(n.AdditionalProperties)
	if oa == na {
		return
	}
	narrows, widens := apDirection(o.AdditionalProperties, n.AdditionalProperties)
	r := *at
	r.Kind, r.Breaking = AdditionalPropertiesChanged, d.breaking(narrows, widens)
	r.Reason = fmt.Sprintf("%s additionalProperties %s", where, directionWord(narrows, widens))
	d.rec(r, json.RawMessage(oa), json.RawMessage(na))
}

// compareTexts records changed descriptions and titles, classified: the
// model reads them.
func (d *schemaDiffer) compareTexts(o, n *SchemaNode, at *diffRecord, where string) {
	if o.Description != n.Description {
		r := *at
		r.Kind, r.Keyword = DescriptionChanged, "description"
		d.recText(r, where+" description", o.Description, n.Description)
	}
	if o.Title != n.Title {
		r := *at
		r.Kind, r.Keyword = DescriptionChanged, "title"
		d.recText(r, where+" title", o.Title, n.Title)
	}
}

// compareExtra records the other keywords that changed: annotations as
// such, unknown keywords as breaking (their effect is not known).
func (d *schemaDiffer) compareExtra(o, n *SchemaNode, at *diffRecord, where string) {
	for _, k := range unionKeys(o.Extra, n.Extra) {
		ov, oOK := o.Extra[k]
		nv, nOK := n.Extra[k]
		if oOK && nOK && sameValue(ov, nv) {
			continue
		}
		r := *at
		r.Keyword = k
		if annotationKeyword(k) {
			r.Kind = AnnotationChanged
			r.Reason = fmt.Sprintf("%s annotation %s changed", where, k)
		} else {
			r.Kind, r.Breaking = ConstraintChanged, true
			r.Reason = fmt.Sprintf("%s keyword %s changed; its effect is not known, so it counts as breaking", where, k)
		}
		d.rec(r, optValue(ov, oOK), optValue(nv, nOK))
	}
}

// walkChildren diffs the properties (with renames) and the array items
// (a tuple's positions, or items). When the type changed so that one side
// cannot be an object (an array), the type change says it all and the
// fields (items) are not listed one by one.
func (d *schemaDiffer) walkChildren(o, n *SchemaNode, oldPath, newPath string) error {
	typeChanged := coreTypes(o) != coreTypes(n)
	if !typeChanged || (admitsObjects(o) && admitsObjects(n)) {
		if err := d.diffProperties(o, n, oldPath, newPath); err != nil {
			return err
		}
	}
	if typeChanged && !(admitsArrays(o) && admitsArrays(n)) {
		return nil
	}
	switch {
	case o.PrefixItems != nil || n.PrefixItems != nil:
		return d.walkTuple(o, n, oldPath, newPath)
	case o.Items != nil || n.Items != nil:
		return d.walk(o.Items, n.Items, ItemsPath(oldPath), ItemsPath(newPath))
	}
	return nil
}

// compareTypes reports the change of the non-null types and of null between
// two schemas at one path.
func (d *schemaDiffer) compareTypes(o, n *SchemaNode, at diffRecord, where string) {
	if oc, nc := coreTypes(o), coreTypes(n); oc != nc {
		writerOK := oc == 0 || (nc != 0 && n.Types.Accepts(o.Types&^TypeNull|boolSet(o.Types == 0, TypeAny&^TypeNull)))
		readerOK := nc == 0 || (oc != 0 && o.Types.Accepts(n.Types&^TypeNull|boolSet(n.Types == 0, TypeAny&^TypeNull)))
		if o.False || n.False {
			writerOK, readerOK = oc == 0, nc == 0
		}
		r := at
		r.Kind, r.Breaking = TypeChanged, d.breaking(!writerOK, !readerOK)
		r.Reason = fmt.Sprintf("%s type changed from %s to %s", where, typeLabel(o), typeLabel(n))
		switch {
		case writerOK && !readerOK:
			r.Reason += " (widened)"
		case readerOK && !writerOK:
			r.Reason += " (narrowed)"
		}
		d.rec(r, typeLabel(o), typeLabel(n))
	}
	if on, nn := o.Nullable(), n.Nullable(); on != nn {
		r := at
		r.Kind, r.Breaking = NullableChanged, d.breaking(on && !nn, nn && !on)
		if nn {
			r.Reason = where + " may now be null"
		} else {
			r.Reason = where + " may no longer be null"
		}
		d.rec(r, on, nn)
	}
}

func boolSet(b bool, t TypeSet) TypeSet {
	if b {
		return t
	}
	return 0
}

func describePath(path string) string {
	if path == "" {
		return "the root"
	}
	return path
}

func annotationKeyword(k string) bool {
	switch k {
	case "examples", "example", "deprecated", "readOnly", "writeOnly", "$comment":
		return true
	}
	return strings.HasPrefix(k, "x-")
}

func directionWord(narrows, widens bool) string {
	switch {
	case narrows && widens:
		return "changed"
	case narrows:
		return "narrowed"
	case widens:
		return "widened"
	}
	return "changed"
}

// enumDelta lists the canonical texts of the values only in o and only in n
// when both have an enum.
func enumDelta(o, n *SchemaNode) (removed, added []string) {
	i, j := 0, 0
	for i < len(o.enumKeys) || j < len(n.enumKeys) {
		switch {
		case j == len(n.enumKeys) || (i < len(o.enumKeys) && o.enumKeys[i] < n.enumKeys[j]):
			removed = append(removed, o.enumKeys[i])
			i++
		case i == len(o.enumKeys) || n.enumKeys[j] < o.enumKeys[i]:
			added = append(added, n.enumKeys[j])
			j++
		default:
			i++
			j++
		}
	}
	if !o.HasEnum || !n.HasEnum { // no enum allows every value
		return nil, nil
	}
	return removed, added
}

var minKeywords = map[string]bool{"minimum": true, "exclusiveMinimum": true, "minLength": true, "minItems": true, "minProperties": true, "minContains": true}
var maxKeywords = map[string]bool{"maximum": true, "exclusiveMaximum": true, "maxLength": true, "maxItems": true, "maxProperties": true, "maxContains": true}

// constraintDirection says whether a constraint's change narrows (accepts
// less) or widens (accepts more) the schema; both when it cannot tell.
func constraintDirection(k string, ov any, oOK bool, nv any, nOK bool) (narrows, widens bool) {
	switch {
	case !oOK:
		return true, false
	case !nOK:
		return false, true
	}
	of, oNum := ov.(float64)
	nf, nNum := nv.(float64)
	switch {
	case minKeywords[k] && oNum && nNum:
		return nf > of, nf < of
	case maxKeywords[k] && oNum && nNum:
		return nf < of, nf > of
	case k == "multipleOf" && oNum && nNum:
		if q := of / nf; q == math.Trunc(q) {
			return false, true // every old multiple is a new multiple
		}
		if q := nf / of; q == math.Trunc(q) {
			return true, false
		}
	}
	return true, true
}

// apValue is the canonical text of additionalProperties: true when it
// allows everything.
func apValue(n *SchemaNode) string {
	if n.IsAny() {
		return "true"
	}
	b, err := CanonicalSchemaJSON(n)
	if err != nil {
		return "?" + err.Error()
	}
	return string(b)
}

func apDirection(o, n *SchemaNode) (narrows, widens bool) {
	switch {
	case o.IsAny(): // everything was allowed
		return true, false
	case n.IsAny():
		return false, true
	case n.False:
		return true, false
	case o.False:
		return false, true
	}
	return true, true
}

// compareOpaque reports changes in the combinators that walkUnion cannot
// read (allOf branches that do not merge, anyOf next to oneOf) and in an
// external $ref: one change per keyword, counted as breaking both ways.
func (d *schemaDiffer) compareOpaque(o, n *SchemaNode, at diffRecord, where string) error {
	type kw struct {
		name string
		o, n *SchemaNode
	}
	var list []kw
	add := func(name string, a, b *SchemaNode) { list = append(list, kw{name, a, b}) }
	wrapList := func(l []*SchemaNode) *SchemaNode {
		if l == nil {
			return nil
		}
		return &SchemaNode{AnyOf: l} // compared as a set: order does not matter
	}
	add("allOf", wrapList(o.AllOf), wrapList(n.AllOf))
	add("anyOf", wrapList(o.AnyOf), wrapList(n.AnyOf))
	add("oneOf", wrapList(o.OneOf), wrapList(n.OneOf))
	if o.Ref != n.Ref {
		r := at
		r.Kind, r.Keyword, r.Breaking = ConstraintChanged, "$ref", true
		r.Reason = where + " external $ref changed"
		d.rec(r, optString(o.Ref), optString(n.Ref))
	}
	for _, k := range list {
		if k.o == nil && k.n == nil {
			continue
		}
		var ob, nb []byte
		var err error
		if k.o != nil {
			if ob, err = CanonicalSchemaJSON(k.o); err != nil {
				return err
			}
		}
		if k.n != nil {
			if nb, err = CanonicalSchemaJSON(k.n); err != nil {
				return err
			}
		}
		if string(ob) == string(nb) {
			continue
		}
		r := at
		r.Kind, r.Keyword, r.Breaking = ConstraintChanged, k.name, true
		r.Reason = fmt.Sprintf("%s %s changed; compatibility is not analysed inside it, so it counts as breaking", where, k.name)
		r.Side, r.Before, r.After = d.side, ob, nb
		d.out = append(d.out, r)
	}
	return nil
}

// diffProperties pairs the fields of two object schemas (same name, or a
// rename) and reports added, removed, renamed and re-required fields.
func (d *schemaDiffer) diffProperties(o, n *SchemaNode, oldPath, newPath string) error {
	oldReq := stringSet(o.Required)
	newReq := stringSet(n.Required)
	var removed, added []string
	for _, name := range unionKeys(o.Properties, n.Properties) {
		_, inO := o.Properties[name]
		_, inN := n.Properties[name]
		switch {
		case inO && !inN:
			removed = append(removed, name)
		case inN && !inO:
			added = append(added, name)
		}
	}
	renames, err := matchRenames(o, n, removed, added)
	if err != nil {
		return err
	}
	renamedTo := map[string]string{}
	renamedFrom := map[string]bool{}
	for _, p := range renames {
		renamedTo[p[0]] = p[1]
		renamedFrom[p[1]] = true
	}

	// Fields in both, and renamed fields, in old-name order.
	for _, name := range unionKeys(o.Properties, n.Properties) {
		oc, inO := o.Properties[name]
		nc, inN := n.Properties[name]
		op := JoinSchemaPath(oldPath, name)
		switch {
		case inO && inN:
			d.requiredChange(op, JoinSchemaPath(newPath, name), oc, nc, oldReq[name], newReq[name])
			if err := d.walk(oc, nc, op, JoinSchemaPath(newPath, name)); err != nil {
				return err
			}
		case inO && renamedTo[name] != "":
			to := renamedTo[name]
			nc := n.Properties[to]
			np := JoinSchemaPath(newPath, to)
			r := diffRecord{Change: Change{Path: op, Kind: FieldRenamed, To: np, Breaking: true,
				Reason: fmt.Sprintf("field %s was renamed to %s: a payload that still sends %s is ignored or rejected", op, np, name)},
				newPath: np, oldNode: oc, newNode: nc, required: newReq[to]}
			if d.side == SideOutput {
				r.Reason = fmt.Sprintf("field %s was renamed to %s: a reader of %s finds nothing", op, np, name)
			}
			d.rec(r, absent, absent)
			d.requiredChange(op, np, oc, nc, oldReq[name], newReq[to])
			if err := d.walk(oc, nc, op, np); err != nil {
				return err
			}
		case inO:
			r := diffRecord{Change: Change{Path: op, Kind: FieldRemoved, Breaking: true},
				newPath: JoinSchemaPath(newPath, name), oldNode: oc}
			if oc.False {
				r.Breaking = false
				r.Reason = fmt.Sprintf("field %s was removed; its schema was false, so no valid payload carried it", op)
				d.rec(r, typeLabel(oc), absent)
				continue
			}
			if d.side == SideOutput {
				r.Reason = fmt.Sprintf("field %s was removed: a reader of it finds nothing", op)
			} else {
				r.Reason = fmt.Sprintf("field %s was removed without a counterpart: a payload that sends it is ignored or rejected", op)
			}
			d.rec(r, typeLabel(oc), absent)
		case inN && !renamedFrom[name]:
			ap := JoinSchemaPath(oldPath, name)
			req := newReq[name]
			r := diffRecord{Change: Change{Path: ap, Kind: FieldAdded}, newPath: JoinSchemaPath(newPath, name), newNode: nc, required: req}
			switch {
			case d.side == SideOutput:
				r.Reason = fmt.Sprintf("field %s was added", ap)
			case req && !nc.HasDefault:
				r.Breaking = true
				r.Reason = fmt.Sprintf("required field %s was added without a default: payloads without it are rejected", ap)
			case req:
				r.Reason = fmt.Sprintf("required field %s was added with a default", ap)
			default:
				r.Reason = fmt.Sprintf("optional field %s was added", ap)
			}
			// Where the old schema let the name through under a schema of
			// its own (additionalProperties: {"type": "string"}), payloads
			// carrying it were valid: the new field's schema must accept
			// them (input) and return only what the old one allowed (output).
			if open, kw := openSchemaFor(o, name); open != nil && !open.IsAny() && !open.False {
				narrows, widens, found, err := d.judgeSub(open, nc)
				if err != nil {
					return err
				}
				if d.breaking(narrows, widens) {
					r.Breaking = true
					r.Reason = fmt.Sprintf("field %s was added where the old %s allowed it as %s, %s: %s", ap, kw, schemaText(open),
						directionWord(narrows, widens), strings.Join(found, "; "))
				}
			}
			d.rec(r, absent, typeLabel(nc))
		}
	}
	// Required names that are not properties on either side.
	for _, name := range unionKeys(oldReq, newReq) {
		_, inO := o.Properties[name]
		_, inN := n.Properties[name]
		if inO || inN {
			continue
		}
		d.requiredChange(JoinSchemaPath(oldPath, name), JoinSchemaPath(newPath, name), anySchema, anySchema, oldReq[name], newReq[name])
	}
	return nil
}

func (d *schemaDiffer) requiredChange(oldPath, newPath string, oc, nc *SchemaNode, wasReq, isReq bool) {
	if wasReq == isReq {
		return
	}
	r := diffRecord{Change: Change{Path: oldPath, Kind: RequiredChanged}, newPath: newPath, oldNode: oc, newNode: nc, required: isReq}
	switch {
	case d.side == SideOutput && !isReq:
		r.Breaking = true
		r.Reason = fmt.Sprintf("%s is no longer always returned", oldPath)
	case d.side == SideOutput:
		r.Reason = fmt.Sprintf("%s is now always returned", oldPath)
	case isReq && !nc.HasDefault:
		r.Breaking = true
		r.Reason = fmt.Sprintf("%s became required without a default: payloads without it are rejected", oldPath)
	case isReq:
		r.Reason = fmt.Sprintf("%s became required, with a default", oldPath)
	default:
		r.Reason = fmt.Sprintf("%s became optional", oldPath)
	}
	d.rec(r, wasReq, isReq)
}

func stringSet(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// matchRenames pairs removed with added fields: first names that are the
// same words in another case style (user_id, userId, user-id, UserID), then
// fields whose schemas are equal (type, description, constraints and all).
// A pairing must be one to one; ambiguous candidates stay removed and added.
func matchRenames(o, n *SchemaNode, removed, added []string) ([][2]string, error) {
	if len(removed) == 0 || len(added) == 0 {
		return nil, nil
	}
	var pairs [][2]string
	used := map[string]bool{}
	pairUnique := func(key func(name string, side *SchemaNode) (string, error)) error {
		byKeyO := map[string][]string{}
		byKeyN := map[string][]string{}
		for _, r := range removed {
			if used[r] {
				continue
			}
			k, err := key(r, o)
			if err != nil {
				return err
			}
			byKeyO[k] = append(byKeyO[k], r)
		}
		for _, a := range added {
			if used["+"+a] {
				continue
			}
			k, err := key(a, n)
			if err != nil {
				return err
			}
			byKeyN[k] = append(byKeyN[k], a)
		}
		for _, r := range removed {
			if used[r] {
				continue
			}
			k, _ := key(r, o)
			if k == "" || len(byKeyO[k]) != 1 || len(byKeyN[k]) != 1 {
				continue
			}
			a := byKeyN[k][0]
			pairs = append(pairs, [2]string{r, a})
			used[r], used["+"+a] = true, true
		}
		return nil
	}
	if err := pairUnique(func(name string, _ *SchemaNode) (string, error) { return nameWords(name), nil }); err != nil {
		return nil, err
	}
	if err := pairUnique(func(name string, side *SchemaNode) (string, error) {
		b, err := CanonicalSchemaJSON(side.Properties[name])
		return string(b), err
	}); err != nil {
		return nil, err
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	return pairs, nil
}

// nameWords splits a field name into lower-case words at '_', '-', ' ', '.'
// and case changes ("userID" and "user_id" are both "user id").
func nameWords(s string) string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case r == '_' || r == '-' || r == ' ' || r == '.':
			flush()
			continue
		case unicode.IsUpper(r) && len(cur) > 0:
			prev := cur[len(cur)-1]
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	if !utf8.ValidString(s) {
		return ""
	}
	return strings.Join(words, " ")
}
