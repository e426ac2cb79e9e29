package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/toolsentry/toolsentry/guards"
)

// checkKind evaluates one JSON Lines case of `toolsentry check KIND`.
type checkKind struct {
	name     string
	summary  string
	evaluate func(line []byte) (any, error)
}

var checkKinds = map[string]checkKind{}

func registerCheck(k checkKind) { checkKinds[k.name] = k }

func init() {
	registerCheck(checkKind{
		name:     "composition",
		summary:  `{"composition": {"composition_id", "tools": [{"tool_id", "accuracy", "determinism", "output_schema_hash", "expected_input_schema_hash"}], "workflow_quality_requirement", "introduction_of_nondeterminism_acceptable"}, "policy": {"require_schema_compatibility"}}`,
		evaluate: evaluateCompositionCase,
	})
	registerCheck(checkKind{
		name:     "schema",
		summary:  `{"current": {"tool_id", "version", "schema_fingerprint", "used_fields": [...]}, "baseline": null | {"baseline_fingerprint", "baseline_used_fields": [...], "changed_fields": [...]}}`,
		evaluate: evaluateSchemaCase,
	})
	register(&command{
		name:      "check",
		summary:   "evaluate guard cases offline: JSON Lines in, one verdict line per case out",
		usageFunc: checkUsage,
		run:       runCheck,
	})
}

func checkUsage() string {
	var b strings.Builder
	b.WriteString(`Usage: toolsentry check KIND < cases.jsonl

Evaluates one case per input line with a guard, offline (no NATS), and writes
one JSON line per case to standard output, in input order. Blank lines are
skipped. A line that is not a valid case is answered {"error": "line N: ..."}
and the other lines are still answered; the exit status is 1 if any line
failed, else 0. Unknown or misspelt fields are errors, never ignored.

Kinds and their input lines:
`)
	names := make([]string, 0, len(checkKinds))
	for n := range checkKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\n  %s\n      %s\n", n, checkKinds[n].summary)
	}
	b.WriteString(`
Example:
  echo '{"current": {"tool_id": "crm.lookup", "version": "2", "schema_fingerprint": "b", "used_fields": ["user_id"]}, "baseline": {"baseline_fingerprint": "a", "baseline_used_fields": ["user_id"], "changed_fields": ["user_id"]}}' | toolsentry check schema
`)
	return b.String()
}

func runCheck(_ context.Context, args []string, io stdio) error {
	if len(args) != 1 {
		return usageErrorf("check needs exactly one kind: %s", strings.Join(checkKindNames(), ", "))
	}
	kind, ok := checkKinds[args[0]]
	if !ok {
		return usageErrorf("unknown check kind %q, want one of: %s", args[0], strings.Join(checkKindNames(), ", "))
	}
	return checkLines(io.in, io.out, kind.evaluate)
}

func checkKindNames() []string {
	names := make([]string, 0, len(checkKinds))
	for n := range checkKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkLines answers every non-blank line of in with one JSON line on out.
// It returns errExit(1) if any line failed, or the first read or write error.
func checkLines(in io.Reader, out io.Writer, evaluate func([]byte) (any, error)) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	failed := false
	for n := 1; ; n++ {
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("reading line %d: %w", n, readErr)
		}
		if trimmed := strings.TrimSpace(string(line)); trimmed != "" {
			result, err := evaluate([]byte(trimmed))
			if err != nil {
				failed = true
				result = map[string]string{"error": fmt.Sprintf("line %d: %s", n, describeCaseError(err))}
			}
			if err := enc.Encode(result); err != nil {
				return fmt.Errorf("writing answer to line %d: %w", n, err)
			}
		}
		if readErr != nil {
			break
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing answers: %w", err)
	}
	if failed {
		return errExit(1)
	}
	return nil
}

// describeCaseError drops the sentinel's text: "invalid input: x: missing"
// reads better as "x: missing" after "line N:".
func describeCaseError(err error) string {
	return strings.TrimPrefix(err.Error(), guards.ErrInvalid.Error()+": ")
}

type compositionCase struct {
	Composition guards.ToolComposition   `json:"composition"`
	Policy      guards.CompositionPolicy `json:"policy"`
}

func evaluateCompositionCase(line []byte) (any, error) {
	var c compositionCase
	if err := guards.DecodeStrict(line, &c); err != nil {
		return nil, err
	}
	if err := c.Composition.Validate(); err != nil {
		return nil, fmt.Errorf("composition: %w", err)
	}
	return guards.EvaluateComposition(c.Composition, c.Policy), nil
}

type schemaCase struct {
	Current  guards.ToolSchema      `json:"current"`
	Baseline *guards.SchemaBaseline `json:"baseline,omitempty"`
}

func evaluateSchemaCase(line []byte) (any, error) {
	var c schemaCase
	if err := guards.DecodeStrict(line, &c); err != nil {
		return nil, err
	}
	return guards.EvaluateSchema(c.Current, c.Baseline), nil
}
