package toolschema

// This file joins the diff with the agent's used surface and hands the
// result to the seed's gate (EvaluateSchema), so verdicts, directives and
// digests are exactly the seed's.

import (
	"github.com/toolsentry/toolsentry/guards"

	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// UsedSurface is what an agent does with a tool: the input paths it sends
// and the output paths it reads, written as Change paths are ("user_id",
// "options.timeout", "items[].id"). A path covers everything below it.
type UsedSurface struct {
	Input  []string `json:"input,omitempty"`
	Output []string `json:"output,omitempty"`
	// Tool are the Tool-level fields the agent depends on, as change paths
	// of the tool side ("execution" for an agent that runs the tool as a
	// task, "icons", "_meta"): a change there affects it even when the
	// change breaks no plain call.
	Tool []string `json:"tool,omitempty"`
	// Sends, when known, is what the agent's recorded calls send at each
	// input path (paths as in Input, objects and arrays included): the JSON
	// types seen and whether every call sent it (SendsFromArguments). With
	// it, a narrowing that still accepts what the agent sends does not
	// affect it: a field it always sent becoming required, a type change
	// that accepts the types it sent, null refused where it never sent
	// null, a default changed on a field it always sends. Without it, a
	// default changed on an Input path does not affect the agent (it sends
	// the field); other narrowings on Input paths do.
	Sends map[string]SentField `json:"sends,omitempty"`
}

// SentField is what an agent's recorded calls sent at one input path.
type SentField struct {
	// Types are the JSON types of the values sent (0: not known).
	Types TypeSet `json:"types,omitempty"`
	// Always is true when every recorded call sent the path (inside every
	// sent object that holds it).
	Always bool `json:"always,omitempty"`
}

// SendsFromArguments derives UsedSurface.Sends from the arguments objects
// of an agent's recorded calls: per path (as SurfaceFromArguments and
// ArgumentTypes write them), the types seen in any call, and whether every
// call sent it. Only names and types, never values.
func SendsFromArguments(calls ...any) map[string]SentField {
	out := map[string]SentField{}
	seen := map[string]int{}
	for _, args := range calls {
		for p, t := range ArgumentTypes(args) {
			f := out[p]
			f.Types |= t
			out[p] = f
			seen[p]++
		}
	}
	for p, f := range out {
		f.Always = seen[p] == len(calls)
		out[p] = f
	}
	return out
}

// sentFits reports whether what the agent is recorded to send still fits
// an input change (see UsedSurface.Sends), so that the change does not
// affect it.
func (s UsedSurface) sentFits(r diffRecord, in surfaceIndex) bool {
	if r.Side != SideInput || !r.Breaking {
		return false // only a narrowing can be cleared
	}
	var sent SentField
	var ok bool
	switch {
	case r.Path == "":
		sent, ok = SentField{Types: TypeObject, Always: true}, true // arguments are an object
	case s.Sends != nil:
		sent, ok = s.Sends[r.Path]
	default:
		// Without recorded calls, a used path is taken as sent (its types
		// unknown) for a default only: --used means "sends".
		return r.Kind == DefaultChanged && in.given[r.Path]
	}
	if !ok {
		return false
	}
	accepts := r.newNode != nil && !r.newNode.False && (sent.Types == 0 || r.newNode.Types.Accepts(sent.Types))
	switch r.Kind {
	case TypeChanged:
		return sent.Types != 0 && accepts
	case NullableChanged:
		return sent.Types != 0 && sent.Types&TypeNull == 0
	case RequiredChanged, FieldAdded:
		return r.required && sent.Always && accepts
	case DefaultChanged:
		return sent.Always
	case AdditionalPropertiesChanged:
		// Closed or constrained further: fits when every name the agent
		// sends directly under this object is declared.
		if s.Sends == nil || r.newNode == nil {
			return false
		}
		for p := range s.Sends {
			if parent, ok := parentPath(p); ok && parent == r.Path && !strings.HasSuffix(p, "[]") {
				_, leaf := splitLastPathSegment(p)
				if _, declared := r.newNode.Properties[unescapePathName(leaf)]; !declared {
					return false
				}
			}
		}
		return true
	}
	return false
}

// widensForAgent reports whether r is a change on or below a path the
// agent uses that breaks nothing on its side (rule 3: what it sends
// widened, what it reads narrowed, an optional field added): it does not
// affect the agent. Descriptions and defaults are judged apart.
func widensForAgent(r diffRecord, in, out surfaceIndex) bool {
	if r.Breaking || r.Kind == DescriptionChanged || r.Kind == DefaultChanged {
		return false
	}
	switch r.Side {
	case SideInput:
		return in.covers(r.Path)
	case SideOutput:
		return out.covers(r.Path)
	}
	return false
}

// DriftReport is the outcome of comparing a tool's recorded schema with its
// current one for one agent. JSON field names are stable.
type DriftReport struct {
	ToolID         string   `json:"tool_id"`
	OldFingerprint string   `json:"old_fingerprint"`
	NewFingerprint string   `json:"new_fingerprint"`
	Changes        []Change `json:"changes"`
	// ChangedFields are the surface keys of all changes (SurfaceKey), the
	// seed's changed_fields, except wording edits of descriptions and
	// titles (DescriptionReworded), input changes that what this agent
	// sends still fits (see UsedSurface.Sends) and changes on the fields it
	// uses that break nothing on its side (a widening of what it sends, a
	// narrowing of what it reads): Changes reports them, but they change
	// nothing the agent does.
	ChangedFields []string `json:"changed_fields"`
	// UsedFields are the surface keys the agent uses: the paths it sends
	// and reads, and every changed path that affects it (see EvaluateDrift).
	UsedFields []string `json:"used_fields"`
	// Affected are the changed fields the agent uses.
	Affected []string `json:"affected"`
	// Manifest is EvaluateSchema's verdict on the above.
	Manifest guards.SchemaManifest `json:"manifest"`
	// Migration rewrites the agent's payloads for the new schema.
	Migration MigrationPlan `json:"migration"`
}

// SurfaceKey is how a change's path appears in the seed's changed_fields
// and used_fields. Input paths are bare, as agents send them ("user_id");
// output paths carry "output:" ("output:results[].id"); tool fields carry
// "tool:" ("tool:description"). A schema root is "$" ("output:$"). The
// prefixes keep an input and an output field of the same name apart.
func SurfaceKey(side ChangeSide, path string) string {
	if path == "" && side != SideTool {
		path = "$"
	}
	switch side {
	case SideOutput:
		return "output:" + path
	case SideTool:
		return "tool:" + path
	}
	return path
}

// EvaluateDrift diffs old (the baseline) against new for an agent with the
// given used surface, decides with the seed's gate, and plans the
// migration. The agent is affected by
//   - any change on a path it sends or reads, or below one, but a default's
//     change (it reaches the agent only through calls that omit the field),
//     a reworded description and a change that breaks nothing on its side
//     (a widening of what it sends, a narrowing of what it reads);
//   - a breaking change on a parent of such a path (its type, say);
//   - a change to an input field it omits but relies on, in an object it
//     sends (the root always): a default that changed or was removed, a
//     field that became required;
//   - a breaking or security-relevant change of the tool's own fields (its
//     name, description: every caller's model reads them), and a change of
//     a Tool field it depends on (UsedSurface.Tool), among them those
//     outside the fingerprint (_meta, icons: ToolFieldChanged);
//   - a description or title anywhere that now holds instructions to the
//     model.
//
// An input narrowing that still accepts what the agent is recorded to send
// (UsedSurface.Sends) does not affect it.
func EvaluateDrift(old, new ToolDefinition, surface UsedSurface) (DriftReport, error) {
	oldFP, err := Fingerprint(old)
	if err != nil {
		return DriftReport{}, fmt.Errorf("old tool: %w", err)
	}
	newFP, err := Fingerprint(new)
	if err != nil {
		return DriftReport{}, fmt.Errorf("new tool: %w", err)
	}
	d, err := NewDrift(old, new, oldFP, newFP)
	if err != nil {
		return DriftReport{}, err
	}
	return d.Evaluate(surface)
}

// Drift is the diff of a tool's old version against its new one, to be
// judged for any agent's used surface. EvaluateDrift diffs anew on every
// call; a caller that judges the same two versions for several agents, or
// again on every observation of a drift that holds the baseline (the
// stream processor), diffs once with NewDrift and calls Evaluate per
// surface. A Drift does not change after NewDrift and is safe for
// concurrent use.
type Drift struct {
	old, new     ToolDefinition
	oldFP, newFP string
	recs         []diffRecord
	loops        []schemaLoop
}

// NewDrift diffs old (the baseline) against new, given their fingerprints
// oldFP = Fingerprint(old) and newFP = Fingerprint(new), which it does not
// compute again: reports name the fingerprints it is given.
func NewDrift(old, new ToolDefinition, oldFP, newFP string) (*Drift, error) {
	recs, loops, err := diffToolRecords(old, new)
	if err != nil {
		return nil, err
	}
	return &Drift{old: old, new: new, oldFP: oldFP, newFP: newFP, recs: recs, loops: loops}, nil
}

// Evaluate is EvaluateDrift of the two versions for an agent with the given
// used surface. Its report's Changes share their values with the Drift and
// every other report of it: read them, do not modify them.
func (d *Drift) Evaluate(surface UsedSurface) (DriftReport, error) {
	old, new, oldFP, newFP, recs, loops := d.old, d.new, d.oldFP, d.newFP, d.recs, d.loops
	for _, p := range append(append([]string{}, surface.Input...), surface.Output...) {
		if _, err := parseSchemaPath(p); err != nil {
			return DriftReport{}, fmt.Errorf("used surface: %w", err)
		}
	}

	for p := range surface.Sends {
		if _, err := parseSchemaPath(p); err != nil {
			return DriftReport{}, fmt.Errorf("used surface: sends: %w", err)
		}
	}

	surface.Input, surface.Output = unrollSurface(surface.Input, SideInput, loops), unrollSurface(surface.Output, SideOutput, loops)
	inUse := newSurfaceIndex(surface.Input)
	outUse := newSurfaceIndex(surface.Output)
	toolUse := newSurfaceIndex(surface.Tool)
	changed := make([]string, 0, len(recs))
	used := map[string]bool{}
	for _, p := range surface.Input {
		used[SurfaceKey(SideInput, p)] = true
	}
	for _, p := range surface.Output {
		used[SurfaceKey(SideOutput, p)] = true
	}
	for _, r := range recs {
		key := SurfaceKey(r.Side, r.Path)
		if r.Kind == DescriptionChanged && r.descClass == DescriptionReworded {
			continue // a wording edit: reported, but no field changed
		}
		if surface.sentFits(r, inUse) {
			continue // what the agent sends still fits: not a change for it
		}
		if widensForAgent(r, inUse, outUse) {
			continue // nothing the agent sends or reads can fail: not a change for it
		}
		changed = append(changed, key)
		var affects bool
		switch r.Side {
		case SideTool:
			// Annotations are hints and never break a payload; other Tool
			// fields affect the agents that depend on them.
			affects = r.Breaking || r.Security || toolUse.covers(r.Path)
		case SideOutput:
			affects = outUse.affectedBy(r)
		case SideInput:
			if r.Kind == DefaultChanged {
				// A default reaches the agent only through calls that omit
				// the field.
				affects = reliesOn(r, inUse)
			} else {
				affects = inUse.affectedBy(r) || reliesOn(r, inUse)
			}
		}
		if r.Kind == DescriptionChanged && r.Side != SideTool {
			// The model reads every field's description: text addressed to
			// it affects every agent; a wording edit none; a change of
			// numbers, units or negations the agents that use the field.
			affects = r.Security || (r.descClass == DescriptionMeaning && affects)
		}
		if affects {
			used[key] = true
		}
	}
	usedList := make([]string, 0, len(used))
	for k := range used {
		usedList = append(usedList, k)
	}
	usedList = guards.SortedSet(usedList)
	changed = guards.SortedSet(changed)
	var affected []string
	for _, k := range changed {
		if used[k] {
			affected = append(affected, k)
		}
	}
	if affected == nil {
		affected = []string{}
	}
	toolID := cmp.Or(new.ID, new.Name, old.ID, old.Name)
	manifest := guards.EvaluateSchema(
		guards.ToolSchema{ToolID: toolID, Version: new.Version, SchemaFingerprint: newFP, UsedFields: usedList},
		&guards.SchemaBaseline{BaselineFingerprint: gateBaselineFingerprint(oldFP, newFP, recs), BaselineUsedFields: usedList, ChangedFields: changed},
	)
	changes := make([]Change, len(recs))
	for i, r := range recs {
		changes[i] = r.Change
	}
	return DriftReport{
		ToolID:         toolID,
		OldFingerprint: oldFP,
		NewFingerprint: newFP,
		Changes:        changes,
		ChangedFields:  changed,
		UsedFields:     usedList,
		Affected:       affected,
		Manifest:       manifest,
		Migration:      planMigration(recs, loops),
	}, nil
}

// gateBaselineFingerprint is the baseline fingerprint the seed's gate is
// given. The gate takes equal fingerprints for "no change" (SCHEMA_MATCH);
// two versions whose fingerprints are equal but whose Tool fields outside
// the fingerprint differ (ToolFieldChanged: _meta, icons) did change, so
// the gate is given oldFP marked as such, and judges their drift as any
// other. The drift verdicts' digests hash no fingerprint, so the mark
// appears nowhere; reports name oldFP.
func gateBaselineFingerprint(oldFP, newFP string, recs []diffRecord) string {
	if oldFP == newFP && slices.ContainsFunc(recs, func(r diffRecord) bool { return r.Kind == ToolFieldChanged }) {
		return oldFP + "+tool-fields"
	}
	return oldFP
}

// unrollSurface maps paths that go round a recursive schema to the path of
// its first occurrence, where the diff reports changes: with filter
// repeating at filter.and[], filter.and[].and[].op is filter.op.
func unrollSurface(paths []string, side ChangeSide, loops []schemaLoop) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		for changed := true; changed; {
			changed = false
			for _, l := range loops {
				if l.side != side || l.oldRepeat == l.oldEntry || !pathWithin(p, l.oldRepeat) {
					continue
				}
				rest := p[len(l.oldRepeat):]
				if l.oldEntry == "" {
					rest = strings.TrimPrefix(rest, ".")
				}
				p, changed = l.oldEntry+rest, true
			}
		}
		out = append(out, p)
	}
	return guards.SortedSet(out)
}

