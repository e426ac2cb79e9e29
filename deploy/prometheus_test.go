package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestPrometheusRulesCheck runs `promtool check rules` (Debian package
// prometheus) on deploy/prometheus/alerts.yaml: syntax, PromQL and
// templates, as Prometheus loads them.
func TestPrometheusRulesCheck(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus; .ci/run installs it): the rules' PromQL is not checked")
	}
	out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules prometheus/alerts.yaml: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules: %s", out)
	}
}

// TestAlertRulesCoverTheIssue: the rules alert on what an operator must
// hear about, each with a severity and a description.
func TestAlertRulesCoverTheIssue(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a severity label, a summary and a description", r.Alert)
			}
		}
	}
	for alert, needle := range map[string]string{
		"ToolsentryDriftOnUsedFields":   `verdict="drift_on_used_fields"`,
		"ToolsentryCompositionDegraded": `verdict="composition_degraded"`,
		"ToolsentryDeadLettersGrowing":  "toolsentry_dead_letters_total",
		"ToolsentryLagging":             "toolsentry_lag_events",
		"ToolsentryWorkerDown":          `up{job="toolsentry"} == 0`,
	} {
		if !strings.Contains(exprs[alert], needle) {
			t.Errorf("alert %s: expr %q, want it to query %s", alert, exprs[alert], needle)
		}
	}
}

// TestGrafanaDashboardShape: deploy/grafana/toolsentry.json is a dashboard
// Grafana imports: JSON with a uid, panels with Prometheus queries on the
// ${datasource} variable.
func TestGrafanaDashboardShape(t *testing.T) {
	raw, err := os.ReadFile("grafana/toolsentry.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/toolsentry.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: want the ${datasource} variable as its data source", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: an empty query", p.Title)
			}
			queries++
		}
	}
	if queries < 10 {
		t.Errorf("%d queries, want a dashboard of the metrics (at least 10)", queries)
	}
}
