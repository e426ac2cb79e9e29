package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// promSynthetic are series Prometheus makes itself for every target, not
// found in /metrics.
var promSynthetic = map[string]bool{"up": true}

// promTargetLabels are labels Prometheus adds to every scraped series.
var promTargetLabels = map[string]bool{"job": true, "instance": true, "le": true}

var (
	promMetricName = regexp.MustCompile(`\b(toolsentry_[a-z_]+|process_[a-z_]+|go_[a-z_]+|up)\b`)
	promSelector   = regexp.MustCompile(`\b([a-z_:][a-z0-9_:]*)\{([^}]*)\}`)
	promMatcher    = regexp.MustCompile(`([a-z_][a-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// dashboardQueries returns every PromQL query of the Grafana dashboard
// (panel targets and template variables) and the alert rules, named by
// where they are.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	queries := map[string]string{}
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "toolsentry.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/toolsentry.json: %v", err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					queries["grafana "+path+"."+k] = s
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(path+"["+strconv.Itoa(i)+"]", c)
			}
		}
	}
	walk("", dash)
	raw, err = os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	return queries
}

// TestDashboardsQueryServeMetrics starts serve, makes it store a drift on
// used fields, a degraded composition and a dead letter, so that their
// labelled series exist, scrapes /metrics, and checks that every metric the
// Grafana dashboard and the alert rules query is exported, and that every
// label value they select (verdict="drift_on_used_fields", ...) is one a
// series carries.
func TestDashboardsQueryServeMetrics(t *testing.T) {
	unsetServeEnv(t)
	r := startServeArgs(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	input := strings.Join([]string{
		observation("dash-o1", "user_id"),
		cloudEvent("dash-i1", events.TypeInvocation, `{"tool_id":"crm.lookup","agent_id":"billing-agent","arguments":{"user_id":"u-42"}}`),
		observation("dash-o2", "userId"),
		cloudEvent("dash-c1", events.TypeContract, `{"tool_id":"a","accuracy":0.95,"determinism":"DETERMINISTIC"}`),
		cloudEvent("dash-c2", events.TypeContract, `{"tool_id":"b","accuracy":0.95,"determinism":"DETERMINISTIC"}`),
		cloudEvent("dash-w1", events.TypeWorkflow, `{"composition_id":"etl","workflow_quality_requirement":0.95,"introduction_of_nondeterminism_acceptable":false,"policy":{"require_schema_compatibility":false},"structure":{"chain":["a","b"]}}`),
	}, "\n") + "\n"
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(input), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errOut lockedBuffer
	if err := run(ctx, []string{"emit", "--nats-url", r.natsURL, file}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errOut}); err != nil {
		t.Fatalf("emit: %v\n%s", err, errOut.String())
	}
	nc := natstest.Connect(t, r.natsURL)
	if err := nc.Publish("toolsentry.telemetry.invocation.crm=2Elookup", []byte("not a cloudevent")); err != nil {
		t.Fatal(err)
	}

	has := func(fams map[string]*dto.MetricFamily, name string, labels map[string]string) bool {
		for _, m := range fams[name].GetMetric() {
			got := labelsOf(m)
			ok := true
			for k, v := range labels {
				ok = ok && got[k] == v
			}
			if ok {
				return true
			}
		}
		return false
	}
	var fams map[string]*dto.MetricFamily
	natstest.Eventually(t, 30*time.Second, "a drift, a degraded composition and a dead letter in /metrics", func() bool {
		fams = scrape(t, r.httpAddr)
		return has(fams, "toolsentry_verdicts_total", map[string]string{"guard": "schema", "verdict": "drift_on_used_fields"}) &&
			has(fams, "toolsentry_verdicts_total", map[string]string{"guard": "composition", "verdict": "composition_degraded"}) &&
			has(fams, "toolsentry_dead_letters_total", nil)
	})

	family := func(name string) (*dto.MetricFamily, bool) {
		if f := fams[name]; f != nil {
			return f, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f := fams[strings.TrimSuffix(name, suffix)]; f != nil && strings.HasSuffix(name, suffix) &&
				(f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) {
				return f, true
			}
		}
		return nil, false
	}
	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("%d queries found in the dashboard and rules", len(queries))
	}
	seen := map[string]bool{}
	for where, q := range queries {
		for _, name := range promMetricName.FindAllString(q, -1) {
			seen[name] = true
			if _, ok := family(name); !ok && !promSynthetic[name] {
				t.Errorf("%s queries %s, which serve's /metrics does not export: %s", where, name, q)
			}
		}
		for _, sel := range promSelector.FindAllStringSubmatch(q, -1) {
			name := sel[1]
			f, ok := family(name)
			if !ok {
				continue // reported above, or Prometheus's own
			}
			for _, m := range promMatcher.FindAllStringSubmatch(sel[2], -1) {
				label, op, value := m[1], m[2], m[3]
				if promTargetLabels[label] {
					continue
				}
				values := map[string]bool{}
				for _, s := range f.GetMetric() {
					if v, ok := labelsOf(s)[label]; ok {
						values[v] = true
					}
				}
				switch {
				case len(values) == 0:
					t.Errorf("%s selects %s{%s}: %s has no label %s", where, name, sel[2], name, label)
				case op == "=" && !values[value]:
					t.Errorf("%s selects %s %s=%q: no series has it (values: %v)", where, name, label, value, sortedKeys(values))
				}
			}
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("the dashboard and rules query %d metrics: %s", len(names), strings.Join(names, ", "))
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
