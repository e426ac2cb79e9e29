package guards

import (
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
