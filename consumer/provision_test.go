package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  consumer.Config
		ok   bool
	}{
		{"zero takes defaults", consumer.Config{}, true},
		{"custom prefix", consumer.Config{Prefix: "acme-prod"}, true},
		{"forever", consumer.Config{TelemetryMaxAge: -1, VerdictsMaxAge: -1, DLQMaxAge: -1}, true},
		{"upper-case prefix", consumer.Config{Prefix: "Toolsentry"}, false},
		{"dotted prefix", consumer.Config{Prefix: "a.b"}, false},
		{"six replicas", consumer.Config{Replicas: 6}, false},
		{"negative max deliver", consumer.Config{MaxDeliver: -1}, false},
		{"history 65", consumer.Config{KVHistory: 65}, false},
		{"durable with a dot", consumer.Config{Durable: "a.b"}, false},
		{"max age below duplicate window", consumer.Config{TelemetryMaxAge: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, consumer.ErrInvalidConfig)) {
				t.Errorf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestConfigNames(t *testing.T) {
	got := func(c consumer.Config) []string {
		return []string{
			c.TelemetryStream(), c.VerdictsStream(), c.DLQStream(), c.TelemetrySubjects(),
			c.BaselinesBucket(), c.UsageBucket(), c.QualityBucket(), c.WorkflowsBucket(), c.DirectivesBucket(),
			c.DeadLetterSubject("schema_invalid"), c.DeadLetterSubject("bad.reason"),
		}
	}
	want := []string{
		"TOOLSENTRY_TELEMETRY", "TOOLSENTRY_VERDICTS", "TOOLSENTRY_DLQ", "toolsentry.telemetry.>",
		"toolsentry-baselines", "toolsentry-usage", "toolsentry-quality", "toolsentry-workflows", "toolsentry-directives",
		"toolsentry.dlq.schema_invalid", "toolsentry.dlq.permanent",
	}
	if diff := cmp.Diff(want, got(consumer.Config{})); diff != "" {
		t.Errorf("default names (-want +got):\n%s", diff)
	}
	if got, want := (consumer.Config{Prefix: "acme-prod"}).TelemetryStream(), "ACME_PROD_TELEMETRY"; got != want {
		t.Errorf("stream of prefix acme-prod = %q, want %q", got, want)
	}
}

// TestConfigNamesAreEventsNames holds Config's names to events.Names, their
// one source, and a prefix that events.NewNames refuses to an invalid
// configuration that names no resource.
func TestConfigNamesAreEventsNames(t *testing.T) {
	for _, prefix := range []string{"", "toolsentry", "acme-prod", "a_b", strings.Repeat("x", 32)} {
		c := consumer.Config{Prefix: prefix}
		n, err := events.NewNames(c.Prefix)
		if prefix == "" {
			n, err = events.Names{}, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		got := []string{
			c.TelemetryStream(), c.VerdictsStream(), c.DLQStream(),
			c.TelemetrySubjects(), c.TelemetryPrefix() + ".>", c.VerdictsPrefix() + ".>", c.DLQPrefix() + ".>",
			c.BaselinesBucket(), c.UsageBucket(), c.QualityBucket(), c.OutcomesBucket(), c.WorkflowsBucket(), c.DirectivesBucket(),
			c.MembersBucket(), c.LeasesBucket(), c.DeadLetterSubject(string(events.ReasonSchemaInvalid)),
		}
		dlq, err := n.DeadLetter(events.ReasonSchemaInvalid)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			n.TelemetryStream(), n.VerdictsStream(), n.DeadLetterStream(),
			n.TelemetrySubjects(), n.TelemetrySubjects(), n.VerdictsSubjects(), n.DeadLetterSubjects(),
			n.BaselinesBucket(), n.UsageBucket(), n.QualityBucket(), n.OutcomesBucket(), n.WorkflowsBucket(), n.DirectivesBucket(),
			n.Prefix() + "-members", n.Prefix() + "-leases", dlq,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("prefix %q: Config's names (-events.Names +Config):\n%s", prefix, diff)
		}
	}
	for _, prefix := range []string{"Bad", "a.b", strings.Repeat("x", 33)} {
		c := consumer.Config{Prefix: prefix}
		if err := c.Validate(); !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Errorf("prefix %q: Validate = %v, want ErrInvalidConfig", prefix, err)
		}
		if _, err := events.NewNames(prefix); err == nil {
			t.Errorf("prefix %q: events.NewNames accepts it", prefix)
		}
		for _, name := range []string{c.TelemetryStream(), c.BaselinesBucket(), c.LeasesBucket(), c.DLQPrefix(), c.DeadLetterSubject("schema_invalid")} {
			if name != "" {
				t.Errorf("prefix %q: a name %q, want none", prefix, name)
			}
		}
	}
}

func TestProvisionIsIdempotentAndUpdates(t *testing.T) {
	_, url := natstest.RunServer(t)
	js := natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()

	cfg := consumer.Config{MaxDeliver: 7, KVHistory: 3}
	first, err := consumer.Provision(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Baselines.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	cfg.TelemetryMaxAge = 48 * time.Hour
	second, err := consumer.Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("second Provision: %v", err)
	}

	si, err := second.Telemetry.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.Config.MaxAge != 48*time.Hour || si.Config.Duplicates != consumer.DefaultDuplicates ||
		si.Config.Storage != jetstream.FileStorage || si.Config.Replicas != 1 {
		t.Errorf("telemetry stream config = max age %s, duplicates %s, storage %s, replicas %d",
			si.Config.MaxAge, si.Config.Duplicates, si.Config.Storage, si.Config.Replicas)
	}
	// Lanes keep no consumer on the server: their checkpoints are leases.
	if names := second.Telemetry.ListConsumers(ctx); names != nil {
		for info := range names.Info() {
			t.Errorf("consumer %s on the telemetry stream", info.Name)
		}
	}
	if st, err := second.Leases.Status(ctx); err != nil || st.History() != 1 || st.Bucket() != "toolsentry-leases" {
		t.Errorf("leases bucket: %v, %v", st, err)
	}
	for _, kv := range []jetstream.KeyValue{second.Baselines, second.Usage, second.Quality, second.Workflows, second.Directives} {
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.History() != 3 {
			t.Errorf("bucket %s history = %d, want 3", kv.Bucket(), st.History())
		}
	}
	if e, err := second.Baselines.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Errorf("value after re-provisioning = %v, %v; want v", e, err)
	}
	if _, err := consumer.Provision(ctx, js, consumer.Config{Prefix: "Bad"}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("Provision with a bad prefix = %v, want ErrInvalidConfig", err)
	}
}

func TestStartServerWithConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	store := filepath.Join(dir, "js")
	body := fmt.Sprintf("server_name: cfgfile\nlisten: 127.0.0.1:-1\njetstream {\n  store_dir: %q\n  max_mem: 64MB\n}\n", store)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := consumer.StartServer(testContext(t), consumer.ServerOptions{ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	if s.NATS().Name() != "cfgfile" || s.StoreDir() != store || s.Port() <= 0 {
		t.Errorf("server name %q, store %q, port %d; want the config file's", s.NATS().Name(), s.StoreDir(), s.Port())
	}
	js := natstest.JetStream(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(testContext(t), 5*time.Second)
	defer cancel()
	if _, err := consumer.Provision(ctx, js, consumer.Config{}); err != nil {
		t.Errorf("Provision on the config-file server: %v", err)
	}
	s.Shutdown()
	s.Shutdown() // idempotent

	if _, err := consumer.StartServer(testContext(t), consumer.ServerOptions{Port: -1}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("StartServer without a store dir = %v, want ErrInvalidConfig", err)
	}
	if _, err := consumer.StartServer(testContext(t), consumer.ServerOptions{ConfigFile: filepath.Join(dir, "missing.conf")}); err == nil {
		t.Error("StartServer with a missing config file succeeded")
	}
}
