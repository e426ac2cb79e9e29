package agent_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestAgentImportsNoServer: an agent imports this package without the
// server's dependencies. go list -deps names every package its build
// compiles (tests excluded); none may be nats-server, OpenTelemetry or
// Prometheus.
func TestAgentImportsNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/toolsentry/toolsentry/publisher/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	forbidden := []string{
		"github.com/nats-io/nats-server/",
		"go.opentelemetry.io/",
		"github.com/prometheus/",
	}
	var found []string
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				found = append(found, d)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("the agent SDK pulls in the server's dependencies:\n  %s", strings.Join(found, "\n  "))
	}
	// The list is the real one: the client's own dependencies are in it.
	for _, want := range []string{"github.com/nats-io/nats.go/jetstream", "github.com/toolsentry/toolsentry/publisher"} {
		if !slices.Contains(deps, want) {
			t.Errorf("go list -deps does not name %s: %d packages listed", want, len(deps))
		}
	}
}
