package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/toolsentry/toolsentry/guards"
	"github.com/toolsentry/toolsentry/guards/toolschema"
)

func init() {
	register(&command{
		name:    "diff",
		summary: "compare two versions of a tool's schema: changes, verdict for an agent, migration",
		usage:   diffUsage,
		run:     runDiff,
	})
}

const toolInputsHelp = `OLD and NEW are JSON files, each one of:
  - an MCP Tool object: {"name", "title", "description", "inputSchema",
    "outputSchema", "annotations", "icons", "_meta", ...} (MCP 2025-06-18
    and later);
  - an MCP tools/list result {"tools": [...]} (or the JSON-RPC response
    holding it); pick the tool with --tool when it lists more than one;
  - a bare JSON Schema (draft-04 to 2020-12), taken as the input schema.
Local $refs are resolved; schemas nested deeper than 128 levels are rejected.
`

const diffUsage = `Usage: toolsentry diff [flags] OLD NEW

Compares two versions of a tool and lists what changed: renamed, added and
removed fields, types, defaults, required, enums, formats, constraints,
additionalProperties, descriptions, annotations and other Tool fields, each
judged breaking or not (the agent writes the input and reads the output). With the agent's used
surface it gives the schema drift verdict (SCHEMA_MATCH,
DRIFT_ON_UNUSED_FIELDS or DRIFT_ON_USED_FIELDS, with the directive and
manifest digest of the reference guard) and the migration plan that rewrites
the agent's payloads (see toolsentry migrate).

` + toolInputsHelp + `
Each change is judged by what the schema accepts. It narrows when the new
schema accepts less (a type, enum value or anyOf branch removed, a bound
tightened, a field required) and widens when it accepts more. The agent writes
the input, so narrowing breaks it; it reads the output, so widening breaks it.
anyOf and oneOf are unions whose branches are matched by structure, not
position: anyOf [integer, null] (Pydantic's Optional[int]) is a nullable
integer, and a change inside a branch is reported at the field's path. allOf
is merged before comparison. Tuples (prefixItems, items as an array with
additionalItems), not, if/then/else, dependentSchemas, patternProperties,
additionalProperties and unevaluatedProperties are judged the same way.

Description and title changes are classified without a model, by what the new
text has that the old one had not:
  instructions  security: the change affects every agent of the tool. Found by:
                tags such as <IMPORTANT> or <system>; "you/the assistant must,
                should, always, never"; "ignore previous instructions"; "before
                using this tool"; "always/first/must call, read, send, pass";
                "make sure to"; "pass/send/include ... its content"; "system
                prompt"; "do not tell/mention/notify", "without telling", "hide
                ... from the user"; secrets (API key, access token, password,
                credentials, private or SSH key, id_rsa); files (~/..., /etc/,
                C:\..., .ssh, .aws, .env, mcp.json, *.pem); a new URL or e-mail
                address; format characters (zero-width, bidirectional controls,
                Unicode tags); a base64-like run of 48 or more characters; text
                more than 4 times longer and 400 characters more; a snake_case,
                back-quoted or "the X tool" name that is neither in the old text
                nor one of the tool's own or its fields' names, outside a
                deprecation note ("DEPRECATED: Use read_text_file instead").
  meaning       numbers, units (ms, seconds, bytes, ...) or negations (not, no,
                only, ...) differ: affects the agents that use the field.
  reworded      anything else (typo, punctuation, rephrasing): reported with a
                review hint; affects no agent.

Used surface paths are dotted property paths from the schema root, "[]" for
array items: user_id, options.timeout, items[].id. A path covers what is
below it. An agent is affected by a change on a path it uses that breaks its
side (not a widening of what it sends nor a narrowing of what it reads), a
breaking change on a parent of one, a changed or removed default of an input field it
omits (a default reaches an agent only through calls that omit the field:
--used means "sends"), a description or title that now holds instructions to
the model, and a Tool field it depends on (--used-tool; annotations are hints
and never break a payload).

_meta and icons change no call and are outside the fingerprint: when only they
change, OLD and NEW have the same fingerprint, each change is of kind
tool_field_changed (never breaking), and the verdict is DRIFT_ON_UNUSED_FIELDS
(PROCEED) unless --used-tool names the field. serve reports such a change once
per agent, when the tool first presents it, and its repeats not at all.

Flags (they may come before or after the files):
  --used PATHS         input paths the agent sends, comma separated; repeatable (default: none)
  --used-output PATHS  output paths the agent reads, comma separated; repeatable (default: none)
  --used-tool FIELDS   Tool fields the agent depends on, comma separated; repeatable (default:
                       none): execution for an agent that runs the tool as a task,
                       icons or _meta for one that reads them
  --args FILE          an arguments object the agent sent: its paths are added to --used,
                       and a narrowing that still accepts what it sends (a field it sends
                       becoming required, a type that still takes its values) does not
                       affect it
  --tool NAME          the tool to compare when OLD or NEW lists several (default: the only one)
  --json               print one JSON object instead of the table (default: false):
                       {"old_fingerprint", "new_fingerprint", "changes", "verdict",
                        "directive", "manifest_digest", "affected", "migration"}

The exit status is 0 when the comparison ran, whatever the verdict; 1 when a
file cannot be read or is not a tool or schema; 2 on a usage error.

Example:
  toolsentry diff crm-v1.json crm-v2.json --used user_id,options.timeout --used-output results[].id
`

