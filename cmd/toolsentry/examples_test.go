package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// examplesDir holds the sample files the README's commands use.
const examplesDir = "../../examples"

// TestExamplesAreValid emits every sample file with --dry-run, as the
// README and examples/README.md publish it: each is valid and yields
// events.
func TestExamplesAreValid(t *testing.T) {
	cases := map[string][]string{
		"events.jsonl":       {filepath.Join(examplesDir, "events.jsonl")},
		"observations.jsonl": {filepath.Join(examplesDir, "observations.jsonl")},
		"traces.jsonl":       {"--otlp", filepath.Join(examplesDir, "traces.jsonl")},
		"tools-list.json":    {"--mcp-tools", filepath.Join(examplesDir, "tools-list.json"), "--server", "secure-filesystem-server"},
	}
	entries, err := os.ReadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := cases[e.Name()]; !ok && e.Name() != "README.md" {
			t.Errorf("examples/%s has no case here: add how it is emitted", e.Name())
		}
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"emit", "--dry-run"}, args...), stdio{in: strings.NewReader(""), out: &out, err: &errOut})
			if err != nil {
				t.Fatalf("emit --dry-run %v: %v\n%s", args, err, errOut.String())
			}
			if lines := strings.Count(out.String(), "toolsentry.telemetry."); lines == 0 {
				t.Errorf("emit --dry-run %v printed no event:\n%s", args, out.String())
			}
		})
	}
}

// TestReadmeSampleFilesExist: every examples/ file the READMEs name is in
// the repository, and no command of the README publishes a sample file
// from the working directory.
func TestReadmeSampleFilesExist(t *testing.T) {
	for _, readme := range []string{"../../README.md", filepath.Join(examplesDir, "README.md")} {
		raw, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`examples/[A-Za-z0-9._-]+`).FindAllString(string(raw), -1) {
			if _, err := os.Stat(filepath.Join(examplesDir, strings.TrimPrefix(m, "examples/"))); err != nil {
				t.Errorf("%s names %s: %v", readme, m, err)
			}
		}
		for _, bare := range regexp.MustCompile(`(?m)toolsentry emit[^\n]* ((?:--otlp |--mcp-tools )?)([a-z-]+\.jsonl?)\b`).FindAllStringSubmatch(string(raw), -1) {
			t.Errorf("%s: %q publishes %s from the working directory: point it at examples/", readme, bare[0], bare[2])
		}
	}
}