// surfaceIndex answers "does the agent use this path?" for one side.
type surfaceIndex struct {
	given   map[string]bool // paths as given: each covers what is below it
	touched map[string]bool // given paths and their parents
}

func newSurfaceIndex(paths []string) surfaceIndex {
	s := surfaceIndex{given: map[string]bool{}, touched: map[string]bool{}}
	for _, p := range paths {
		s.given[p] = true
		for q := p; ; {
			s.touched[q] = true
			parent, ok := parentPath(q)
			if !ok {
				break
			}
			q = parent
		}
	}
	return s
}

// covers reports whether path is a given path or below one.
func (s surfaceIndex) covers(path string) bool {
	for q := path; ; {
		if s.given[q] {
			return true
		}
		parent, ok := parentPath(q)
		if !ok {
			return false
		}
		q = parent
	}
}

// affectedBy reports whether a change touches what the agent uses: any
// change on or below a used path, and a breaking change on a parent of one
// (a parent's type, say; not a reworded description).
func (s surfaceIndex) affectedBy(r diffRecord) bool {
	return s.covers(r.Path) || (s.touched[r.Path] && r.Breaking)
}

// parentPath strips the last name or [] of a path; ok is false at the root.
func parentPath(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	if strings.HasSuffix(p, "[]") {
		// "[]" steps into items unless its '[' is escaped (an odd number
		// of backslashes before it).
		bs := 0
		for j := len(p) - 3; j >= 0 && p[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return p[:len(p)-2], true
		}
	}
	parent, _ := splitLastPathSegment(p)
	return parent, true
}

