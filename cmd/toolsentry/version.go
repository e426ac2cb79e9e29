package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the module version, the commit it was built from and the Go version",
		usage: `Usage: toolsentry version [--json]

Prints what this binary was built from: the module version (v1.2.3 from
` + "`go install github.com/toolsentry/toolsentry/cmd/toolsentry@v1.2.3`" + `,
"(devel)" from a clone), the VCS commit and whether the work tree had
uncommitted changes ("modified"), the commit time, and the Go version and
platform. A binary built without VCS information (go build -buildvcs=false,
or go install of a module version) shows no commit.

Flags:
  --json    print one JSON object: {"version", "commit", "modified", "commit_time", "go", "platform"}

Examples:
  toolsentry version
  toolsentry --version
`,
		run: runVersion,
	})
}

// buildVersion is what `toolsentry version` reports.
type buildVersion struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// versionOf reads the build information the Go toolchain stamps into the
// binary (ok is debug.ReadBuildInfo's second result).
func versionOf(bi *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "vcs.time":
			v.CommitTime = s.Value
		case "GOOS", "GOARCH":
			// runtime's values are the ones this binary runs with
		}
	}
	return v
}

// String is the human-readable report, one fact per line.
func (v buildVersion) String() string {
	s := "toolsentry " + v.Version + "\n"
	if v.Commit != "" {
		s += "commit     " + v.Commit
		if v.Modified {
			s += " (modified)"
		}
		s += "\n"
		if v.CommitTime != "" {
			s += "built from " + v.CommitTime + "\n"
		}
	}
	return s + "go         " + v.Go + " " + v.Platform + "\n"
}

func runVersion(_ context.Context, args []string, sio stdio) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("version takes no arguments, got %q", rest)
	}
	v := versionOf(debug.ReadBuildInfo())
	if *asJSON {
		return json.NewEncoder(sio.out).Encode(v)
	}
	_, err = fmt.Fprint(sio.out, v)
	return err
}