// listFlag collects comma-separated values over repeated flags.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments ("--" ends the flags), then applies the environment
// (applyEnv of the bound variables).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErrorf("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, applyEnv(fs, boundEnv)
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), applyEnv(fs, boundEnv)
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// loadTool reads one tool from a file (see toolInputsHelp), picking name
// from a tools/list when given.
func loadTool(path, name string) (toolschema.ToolDefinition, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return toolschema.ToolDefinition{}, err
	}
	tools, err := toolschema.ParseToolDocument(raw)
	if err != nil {
		return toolschema.ToolDefinition{}, fmt.Errorf("%s: %w", path, err)
	}
	if name == "" {
		if len(tools) != 1 {
			return toolschema.ToolDefinition{}, usageErrorf("%s lists %d tools: pick one with --tool (%s)", path, len(tools), toolNames(tools))
		}
		return tools[0], nil
	}
	for _, t := range tools {
		if t.Name == name {
			return t, nil
		}
	}
	return toolschema.ToolDefinition{}, fmt.Errorf("%s: no tool named %q (have: %s)", path, name, toolNames(tools))
}

func toolNames(tools []toolschema.ToolDefinition) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = fmt.Sprintf("%q", t.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// loadToolPair reads OLD and NEW; a tool named by --tool must be in both.
func loadToolPair(oldPath, newPath, name string) (toolschema.ToolDefinition, toolschema.ToolDefinition, error) {
	oldT, err := loadTool(oldPath, name)
	if err != nil {
		return oldT, oldT, err
	}
	newT, err := loadTool(newPath, name)
	return oldT, newT, err
}

// decodePayload reads one JSON value, numbers kept as written.
func decodePayload(r io.Reader) (any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no JSON value")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// diffJSON is the --json output.
type diffJSON struct {
	OldFingerprint string                   `json:"old_fingerprint"`
	NewFingerprint string                   `json:"new_fingerprint"`
	Changes        []toolschema.Change      `json:"changes"`
	Verdict        guards.SchemaVerdict     `json:"verdict"`
	Directive      string                   `json:"directive"`
	ManifestDigest string                   `json:"manifest_digest"`
	Affected       []string                 `json:"affected"`
	Migration      toolschema.MigrationPlan `json:"migration"`
}

func runDiff(_ context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	var used, usedOutput listFlag
	fs.Var(&used, "used", "")
	fs.Var(&usedOutput, "used-output", "")
	var usedTool listFlag
	fs.Var(&usedTool, "used-tool", "")
	argsFile := fs.String("args", "", "")
	toolName := fs.String("tool", "", "")
	asJSON := fs.Bool("json", false, "")
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 2 {
		return usageErrorf("diff needs two files, OLD and NEW, got %d", len(files))
	}
	for _, p := range append(append([]string{}, used...), usedOutput...) {
		if err := toolschema.CheckSchemaPath(p); err != nil {
			return usageErrorf("--used or --used-output: %s", strings.TrimPrefix(err.Error(), guards.ErrInvalid.Error()+": "))
		}
	}
	var sends map[string]toolschema.SentField
	if *argsFile != "" {
		raw, err := os.ReadFile(*argsFile)
		if err != nil {
			return err
		}
		payload, err := decodePayload(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("%s: %w", *argsFile, err)
		}
		used = append(used, toolschema.SurfaceFromArguments(payload)...)
		sends = toolschema.SendsFromArguments(payload)
	}
	oldT, newT, err := loadToolPair(files[0], files[1], *toolName)
	if err != nil {
		return err
	}
	rep, err := toolschema.EvaluateDrift(oldT, newT, toolschema.UsedSurface{Input: used, Output: usedOutput, Tool: usedTool, Sends: sends})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(io.out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(diffJSON{
			OldFingerprint: rep.OldFingerprint,
			NewFingerprint: rep.NewFingerprint,
			Changes:        rep.Changes,
			Verdict:        rep.Manifest.Verdict,
			Directive:      rep.Manifest.Directive,
			ManifestDigest: rep.Manifest.ManifestDigest,
			Affected:       rep.Affected,
			Migration:      rep.Migration,
		})
	}
	return writeDiffTable(io.out, rep)
}

func writeDiffTable(w io.Writer, rep toolschema.DriftReport) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old  %s\nnew  %s\n\n", rep.OldFingerprint, rep.NewFingerprint)
	affected := map[string]bool{}
	for _, k := range rep.Affected {
		affected[k] = true
	}
	if len(rep.Changes) == 0 {
		b.WriteString("no changes\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SIDE\tPATH\tKIND\tCHANGE\tBREAKING\tAFFECTS AGENT")
		for _, c := range rep.Changes {
			path := c.Path
			if path == "" {
				path = "(root)"
			}
			if c.Keyword != "" && c.Side != toolschema.SideTool {
				path += " (" + c.Keyword + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Side, path, c.Kind, changeDetail(c),
				yesNo(c.Breaking, "yes", "no")+yesNo(c.Security, " (security)", ""),
				yesNo(affected[toolschema.SurfaceKey(c.Side, c.Path)], "yes", "no"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\nreasons:\n")
		for _, c := range rep.Changes {
			fmt.Fprintf(&b, "  - %s\n", c.Reason)
		}
	}
	fmt.Fprintf(&b, "\nverdict    %s\ndirective  %s\ndigest     %s\n", rep.Manifest.Verdict, rep.Manifest.Directive, rep.Manifest.ManifestDigest)
	if len(rep.Affected) > 0 {
		fmt.Fprintf(&b, "affected   %s\n", strings.Join(rep.Affected, ", "))
	}
	if len(rep.Migration.Steps) > 0 || len(rep.Migration.Blocked) > 0 {
		b.WriteString("\nmigration:\n")
		for _, s := range rep.Migration.Steps {
			fmt.Fprintf(&b, "  %s\n", describeStep(s))
		}
		for _, bl := range rep.Migration.Blocked {
			fmt.Fprintf(&b, "  cannot migrate %s when %s: %s\n", displayPath(bl.Path), describeBlockCondition(bl), bl.Reason)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func displayPath(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// changeDetail is a change's before → after, shortened for the table.
func changeDetail(c toolschema.Change) string {
	if c.Kind == toolschema.FieldRenamed {
		return "→ " + c.To
	}
	short := func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return "∅"
		}
		s := string(raw)
		if strings.HasPrefix(s, `"`) && !strings.ContainsAny(s[1:len(s)-1], `"\ `) {
			s = s[1 : len(s)-1]
		}
		if r := []rune(s); len(r) > 32 {
			s = string(r[:31]) + "…"
		}
		return s
	}
	return short(c.Before) + " → " + short(c.After)
}

func describeStep(s toolschema.MigrationStep) string {
	switch s.Op {
	case toolschema.OpMove:
		return fmt.Sprintf("move %s → %s", displayPath(s.Path), s.To)
	case toolschema.OpConvert:
		return fmt.Sprintf("convert %s to %s", displayPath(s.Path), s.Type)
	case toolschema.OpMapEnum:
		b, _ := json.Marshal(s.Mapping)
		return fmt.Sprintf("map_enum %s %s", displayPath(s.Path), b)
	case toolschema.OpAddIfAbsent:
		return fmt.Sprintf("add_if_absent %s = %s", displayPath(s.Path), s.Value)
	}
	return fmt.Sprintf("%s %s", s.Op, displayPath(s.Path))
}

func describeBlockCondition(b toolschema.MigrationBlocker) string {
	switch b.When {
	case toolschema.BlockWhenPresent:
		return "sent"
	case toolschema.BlockWhenAbsent:
		return "missing"
	case toolschema.BlockWhenValue:
		return "one of " + rawList(b.Values)
	case toolschema.BlockWhenNotIn:
		return "not one of " + rawList(b.Values)
	}
	return b.When
}

func rawList(vals []json.RawMessage) string {
	parts := make([]string, 0, len(vals))
	for i, v := range vals {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(vals)-i))
			break
		}
		parts = append(parts, string(v))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
