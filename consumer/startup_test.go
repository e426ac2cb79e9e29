package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolsentry/toolsentry/consumer"
	"github.com/toolsentry/toolsentry/consumer/engine"
	"github.com/toolsentry/toolsentry/consumer/natstest"
)

// Workers started at the same moment as a new 3-node cluster, as a
// Kubernetes Deployment with several replicas does on its first install,
// all become ready: none waits for an answer the cluster never sends
// (two workers racing to create a stream left both unanswered until
// ProvisionTimeout), and each owns its share of the partitions.
func TestWorkersStartedTogetherWithANewCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-node JetStream clusters")
	}
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			c := natstest.StartCluster(t, 3)
			cfg := scaleConfig(3, 6)
			// Well below ProvisionTimeout: a worker that waits for a lost
			// answer fails here instead of after two minutes.
			ctx, cancel := context.WithTimeout(testContext(t), 45*time.Second)
			defer cancel()

			var wg sync.WaitGroup
			errs := make([]error, workers)
			took := make([]time.Duration, workers)
			svcs := make([]*consumer.Service, workers)
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("w%d", i+1)
					nc, err := nats.Connect(c.URLs(i), nats.Name(name), nats.MaxReconnects(-1),
						nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
					if err != nil {
						errs[i] = err
						return
					}
					t.Cleanup(nc.Close)
					start := time.Now()
					svcs[i], errs[i] = consumer.StartService(ctx, nc, consumer.ServiceOptions{Config: cfg, Engine: testOptions(), Member: name})
					took[i] = time.Since(start)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("worker w%d not ready after %s: %v", i+1, took[i].Round(time.Millisecond), err)
				}
				t.Logf("worker w%d ready after %s", i+1, took[i].Round(time.Millisecond))
			}

			ws := make([]*scaleWorker, workers)
			for i, svc := range svcs {
				ws[i] = &scaleWorker{name: fmt.Sprintf("w%d", i+1), svc: svc, done: make(chan error, 1)}
				go func() { ws[i].done <- svc.Run(ctx) }()
				t.Cleanup(func() { _ = svc.Close() })
			}
			natstest.Eventually(t, 30*time.Second, fmt.Sprintf("8 lanes spread over %d workers", workers), func() bool {
				return ownedOnce(ws, 8)
			})
			for _, w := range ws {
				if !w.svc.Ready() {
					t.Errorf("worker %s owns its lanes but is not ready", w.name)
				}
				select {
				case err := <-w.done:
					t.Fatalf("worker %s stopped: %v", w.name, err)
				default:
				}
			}
		})
	}
}

// Workers provisioning the same new resources on a cluster at the same
// moment are all answered the first time: Provision, which does not try
// again, succeeds for each. Asking for an update first (nats.go's
// CreateOrUpdateStream) left both requests of a create racing an update
// unanswered.
func TestConcurrentProvisionIsAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	c := natstest.RunCluster(t, 3)
	cfg := scaleConfig(3, 1)
	const workers = 3
	js := make([]jetstream.JetStream, workers)
	for i := range js {
		js[i] = natstest.JetStream(t, c.URL(i))
	}
	// Each request may take longer than its 5s bound on a loaded machine
	// (three nodes, the race detector, other packages' tests): a slow
	// answer is not what this test is about. A request that raced into the
	// old update-first hole was never answered at all.
	ctx, cancel := context.WithTimeout(testContext(t), 90*time.Second)
	defer cancel()
	ctx = engine.WithProvisionRequestTimeout(ctx, 25*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = consumer.Provision(ctx, js[i], cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i+1, err)
		}
	}
}
