package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// deployDir is deploy/ seen from this package.
const deployDir = "../../deploy/"

// checkServeInvocation checks that args (after the binary's name) are a
// valid `toolsentry serve` command line and env only names serve's
// settings; it returns the parsed settings.
func checkServeInvocation(t *testing.T, where string, args []string, env []string) serveFlags {
	t.Helper()
	var f serveFlags
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: command %q does not run serve", where, args)
	}
	fs := newServeFlagSet(&f, io.Discard)
	fs.String(configFlag, "", "")
	if err := fs.Parse(args[1:]); err != nil {
		t.Errorf("%s: serve rejects %q: %v", where, args, err)
	}
	if fs.NArg() > 0 {
		t.Errorf("%s: serve takes no arguments, the command has %q", where, fs.Args())
	}
	known := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { known[envName(fl.Name)] = true })
	for _, e := range env {
		if strings.HasPrefix(e, "TOOLSENTRY_") && !known[e] {
			t.Errorf("%s: %s is no setting of serve", where, e)
		}
	}
	return f
}

func readYAMLDocs(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, &n)
	}
}

// TestDeployComposeRunsRealServe: the compose file's workers run serve with
// flags and TOOLSENTRY_* variables serve has, R3, against the three NATS
// services, each of which reads an existing config file.
func TestDeployComposeRunsRealServe(t *testing.T) {
	unsetServeEnv(t)
	var compose struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	docs := readYAMLDocs(t, deployDir+"compose.yaml")
	if err := docs[0].Decode(&compose); err != nil {
		t.Fatal(err)
	}
	workers, nodes := 0, 0
	for name, svc := range compose.Services {
		switch {
		case strings.HasPrefix(name, "worker-"):
			workers++
			var env []string
			for k := range svc.Environment {
				env = append(env, k)
			}
			f := checkServeInvocation(t, "compose "+name, svc.Command, env)
			if f.replicas != 3 {
				t.Errorf("compose %s: --replicas %d, want 3", name, f.replicas)
			}
			if f.scale.partitions < 2 {
				t.Errorf("compose %s: --partitions %d: two workers on one consumer break per-tool order", name, f.scale.partitions)
			}
			for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
				if !strings.Contains(f.conn.url.value, "nats://"+n+":4222") {
					t.Errorf("compose %s: --nats-url %q lacks %s", name, f.conn.url.value, n)
				}
				if _, ok := compose.Services[n]; !ok {
					t.Errorf("compose has no service %s", n)
				}
			}
			if f.conn.user != "worker" || f.conn.inbox != "_INBOX_workers" || svc.Environment["TOOLSENTRY_NATS_PASSWORD"] == "" {
				t.Errorf("compose %s: not the worker of accounts.conf (user %q, inbox %q)", name, f.conn.user, f.conn.inbox)
			}
		case strings.HasPrefix(name, "nats-"):
			nodes++
			if len(svc.Command) != 2 || svc.Command[0] != "-c" || !strings.HasPrefix(svc.Command[1], "/etc/nats/") {
				t.Errorf("compose %s: command %q", name, svc.Command)
				continue
			}
			if _, err := os.Stat(deployDir + "nats/" + strings.TrimPrefix(svc.Command[1], "/etc/nats/")); err != nil {
				t.Errorf("compose %s reads a config that is not in deploy/nats: %v", name, err)
			}
		}
	}
	if workers != 2 || nodes != 3 {
		t.Errorf("compose: %d workers and %d NATS nodes, want 2 and 3", workers, nodes)
	}
}