// reliesOn reports whether an agent that omits an input field (its parent
// object being sent) depends on the change: the default it got changed or
// went away, or the field became required.
func reliesOn(r diffRecord, in surfaceIndex) bool {
	parent, ok := parentPath(r.Path)
	if !ok || strings.HasSuffix(r.Path, "[]") {
		return false
	}
	if parent != "" && !in.touched[parent] && !in.covers(parent) {
		return false // the agent does not send the object the field is in
	}
	switch r.Kind {
	case DefaultChanged:
		return true
	case FieldRemoved:
		return r.oldNode.HasDefault
	case RequiredChanged, FieldAdded:
		return r.required
	}
	return false
}

// SurfaceFromArguments derives the used input surface from an arguments
// object an agent sent: the paths of its leaves (scalars, empty objects and
// arrays), "[]" for array items, sorted. Only names, never values.
func SurfaceFromArguments(args any) []string {
	set := map[string]bool{}
	collectSurface(args, "", set)
	delete(set, "")
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func collectSurface(v any, path string, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			into[path] = true
		}
		for k, e := range x {
			collectSurface(e, JoinSchemaPath(path, k), into)
		}
	case []any:
		if len(x) == 0 {
			into[path] = true
		}
		for _, e := range x {
			collectSurface(e, ItemsPath(path), into)
		}
	default:
		into[path] = true
	}
}

