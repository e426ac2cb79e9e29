package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// driftFor evaluates old against new for a surface and returns the
// affected keys and the verdict.
func driftFor(t *testing.T, old, new string, surface UsedSurface) ([]string, guards.SchemaVerdict, DriftReport) {
	t.Helper()
	rep, err := EvaluateDrift(bareTool(t, old), bareTool(t, new), surface)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Affected, rep.Manifest.Verdict, rep
}

// Rule 5: a changed default reaches an agent only through calls that omit
// the field.
func TestDriftDefaults(t *testing.T) {
	old := `{"name":"t","inputSchema":{"type":"object","properties":{"q":{"type":"string"},"dry":{"type":"boolean","default":false}}}}`
	new := `{"name":"t","inputSchema":{"type":"object","properties":{"q":{"type":"string"},"dry":{"type":"boolean","default":true}}}}`
	for _, tc := range []struct {
		name    string
		surface UsedSurface
		want    []string
	}{
		{"--used sends it", UsedSurface{Input: []string{"q", "dry"}}, nil},
		{"omits it", UsedSurface{Input: []string{"q"}}, []string{"dry"}},
		{"always sent in the recorded calls", UsedSurface{Input: []string{"q", "dry"}, Sends: SendsFromArguments(
			map[string]any{"q": "a", "dry": true}, map[string]any{"q": "b", "dry": false})}, nil},
		{"sometimes omitted in the recorded calls", UsedSurface{Input: []string{"q", "dry"}, Sends: SendsFromArguments(
			map[string]any{"q": "a", "dry": true}, map[string]any{"q": "b"})}, []string{"dry"}},
	} {
		got, _, _ := driftFor(t, old, new, tc.surface)
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: affected (-want +got):\n%s", tc.name, diff)
		}
	}
}

// Rule 5: a field relied on by default that disappears blocks the
// migration, unless a new field restores its default.
func TestMigrationRefusesLostDefault(t *testing.T) {
	old := `{"name":"diff","inputSchema":{"type":"object","properties":{"ref":{"type":"string"},"include_diff":{"type":"boolean","default":true}}}}`
	replaced := `{"name":"diff","inputSchema":{"type":"object","properties":{"ref":{"type":"string"},"detail":{"type":"string","enum":["stats","full"],"default":"stats"}}}}`
	_, verdict, rep := driftFor(t, old, replaced, UsedSurface{Input: []string{"ref"}})
	if verdict != guards.DriftOnUsedFields {
		t.Errorf("verdict %s, want %s: the agent relied on include_diff's default", verdict, guards.DriftOnUsedFields)
	}
	for _, payload := range []map[string]any{{"ref": "main"}, {"ref": "main", "include_diff": true}} {
		out, err := rep.Migration.Apply(payload)
		var me *MigrationError
		if !errors.Is(err, ErrCannotMigrate) || !errors.As(err, &me) || me.Path != "include_diff" {
			t.Errorf("Apply(%v) = %v, %v; want a refusal at include_diff", payload, out, err)
		}
	}
	restored := `{"name":"diff","inputSchema":{"type":"object","properties":{"ref":{"type":"string"},"with_diff":{"type":"boolean","default":true}}}}`
	_, _, rep = driftFor(t, old, restored, UsedSurface{Input: []string{"ref"}})
	if out, err := rep.Migration.Apply(map[string]any{"ref": "main"}); err != nil {
		t.Errorf("a new field restores the default, yet Apply = %v, %v", out, err)
	}
}

// Rule 6: Tool-level fields are reported; they affect an agent only when it
// depends on them, and annotations never break.
func TestDriftToolFields(t *testing.T) {
	tool := func(extra string) string {
		return `{"name":"read_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}` + extra + `}`
	}
	surface := UsedSurface{Input: []string{"path"}}
	tasks := UsedSurface{Input: []string{"path"}, Tool: []string{"execution"}}
	for _, tc := range []struct {
		name     string
		old, new string
		surface  UsedSurface
		breaking bool
		want     []string
	}{
		{"forbidden spelled out (the default)", tool(""), tool(`,"execution":{"taskSupport":"forbidden"}`), surface, false, nil},
		{"forbidden spelled out, task agent", tool(""), tool(`,"execution":{"taskSupport":"forbidden"}`), tasks, false, []string{"tool:execution"}},
		{"tasks no longer allowed, plain agent", tool(`,"execution":{"taskSupport":"optional"}`), tool(`,"execution":{"taskSupport":"forbidden"}`), surface, false, nil},
		{"tasks no longer allowed, task agent", tool(`,"execution":{"taskSupport":"optional"}`), tool(`,"execution":{"taskSupport":"forbidden"}`), tasks, false, []string{"tool:execution"}},
		{"tasks now required", tool(""), tool(`,"execution":{"taskSupport":"required"}`), surface, true, []string{"tool:execution"}},
		{"unknown Tool field added", tool(""), tool(`,"streaming":{"mode":"chunks"}`), surface, false, nil},
		{"unknown Tool field changed, agent depends on it", tool(`,"streaming":{"mode":"lines"}`), tool(`,"streaming":{"mode":"chunks"}`),
			UsedSurface{Tool: []string{"streaming"}}, false, []string{"tool:streaming"}},
		{"annotation hint added", tool(""), tool(`,"annotations":{"idempotentHint":true}`), surface, false, nil},
	} {
		got, _, rep := driftFor(t, tc.old, tc.new, tc.surface)
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: affected (-want +got):\n%s", tc.name, diff)
		}
		if len(rep.Changes) != 1 || rep.Changes[0].Side != SideTool || rep.Changes[0].Breaking != tc.breaking {
			t.Errorf("%s: changes %+v, want one tool change, breaking %v", tc.name, rep.Changes, tc.breaking)
		}
	}
}

