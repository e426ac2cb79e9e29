package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVersionOfBuildInfo(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want buildVersion
		text string
	}{
		{
			name: "a module version built from a clean commit",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolsentry/toolsentry", Version: "v1.4.0"},
				Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			ok:   true,
			want: buildVersion{Version: "v1.4.0", Commit: "0123abcd", CommitTime: "2026-12-01T10:00:00Z", Go: "go1.26.8", Platform: platform},
			text: "toolsentry v1.4.0\ncommit     0123abcd\nbuilt from 2026-12-01T10:00:00Z\ngo         go1.26.8 " + platform + "\n",
		},
		{
			name: "a clone with uncommitted changes",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "feedface"}, {Key: "vcs.modified", Value: "true"}}},
			ok:   true,
			want: buildVersion{Version: "(devel)", Commit: "feedface", Modified: true, Go: "go1.26.8", Platform: platform},
			text: "toolsentry (devel)\ncommit     feedface (modified)\ngo         go1.26.8 " + platform + "\n",
		},
		{
			name: "no VCS information",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			ok:   true,
			want: buildVersion{Version: "(devel)", Go: "go1.26.8", Platform: platform},
			text: "toolsentry (devel)\ngo         go1.26.8 " + platform + "\n",
		},
		{
			name: "no build information at all",
			want: buildVersion{Version: "unknown", Go: runtime.Version(), Platform: platform},
			text: "toolsentry unknown\ngo         " + runtime.Version() + " " + platform + "\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := versionOf(c.bi, c.ok)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("versionOf (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.text, got.String()); d != "" {
				t.Errorf("text (-want +got):\n%s", d)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, stdio{out: &out, err: &out}); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "toolsentry ") || !strings.Contains(out.String(), runtime.Version()) {
			t.Errorf("%q printed %q, want the module and Go versions", args, out.String())
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version", "--json"}, stdio{out: &out, err: &out}); err != nil {
		t.Fatal(err)
	}
	var v buildVersion
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("version --json: %v: %s", err, out.String())
	}
	if v.Go != runtime.Version() || v.Version == "" {
		t.Errorf("version --json = %+v", v)
	}
}
