package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// unsetServeEnv clears every environment variable of serve's settings for
// the test (restored afterwards).
func unsetServeEnv(t *testing.T) {
	t.Helper()
	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	names := []string{envConfig}
	fs.VisitAll(func(fl *flag.Flag) { names = append(names, envName(fl.Name)) })
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// parseServe parses args as serve does and returns the settings.
func parseServe(t *testing.T, args ...string) (serveFlags, error) {
	t.Helper()
	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	err := parseSettings(fs, args)
	return f, err
}

type settings struct {
	Workers, Replicas       int
	DataDir, LogLevel, HTTP string
	ShutdownTimeout         time.Duration
	NATSURL                 string
	URLGiven                bool
	User, Password          string
}

func settingsOf(f serveFlags) settings {
	return settings{
		Workers: f.workers, Replicas: f.replicas, DataDir: f.dataDir, LogLevel: f.logLevel, HTTP: f.httpAddr,
		ShutdownTimeout: f.shutdownTimeout, NATSURL: f.conn.url.value, URLGiven: f.conn.urlGiven(), User: f.conn.user, Password: f.conn.password,
	}
}

func TestSettingsPrecedence(t *testing.T) {
	unsetServeEnv(t)
	file := writeFile(t, "serve.yaml", `# a deployment's settings
workers: 7
replicas: 3
data-dir: /from/file
log-level: warn
shutdown-timeout: 45s
nats-url:
  - nats://n1:4222
  - nats://n2:4222
nats-user: worker
nats-password: "from file"
http: ""
`)
	defaults := settings{Workers: 0, Replicas: 1, DataDir: "toolsentry-data", LogLevel: "info", HTTP: "127.0.0.1:9700",
		ShutdownTimeout: 10 * time.Second, NATSURL: defaultNATSURL}
	fromFile := settings{Workers: 7, Replicas: 3, DataDir: "/from/file", LogLevel: "warn", HTTP: "",
		ShutdownTimeout: 45 * time.Second, NATSURL: "nats://n1:4222,nats://n2:4222", URLGiven: true, User: "worker", Password: "from file"}

	check := func(t *testing.T, want settings, args ...string) {
		t.Helper()
		f, err := parseServe(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, settingsOf(f)); d != "" {
			t.Errorf("settings (-want +got):\n%s", d)
		}
	}
	t.Run("defaults", func(t *testing.T) { check(t, defaults) })
	t.Run("file over defaults", func(t *testing.T) { check(t, fromFile, "--config", file) })
	t.Run("TOOLSENTRY_CONFIG names the file", func(t *testing.T) {
		t.Setenv(envConfig, file)
		check(t, fromFile)
	})

	t.Run("environment over file", func(t *testing.T) {
		t.Setenv("TOOLSENTRY_WORKERS", "9")
		t.Setenv("TOOLSENTRY_LOG_LEVEL", "debug")
		t.Setenv("TOOLSENTRY_NATS_URL", "nats://env:4222")
		want := fromFile
		want.Workers, want.LogLevel, want.NATSURL = 9, "debug", "nats://env:4222"
		check(t, want, "--config", file)
	})
	t.Run("flags over environment and file", func(t *testing.T) {
		t.Setenv("TOOLSENTRY_WORKERS", "9")
		t.Setenv("TOOLSENTRY_REPLICAS", "5")
		want := fromFile
		want.Workers, want.Replicas, want.DataDir = 2, 5, "/from/flag"
		check(t, want, "--config", file, "--workers", "2", "--data-dir", "/from/flag")
	})
	t.Run("--config over TOOLSENTRY_CONFIG", func(t *testing.T) {
		t.Setenv(envConfig, writeFile(t, "other.yaml", "workers: 99\n"))
		check(t, fromFile, "--config", file)
	})
	t.Run("empty environment variable counts as unset", func(t *testing.T) {
		t.Setenv("TOOLSENTRY_LOG_LEVEL", "")
		check(t, fromFile, "--config", file)
	})
}

func TestSettingsErrorsNameTheirSource(t *testing.T) {
	unsetServeEnv(t)
	cases := []struct {
		name, file string
		env        map[string]string
		want       []string
	}{
		{name: "unknown key", file: "workers: 2\nwokers: 3\n", want: []string{"serve.yaml:2", `unknown setting "wokers"`, "no --wokers flag"}},
		{name: "bad value", file: "replicas: 3\nshutdown-timeout: soon\n", want: []string{"serve.yaml:2", "shutdown-timeout", `"soon"`}},
		{name: "duplicate key", file: "workers: 2\nworkers: 3\n", want: []string{"serve.yaml:2", `"workers" is already set on line 1`}},
		{name: "not a mapping", file: "- workers\n", want: []string{"serve.yaml:1", "want a mapping"}},
		{name: "nested value", file: "workers:\n  n: 2\n", want: []string{"serve.yaml:2", "workers", "not a mapping"}},
		{name: "config in config", file: "config: other.yaml\n", want: []string{"serve.yaml:1", `"config" cannot be set in a config file`}},
		{name: "not YAML", file: "workers: [2\n", want: []string{"serve.yaml", "yaml"}},
		{name: "bad environment value", env: map[string]string{"TOOLSENTRY_WORKERS": "many"}, want: []string{`TOOLSENTRY_WORKERS="many"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var args []string
			if tc.file != "" {
				args = []string{"--config", writeFile(t, "serve.yaml", tc.file)}
			}
			_, err := parseServe(t, args...)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, errUsage) {
				t.Errorf("error %v is not a usage error (exit 2)", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, stderr, code := runCmd(t, "", "serve", "--config", filepath.Join(t.TempDir(), "nope.yaml"))
		if code != 2 || !strings.Contains(stderr, "nope.yaml") {
			t.Errorf("exit %d, stderr %q; want 2 naming the file", code, stderr)
		}
	})
}

// TestServeHelpDocumentsEverySetting: every flag serve defines, including
// flags added later, is in `serve --help` with its environment variable and
// its default.
func TestServeHelpDocumentsEverySetting(t *testing.T) {
	unsetServeEnv(t)
	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	fs.String(configFlag, "", "") // added by parseSettings
	help := commands["serve"].help()
	// --nats-url's flag default is for the other commands; serve's help
	// says that without it an embedded server runs.
	exempt := map[string]string{"nats-url": "default: none, an embedded server runs"}
	fs.VisitAll(func(fl *flag.Flag) {
		i := strings.Index(help, "\n  --"+fl.Name+" ")
		if i < 0 {
			t.Errorf("serve --help does not document --%s", fl.Name)
			return
		}
		entry := help[i+1:]
		if j := strings.Index(entry[1:], "\n  --"); j >= 0 {
			entry = entry[:j+1]
		}
		if !strings.Contains(entry, envName(fl.Name)) {
			t.Errorf("--%s: help does not name %s:\n%s", fl.Name, envName(fl.Name), entry)
		}
		wantDefault := []string{"default " + fl.DefValue, `default "` + fl.DefValue + `"`}
		if e, ok := exempt[fl.Name]; ok {
			wantDefault = []string{e}
		}
		if !strings.Contains(entry, wantDefault[0]) && (len(wantDefault) < 2 || !strings.Contains(entry, wantDefault[1])) {
			t.Errorf("--%s: help does not give its default %q:\n%s", fl.Name, fl.DefValue, entry)
		}
	})
}

// TestEmptyEnvironmentLeavesEveryServeDefault sets every one of serve's
// variables to the empty string: each setting keeps the default it has with
// the variable unset, as serve --help promises (TOOLSENTRY_LOG_LEVEL= once
// made serve exit 2 with `--log-level ""`).
func TestEmptyEnvironmentLeavesEveryServeDefault(t *testing.T) {
	unsetServeEnv(t)
	values := func() map[string]string {
		var f serveFlags
		fs := newServeFlagSet(&f, io.Discard)
		if err := parseSettings(fs, nil); err != nil {
			t.Fatalf("parsing with no settings: %v", err)
		}
		m := map[string]string{}
		fs.VisitAll(func(fl *flag.Flag) { m[fl.Name] = fl.Value.String() })
		return m
	}
	want := values()
	var f serveFlags
	newServeFlagSet(&f, io.Discard).VisitAll(func(fl *flag.Flag) { t.Setenv(envName(fl.Name), "") })
	t.Setenv(envConfig, "")
	if d := cmp.Diff(want, values()); d != "" {
		t.Errorf("settings with every variable empty (-unset +empty):\n%s", d)
	}
	if want["log-level"] != "info" {
		t.Errorf("--log-level default = %q, want info", want["log-level"])
	}
}

// TestBoundEnvOneRule: every command's flags take their environment
// variables by one rule (bindEnv, applied by the parse): the command line
// wins, an empty variable is unset, a set one applies, and a value that
// does not parse is a usage error naming the variable, for every command,
// not only serve.
func TestBoundEnvOneRule(t *testing.T) {
	newSet := func() (*flag.FlagSet, *int, *bool, *listFlag, *time.Duration) {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		n := fs.Int("count", 7, "")
		bindEnv(fs, "count", "TOOLSENTRY_TEST_COUNT")
		b := fs.Bool("json", false, "")
		bindEnv(fs, "json", "TOOLSENTRY_TEST_JSON")
		var l listFlag
		fs.Var(&l, "tool", "")
		bindEnv(fs, "tool", "TOOLSENTRY_TEST_TOOL")
		d := fs.Duration("timeout", time.Second, "")
		bindEnv(fs, "timeout", "TOOLSENTRY_TEST_TIMEOUT")
		return fs, n, b, &l, d
	}
	for _, parse := range []struct {
		name string
		run  func(*flag.FlagSet, []string) error
	}{
		{"parseFlags", parseFlags},
		{"parseInterleaved", func(fs *flag.FlagSet, args []string) error { _, err := parseInterleaved(fs, args); return err }},
	} {
		t.Run(parse.name, func(t *testing.T) {
			t.Setenv("TOOLSENTRY_TEST_COUNT", "")
			t.Setenv("TOOLSENTRY_TEST_JSON", "")
			t.Setenv("TOOLSENTRY_TEST_TOOL", "")
			t.Setenv("TOOLSENTRY_TEST_TIMEOUT", "")
			fs, n, b, l, d := newSet()
			if err := parse.run(fs, nil); err != nil || *n != 7 || *b || len(*l) != 0 || *d != time.Second {
				t.Fatalf("empty variables: %v, count %d json %v tool %q timeout %s; want the defaults", err, *n, *b, *l, *d)
			}

			t.Setenv("TOOLSENTRY_TEST_COUNT", "9")
			t.Setenv("TOOLSENTRY_TEST_JSON", "true")
			t.Setenv("TOOLSENTRY_TEST_TOOL", "a, b")
			fs, n, b, l, _ = newSet()
			if err := parse.run(fs, nil); err != nil || *n != 9 || !*b || !slices.Equal(*l, []string{"a", "b"}) {
				t.Fatalf("set variables: %v, count %d json %v tool %q", err, *n, *b, *l)
			}

			// The command line wins, and a list flag given there replaces
			// the variable's list instead of extending it.
			fs, n, b, l, _ = newSet()
			if err := parse.run(fs, []string{"--count", "3", "--json=false", "--tool", "c"}); err != nil || *n != 3 || *b || !slices.Equal(*l, []string{"c"}) {
				t.Fatalf("command line over variables: %v, count %d json %v tool %q", err, *n, *b, *l)
			}
			fs, _, b, _, _ = newSet()
			if err := parse.run(fs, []string{"--json"}); err != nil || !*b {
				t.Fatalf("a bare boolean flag: %v, json %v", err, *b)
			}

			t.Setenv("TOOLSENTRY_TEST_TIMEOUT", "soon")
			fs, _, _, _, _ = newSet()
			err := parse.run(fs, nil)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `TOOLSENTRY_TEST_TIMEOUT="soon"`) {
				t.Fatalf("a bad value: %v, want a usage error naming the variable", err)
			}
			fs, _, _, _, d = newSet()
			if err := parse.run(fs, []string{"--timeout", "2s"}); err != nil || *d != 2*time.Second {
				t.Fatalf("a bad variable under a flag given on the command line: %v, timeout %s", err, *d)
			}
		})
	}
}
