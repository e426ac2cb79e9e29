package toolschema

import (
	"github.com/toolsentry/toolsentry/guards"

	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkFingerprint compares fingerprinting a typical 2 KB MCP tool
// (parse, normalise, canonicalise, hash) with a plain json.Unmarshal of the
// same bytes, in one loop, and reports both and their ratio (target: ≤ 3).
func BenchmarkFingerprint(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "toolschema", "bench", "create_pull_request.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("size=%dB", len(raw)), func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		var unmarshal, fingerprint time.Duration
		for b.Loop() {
			t0 := time.Now()
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			tools, err := ParseToolDocument(raw)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Fingerprint(tools[0]); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			unmarshal += t1.Sub(t0)
			fingerprint += t2.Sub(t1)
		}
		n := float64(b.N)
		b.ReportMetric(float64(unmarshal.Nanoseconds())/n, "unmarshal-ns/op")
		b.ReportMetric(float64(fingerprint.Nanoseconds())/n, "fingerprint-ns/op")
		b.ReportMetric(float64(fingerprint)/float64(unmarshal), "fingerprint/unmarshal")
	})
}

// BenchmarkEvaluateDrift diffs two versions of a realistic MCP tool (the
// snake_case to camelCase rename), decides the verdict for an agent's used
// surface and plans the migration: the work of one drift verdict.
func BenchmarkEvaluateDrift(b *testing.B) {
	dir := filepath.Join("testdata", "toolschema", "snake_to_camel")
	load := func(name string) ToolDefinition {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		tools, err := ParseToolDocument(raw)
		if err != nil {
			b.Fatal(err)
		}
		return tools[0]
	}
	old, cur := load("old.json"), load("new.json")
	surface := UsedSurface{Input: []string{"owner", "repo", "per_page", "label_filter.match_all"}}
	b.ReportAllocs()
	for b.Loop() {
		rep, err := EvaluateDrift(old, cur, surface)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Manifest.Verdict != guards.DriftOnUsedFields {
			b.Fatalf("verdict %s", rep.Manifest.Verdict)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "drift-verdicts/s")
}

// BenchmarkDiffTools diffs two versions of a 2 KB MCP tool (a rename, an
// Optional widened to a union, enums and bounds moved, a default flipped, a
// Tool-level field added): the diff alone, both tools parsed beforehand.
func BenchmarkDiffTools(b *testing.B) {
	load := func(name string) ToolDefinition {
		raw, err := os.ReadFile(filepath.Join("testdata", "toolschema", "bench", name))
		if err != nil {
			b.Fatal(err)
		}
		tools, err := ParseToolDocument(raw)
		if err != nil {
			b.Fatal(err)
		}
		return tools[0]
	}
	old, cur := load("create_pull_request.json"), load("create_pull_request_v2.json")
	b.ReportAllocs()
	for b.Loop() {
		changes, err := DiffTools(old, cur)
		if err != nil {
			b.Fatal(err)
		}
		if len(changes) == 0 {
			b.Fatal("no changes")
		}
	}
}
