package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/encoded")

// TestEncodedGolden pins the bytes Encode writes for each decode case: the
// wire format is the contract, and a change to it must show in review.
// Run with -update to rewrite the files after a deliberate change.
func TestEncodedGolden(t *testing.T) {
	for _, tc := range decodeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode(tc.subject, tc.header, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := Names{}.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, msg.Data, "", "  "); err != nil {
				t.Fatal(err)
			}
			got := "subject: " + msg.Subject + "\n" + pretty.String() + "\n"
			name := strings.NewReplacer(" ", "_", ",", "", "/", "_", "'", "").Replace(tc.name) + ".golden"
			path := filepath.Join("testdata", "encoded", name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s changed:\n--- want\n%s\n--- got\n%s", path, want, got)
			}
		})
	}
}