// Rule 7: the server release that typed its empty input schemas. An agent
// whose calls always sent path as a string is not affected.
func TestDriftAgainstWhatIsSent(t *testing.T) {
	old := `{"name":"read_file","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#"}}`
	new := `{"name":"read_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false},
		"execution":{"taskSupport":"forbidden"}}`
	calls := func(args ...any) UsedSurface {
		return UsedSurface{Input: SurfaceFromArguments(args[0]), Sends: SendsFromArguments(args...)}
	}
	for _, tc := range []struct {
		name    string
		surface UsedSurface
		want    []string
	}{
		{"always sent path as a string", calls(map[string]any{"path": "/a"}, map[string]any{"path": "/b"}), nil},
		{"sent path as a number", calls(map[string]any{"path": 3.0}), []string{"path"}},
		{"sometimes omitted path", calls(map[string]any{"path": "/a"}, map[string]any{}), []string{"path"}},
		{"no recorded calls, --used path", UsedSurface{Input: []string{"path"}}, []string{"$", "path"}},
	} {
		got, verdict, _ := driftFor(t, old, new, tc.surface)
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: affected (-want +got):\n%s", tc.name, diff)
		}
		if len(tc.want) == 0 && verdict != guards.DriftOnUnusedFields {
			t.Errorf("%s: verdict %s, want %s", tc.name, verdict, guards.DriftOnUnusedFields)
		}
	}
}

// Rule 6, the Tool fields outside the fingerprint (_meta, icons): a change
// is reported as ToolFieldChanged, never breaking, and affects only an
// agent that depends on the field; the fingerprint stays, and a repeat of
// the same values (in another key order) is no change.
func TestDriftToolFieldsOutsideTheFingerprint(t *testing.T) {
	tool := func(extra string) string {
		return `{"name":"read_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}` + extra + `}`
	}
	icons := `,"icons":[{"src":"https://example.com/a.png","mimeType":"image/png"}]`
	plain := UsedSurface{Input: []string{"path"}}
	for _, tc := range []struct {
		name     string
		old, new string
		surface  UsedSurface
		verdict  guards.SchemaVerdict
		changes  []string // side:path:kind
		affected []string
	}{
		{"icons added", tool(""), tool(icons), plain, guards.DriftOnUnusedFields, []string{"tool:icons:tool_field_changed"}, nil},
		{"icons removed", tool(icons), tool(""), plain, guards.DriftOnUnusedFields, []string{"tool:icons:tool_field_changed"}, nil},
		{"icons changed, agent depends on them", tool(icons), tool(`,"icons":[{"src":"https://example.com/b.png"}]`),
			UsedSurface{Tool: []string{"icons"}}, guards.DriftOnUsedFields, []string{"tool:icons:tool_field_changed"}, []string{"tool:icons"}},
		{"_meta changed", tool(`,"_meta":{"build":"1"}`), tool(`,"_meta":{"build":"2"}`), plain, guards.DriftOnUnusedFields, []string{"tool:_meta:tool_field_changed"}, nil},
		{"_meta and icons added", tool(""), tool(`,"_meta":{"build":"1"}` + icons), plain, guards.DriftOnUnusedFields,
			[]string{"tool:_meta:tool_field_changed", "tool:icons:tool_field_changed"}, nil},
		{"same icons, other key order", tool(icons), tool(`,"icons":[{"mimeType":"image/png","src":"https://example.com/a.png"}]`), plain, guards.SchemaMatch, nil, nil},
		{"icons with a contract change", tool(""), strings.Replace(tool(icons), `"path":{"type":"string"}`, `"path":{"type":"string"},"n":{"type":"integer"}`, 1), plain,
			guards.DriftOnUnusedFields, []string{"input:n:field_added", "tool:icons:tool_field_changed"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, new := mustTool(t, tc.old), mustTool(t, tc.new)
			rep, err := EvaluateDrift(old, new, tc.surface)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range rep.Changes {
				got = append(got, string(c.Side)+":"+c.Path+":"+string(c.Kind))
				if c.Breaking || c.Security {
					t.Errorf("change %+v: want neither breaking nor security", c)
				}
			}
			if diff := cmp.Diff(tc.changes, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.affected, rep.Affected, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("affected (-want +got):\n%s", diff)
			}
			if rep.Manifest.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s", rep.Manifest.Verdict, tc.verdict)
			}
			contractChanged := strings.Contains(tc.name, "contract")
			if (rep.OldFingerprint != rep.NewFingerprint) != contractChanged {
				t.Errorf("fingerprints %s and %s: want them different only with a contract change", rep.OldFingerprint, rep.NewFingerprint)
			}
			// The seed's gate decides, digests byte for byte: a drift is
			// judged as one between any two fingerprints, a match as the
			// match of the fingerprint.
			baseFP := rep.OldFingerprint
			if tc.verdict != guards.SchemaMatch {
				baseFP = "sha256:another"
			}
			want := guards.EvaluateSchema(guards.ToolSchema{ToolID: "read_file", SchemaFingerprint: rep.NewFingerprint, UsedFields: rep.UsedFields},
				&guards.SchemaBaseline{BaselineFingerprint: baseFP, BaselineUsedFields: rep.UsedFields, ChangedFields: rep.ChangedFields})
			if rep.Manifest != want {
				t.Errorf("manifest %+v, want the seed's %+v", rep.Manifest, want)
			}
			od, err := ToolFieldsDigest(old)
			if err != nil {
				t.Fatal(err)
			}
			nd, err := ToolFieldsDigest(new)
			if err != nil {
				t.Fatal(err)
			}
			if (od != nd) != slices.ContainsFunc(rep.Changes, func(c Change) bool { return c.Kind == ToolFieldChanged }) {
				t.Errorf("tool fields digests %s and %s disagree with the changes %v", od, nd, got)
			}
		})
	}
	// No informational field: the digest of {}.
	if d, err := ToolFieldsDigest(mustTool(t, tool(""))); err != nil || d != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Errorf("ToolFieldsDigest of a tool without _meta or icons = %s, %v; want the digest of {}", d, err)
	}
}

