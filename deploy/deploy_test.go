package deploy

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
)

// files returns the files under deploy/ whose names end in one of exts.
func files(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, e := range exts {
			if !d.IsDir() && strings.HasSuffix(path, e) {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNATSConfigsParse reads every nats-server configuration in deploy/
// with nats-server's own parser and option checks (accounts, permissions,
// cluster, JetStream), as nats-server -c does before it starts.
func TestNATSConfigsParse(t *testing.T) {
	for _, v := range []string{"TOOLSENTRY_AGENT_PASSWORD", "TOOLSENTRY_WORKER_PASSWORD", "TOOLSENTRY_SUBSCRIBER_PASSWORD", "TOOLSENTRY_OPERATOR_PASSWORD"} {
		t.Setenv(v, "test-"+strings.ToLower(v))
	}
	confs := files(t, ".conf")
	if len(confs) < 6 {
		t.Fatalf("found %d nats-server configs: %v; want single, accounts, cluster common and 3 nodes", len(confs), confs)
	}
	for _, path := range confs {
		t.Run(path, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(path)
			if err != nil {
				t.Fatalf("nats-server rejects %s: %v", path, err)
			}
			// What nats-server checks after reading: cluster, JetStream,
			// accounts and permissions together. common.conf is only a
			// part of the node files: it names no server.
			if filepath.Base(path) != "common.conf" {
				opts.StoreDir = t.TempDir()
				ns, err := server.NewServer(opts)
				if err != nil {
					t.Fatalf("nats-server would not start with %s: %v", path, err)
				}
				ns.Shutdown()
			}

			users := map[string]bool{}
			for _, u := range opts.Users {
				users[u.Username] = true
				if u.Account == nil || u.Account.Name != "TOOLSENTRY" {
					t.Errorf("user %s is not in account TOOLSENTRY", u.Username)
				}
				if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
					t.Errorf("user %s has no publish and subscribe permissions: it could do anything", u.Username)
				}
			}
			for _, want := range []string{"agent", "worker", "subscriber", "operator"} {
				if !users[want] {
					t.Errorf("%s defines no user %q (users: %v)", path, want, users)
				}
			}
			if strings.Contains(path, "node-") {
				if opts.ServerName == "" || opts.Cluster.Name != "toolsentry" || len(opts.Routes) != 3 || opts.StoreDir == "" {
					t.Errorf("cluster node: name %q, cluster %q, %d routes, store %q", opts.ServerName, opts.Cluster.Name, len(opts.Routes), opts.StoreDir)
				}
			}
		})
	}

	t.Run("a password is never in a file", func(t *testing.T) {
		os.Unsetenv("TOOLSENTRY_WORKER_PASSWORD")
		if _, err := server.ProcessConfigFile("nats/accounts.conf"); err == nil {
			t.Error("accounts.conf parses without TOOLSENTRY_WORKER_PASSWORD: a password is written in it")
		}
	})
}

// TestYAMLFilesParse reads every YAML document of every YAML file in
// deploy/ (compose, Kubernetes manifests, Helm values, serve config).
func TestYAMLFilesParse(t *testing.T) {
	ymls := files(t, ".yaml", ".yml")
	if len(ymls) < 4 {
		t.Fatalf("found %d YAML files: %v", len(ymls), ymls)
	}
	for _, path := range ymls {
		t.Run(path, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			docs := 0
			for {
				var doc map[string]any
				err := dec.Decode(&doc)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("document %d: %v", docs+1, err)
				}
				if len(doc) == 0 {
					t.Errorf("document %d is empty", docs+1)
				}
				docs++
			}
			if docs == 0 {
				t.Error("no YAML document")
			}
		})
	}
}