// ArgumentTypes maps each path of an arguments object (as
// SurfaceFromArguments writes them, containers included) to the JSON types
// seen there: integer for whole numbers, number for others. Only names and
// types, never values: an agent's arguments can hold personal data. It lets
// a caller see that an agent sends a string where a schema now wants an
// integer (the seed's type coercion ambiguity).
func ArgumentTypes(args any) map[string]TypeSet {
	out := map[string]TypeSet{}
	collectTypes(args, "", out)
	delete(out, "")
	return out
}

func collectTypes(v any, path string, into map[string]TypeSet) {
	switch x := v.(type) {
	case map[string]any:
		into[path] |= TypeObject
		for k, e := range x {
			collectTypes(e, JoinSchemaPath(path, k), into)
		}
	case []any:
		into[path] |= TypeArray
		for _, e := range x {
			collectTypes(e, ItemsPath(path), into)
		}
	case nil:
		into[path] |= TypeNull
	case bool:
		into[path] |= TypeBoolean
	case string:
		into[path] |= TypeString
	case json.Number:
		if isJSONInteger(string(x)) {
			into[path] |= TypeInteger
		} else if f, err := x.Float64(); err == nil && f == math.Trunc(f) && !math.IsInf(f, 0) {
			into[path] |= TypeInteger
		} else {
			into[path] |= TypeNumber
		}
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			into[path] |= TypeInteger
		} else {
			into[path] |= TypeNumber
		}
	}
}

// unescapePathName undoes escapePathName on one name.
func unescapePathName(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