// TestDeployKubernetesWorker: the Deployment runs serve with real flags and
// settings, and its probes ask paths that a running serve answers with 200
// on the port its --http listens on.
func TestDeployKubernetesWorker(t *testing.T) {
	unsetServeEnv(t)
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	var dep struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `yaml:"args"`
						Env  []struct {
							Name string `yaml:"name"`
						} `yaml:"env"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
						StartupProbe   *probe `yaml:"startupProbe"`
						LivenessProbe  *probe `yaml:"livenessProbe"`
						ReadinessProbe *probe `yaml:"readinessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	found := false
	for _, d := range readYAMLDocs(t, deployDir+"k8s/worker.yaml") {
		if err := d.Decode(&dep); err != nil {
			t.Fatal(err)
		}
		if dep.Kind == "Deployment" {
			found = true
			break
		}
	}
	if !found || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("k8s/worker.yaml: no Deployment with one container")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name)
	}
	f := checkServeInvocation(t, "k8s worker", c.Args, env)
	if f.replicas != 3 {
		t.Errorf("k8s worker: --replicas %d, want 3", f.replicas)
	}
	if f.scale.partitions < 2 {
		t.Errorf("k8s worker: --partitions %d: replicated workers on one consumer break per-tool order", f.scale.partitions)
	}
	_, port, err := net.SplitHostPort(f.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || port != "9700" || c.Ports[0].ContainerPort != 9700 {
		t.Errorf("k8s worker: --http %s, ports %+v; want the probes' named port on --http's port", f.httpAddr, c.Ports)
	}
	probes := map[string]*probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	want := map[string]string{"startup": "/livez", "liveness": "/livez", "readiness": "/readyz"}

	// A real serve answers the probes' paths.
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	for name, p := range probes {
		if p == nil {
			t.Errorf("k8s worker: no %s probe", name)
			continue
		}
		if p.HTTPGet.Path != want[name] || p.HTTPGet.Port != "http" {
			t.Errorf("k8s worker: %s probe GET %s on %s, want %s on http", name, p.HTTPGet.Path, p.HTTPGet.Port, want[name])
		}
		if code, _ := get(t, "http://"+r.httpAddr+p.HTTPGet.Path); code != 200 {
			t.Errorf("serve answers the %s probe's %s with %d", name, p.HTTPGet.Path, code)
		}
	}
	_, body := get(t, "http://"+r.httpAddr+"/metrics")
	if !strings.Contains(body, "toolsentry_events_consumed_total") {
		t.Error("the prometheus.io/path annotation's /metrics has no toolsentry metrics")
	}
}

// TestDeploySystemdUnit: the unit's ExecStart is a valid serve command line,
// and the config file it names (deploy/systemd/serve.yaml) holds only
// serve's settings, with valid values.
func TestDeploySystemdUnit(t *testing.T) {
	unsetServeEnv(t)
	raw, err := os.ReadFile(deployDir + "systemd/toolsentry.service")
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	var envs []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			name, _, _ := strings.Cut(v, "=")
			envs = append(envs, name)
		}
	}
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/toolsentry") {
		t.Fatalf("ExecStart %q does not run toolsentry", exec)
	}
	checkServeInvocation(t, "systemd ExecStart", exec[1:], envs)
	for _, hardening := range []string{"NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "CapabilityBoundingSet=\n", "KillSignal=SIGTERM"} {
		if !strings.Contains(string(raw), hardening) {
			t.Errorf("unit lacks %q", strings.TrimSpace(hardening))
		}
	}

	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	if err := parseSettings(fs, []string{"--config", deployDir + "systemd/serve.yaml"}); err != nil {
		t.Fatalf("deploy/systemd/serve.yaml: %v", err)
	}
	if f.replicas != 3 || !f.conn.urlGiven() || f.conn.user != "worker" || f.conn.inbox != "_INBOX_workers" {
		t.Errorf("serve.yaml: replicas %d, url %q, user %q, inbox %q", f.replicas, f.conn.url.value, f.conn.user, f.conn.inbox)
	}
}

// TestDeployDockerfileSettings: the image's TOOLSENTRY_* defaults are serve
// settings.
func TestDeployDockerfileSettings(t *testing.T) {
	raw, err := os.ReadFile(deployDir + "Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	known := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { known[envName(fl.Name)] = true })
	n := 0
	for _, word := range strings.Fields(string(raw)) {
		if name, _, ok := strings.Cut(word, "="); ok && strings.HasPrefix(name, "TOOLSENTRY_") {
			n++
			if !known[name] {
				t.Errorf("Dockerfile sets %s, which is no setting of serve", name)
			}
		}
	}
	if n == 0 {
		t.Error("Dockerfile sets no TOOLSENTRY_ variable: the check is void")
	}
}