// Rule 7 with a root that constrains nothing but carries annotations (only
// a description, or $schema, title, description, examples): typeless as
// {"$schema": ...} is. Typed by the next release, it is judged against what
// the agent sends; the other way, it widens everything, and the field the
// agent sends is no longer declared, as for {"$schema": ...}.
func TestDriftTypelessRootWithAnnotations(t *testing.T) {
	typed := `{"name":"read_file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}}`
	calls := func(args ...any) UsedSurface {
		return UsedSurface{Input: SurfaceFromArguments(args[0]), Sends: SendsFromArguments(args...)}
	}
	always := calls(map[string]any{"path": "/a"}, map[string]any{"path": "/b"})
	omitted := calls(map[string]any{"path": "/a"}, map[string]any{})
	for _, root := range []string{
		`{"$schema":"http://json-schema.org/draft-07/schema#"}`,
		`{"description":"Read a file."}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","title":"Arguments","description":"Anything goes.","examples":[{"path":"/a"}],"$comment":"typed later"}`,
	} {
		typeless := `{"name":"read_file","inputSchema":` + root + `}`
		for _, tc := range []struct {
			name     string
			old, new string
			surface  UsedSurface
			want     []string
		}{
			{"typed next, always sent path as a string", typeless, typed, always, nil},
			{"typed next, once omitted path", typeless, typed, omitted, []string{"path"}},
			{"typed next, sent path as a number", typeless, typed, calls(map[string]any{"path": 3.0}), []string{"path"}},
			{"typeless next, sends path", typed, typeless, always, []string{"path"}},
		} {
			got, verdict, rep := driftFor(t, tc.old, tc.new, tc.surface)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s, root %s: affected (-want +got):\n%s", tc.name, root, diff)
			}
			if want := map[bool]guards.SchemaVerdict{true: guards.DriftOnUnusedFields, false: guards.DriftOnUsedFields}[len(tc.want) == 0]; verdict != want {
				t.Errorf("%s, root %s: verdict %s, want %s", tc.name, root, verdict, want)
			}
			// The root's type change is reported, whichever way.
			if !slices.ContainsFunc(rep.Changes, func(c Change) bool { return c.Path == "" && c.Kind == TypeChanged }) {
				t.Errorf("%s, root %s: no root type change in %+v", tc.name, root, rep.Changes)
			}
		}
		// What the agent sends under the typeless root is undeclared by
		// nothing, so its invocations are not judged deviant either.
		dev, err := InputDeviations(mustTool(t, typeless).Input, map[string]TypeSet{"path": TypeString})
		if err != nil || len(dev) != 0 {
			t.Errorf("root %s: InputDeviations = %v, %v; want none", root, dev, err)
		}
	}
}
