package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsentry/toolsentry/consumer/natstest"
	"github.com/toolsentry/toolsentry/events"
)

// Chaos tests: a `toolsentry serve --nats-url` worker process consumes a
// steady stream of schema observations (50 tools, one verdict per
// observation) while it is SIGKILLed, while the server restarts, or while the
// network to the server is cut. Each ends with checkChaosVerdicts: every
// input has exactly one verdict, none lost, none doubled, in input order per
// tool, and the verdicts are those of a fault-free replay.

const (
	chaosTools    = 50
	chaosInterval = 150 * time.Millisecond // between the starts of two rounds
	// chaosWantInFlight is how many unacknowledged inputs a chaos step waits
	// for before it strikes: a worker's full pull batch (--workers 8).
	chaosWantInFlight = 8
)

func chaosNames(t *testing.T) events.Names {
	t.Helper()
	n, err := events.NewNames("toolsentry")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func chaosSkipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos test: runs worker processes for several seconds")
	}
}

func TestChaosWorkerKilledTwice(t *testing.T) {
	chaosSkipShort(t)
	_, url := natstest.RunServer(t)
	names := chaosNames(t)
	js := natstest.JetStream(t, url)
	const roundsN = 14
	rounds := chaosInputs(t, names, roundsN, chaosTools) // 700 inputs

	w := startChaosWorker(t, "A", url)
	workers := []*chaosWorker{w}
	gates := map[int]chan struct{}{6: make(chan struct{}), 11: make(chan struct{})}
	pub := startChaosPublisher(t, js, rounds, chaosInterval, gates)

	heldAtKill := 0
	for _, step := range []struct {
		round, gate int
		next        string
	}{{3, 6, "B"}, {8, 11, "C"}} {
		// Kill in the middle of a round, while the worker holds inputs
		// it has not acknowledged; the stream goes on meanwhile.
		pub.waitStarted(t, step.round)
		held := waitInFlight(t, js, chaosWantInFlight)
		if !w.running() {
			t.Fatalf("worker %s exited on its own: %v\n%s", w.name, w.err, w.log.tail(40))
		}
		w.kill(t)
		if ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("worker %s ended with %v, not by SIGKILL", w.name, w.err)
		}
		t.Logf("SIGKILLed worker %s in round %d while %d inputs were unacknowledged", w.name, step.round, held)
		heldAtKill += held

		from := chaosCount(js, "TOOLSENTRY_VERDICTS")
		w = startChaosWorker(t, step.next, url)
		workers = append(workers, w)
		waitProgress(t, js, from, "after restarting the killed worker", w)
		close(gates[step.gate])
	}
	pub.wait(t)
	waitSettled(t, js, roundsN*chaosTools, workers...)
	checkChaosVerdicts(t, js, names, rounds, workers...)
	if heldAtKill == 0 {
		t.Error("no kill hit a worker holding unacknowledged inputs: no redelivery was exercised")
	}
	w.stop(t)
}

// TestChaosWorkerPausedPastItsLease: worker A is paused (SIGSTOP) while it
// holds inputs it has not committed, for longer than its lease; B takes
// every lane over; then A resumes. A never commits after its successor:
// every lease's epoch only grows in the order its entries were written (an
// old holder's commit would write its old epoch after the new one), and
// every input still has exactly one verdict.
func TestChaosWorkerPausedPastItsLease(t *testing.T) {
	chaosSkipShort(t)
	_, url := natstest.RunServer(t)
	names := chaosNames(t)
	js := natstest.JetStream(t, url)
	const roundsN = 10
	rounds := chaosInputs(t, names, roundsN, chaosTools) // 500 inputs

	a := startChaosWorker(t, "A", url)
	leases := watchLeases(t, js)
	gates := map[int]chan struct{}{6: make(chan struct{})}
	pub := startChaosPublisher(t, js, rounds, chaosInterval, gates)
	pub.waitStarted(t, 3)
	held := waitInFlight(t, js, chaosWantInFlight)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	t.Logf("SIGSTOPped worker A while %d inputs were not committed", held)

	from := chaosCount(js, "TOOLSENTRY_VERDICTS")
	b := startChaosWorker(t, "B", url)
	chaosEventually(t, 30*time.Second, func() string {
		return "B did not take every lane over: " + describeLanes(chaosStatus(js))
	}, func() bool {
		st := chaosStatus(js)
		if st == nil {
			return false
		}
		for _, l := range st.Lanes {
			if l.Owner != chaosMember("B") {
				return false
			}
		}
		return true
	})
	t.Logf("B holds every lane %s after A was paused", time.Since(paused).Round(10*time.Millisecond))
	waitProgress(t, js, from, "after B took over", b)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed worker A %s after it was paused", time.Since(paused).Round(10*time.Millisecond))
	close(gates[6])
	pub.wait(t)
	waitSettled(t, js, roundsN*chaosTools, a, b)
	checkChaosVerdicts(t, js, names, rounds, a, b)
	for lane, entries := range leases.get() {
		for i := 1; i < len(entries); i++ {
			if entries[i].epoch < entries[i-1].epoch {
				t.Errorf("lane %s: %s wrote epoch %d after %s wrote epoch %d: a holder committed after its successor",
					lane, entries[i].owner, entries[i].epoch, entries[i-1].owner, entries[i-1].epoch)
			}
		}
		if !slices.ContainsFunc(entries, func(e leaseEntry) bool { return e.owner == chaosMember("B") }) {
			t.Errorf("lane %s: B never held it: %+v", lane, entries)
		}
	}
	if !strings.Contains(a.log.String(), "taken over") {
		t.Errorf("worker A did not report that its leases were taken over:\n%s", a.log.tail(40))
	}
	a.stop(t)
	b.stop(t)
}

// TestChaosServerRestartMidStream restarts the NATS server on the same
// store directory three times while the worker holds unacknowledged
// inputs. The restarted server redelivers late, and sometimes as new, what
// it had delivered before; two holes let a key run ahead of such a message
// before: a worker that owned a key when a hold began kept running it, and
// a recovery that had not seen every message come back within 2 × AckWait
// let every key go on. Neither remains (TestRecoveryNarrowsToTheKeysItWaitsFor).
func TestChaosServerRestartMidStream(t *testing.T) {
	chaosSkipShort(t)
	srv, url := natstest.RunServer(t)
	names := chaosNames(t)
	js := natstest.JetStream(t, url) // reconnects, and the publisher retries
	const roundsN = 14
	rounds := chaosInputs(t, names, roundsN, chaosTools) // 700 inputs

	w := startChaosWorker(t, "A", url)
	gates := map[int]chan struct{}{5: make(chan struct{}), 9: make(chan struct{}), 13: make(chan struct{})}
	pub := startChaosPublisher(t, js, rounds, chaosInterval, gates)

	heldAtRestart := 0
	for i, step := range []struct{ round, gate int }{{3, 5}, {7, 9}, {11, 13}} {
		pub.waitStarted(t, step.round)
		held := waitInFlight(t, js, chaosWantInFlight)
		heldAtRestart += held
		srv, _ = natstest.Restart(t, srv) // same port, same store directory
		t.Logf("restarted the server in round %d while %d inputs were unacknowledged", step.round, held)
		// The worker reconnects by itself (serve's --nats-url mode retries
		// forever) and goes on consuming; it must not exit.
		chaosEventually(t, 30*time.Second, func() string {
			return fmt.Sprintf("worker did not reconnect after the server restart (running %t):\n%s", w.running(), w.log.tail(40))
		}, func() bool {
			return strings.Count(w.log.String(), "reconnected to NATS") > i && w.running()
		})
		close(gates[step.gate])
	}
	pub.wait(t)
	waitSettled(t, js, roundsN*chaosTools, w)
	checkChaosVerdicts(t, js, names, rounds, w)
	if heldAtRestart == 0 {
		t.Error("no restart hit the worker holding unacknowledged inputs: no redelivery was exercised")
	}
	w.stop(t)
}

func TestChaosNetworkCutAndRestored(t *testing.T) {
	chaosSkipShort(t)
	srv, url := natstest.RunServer(t)
	names := chaosNames(t)
	js := natstest.JetStream(t, url) // the agents' side is not cut
	proxy := startChaosProxy(t, srv.NATS().Addr().String())
	const roundsN = 14
	rounds := chaosInputs(t, names, roundsN, chaosTools) // 700 inputs

	w := startChaosWorker(t, "A", proxy.URL())
	gates := map[int]chan struct{}{6: make(chan struct{}), 12: make(chan struct{})}
	pub := startChaosPublisher(t, js, rounds, chaosInterval, gates)

	heldAtCut := 0
	for i, step := range []struct {
		round, gate int
		blackhole   bool
	}{{3, 6, false}, {9, 12, true}} {
		pub.waitStarted(t, step.round)
		held := waitInFlight(t, js, chaosWantInFlight)
		heldAtCut += held
		before := proxy.Forwarded()
		proxy.Cut(step.blackhole)
		// Longer than the ack wait: the server considers what the worker
		// held as lost and redelivers it once the worker is back.
		time.Sleep(chaosLeaseTTL + time.Second) // the length of the outage: past the lease
		proxy.Restore()
		t.Logf("cut the network (blackhole %t) in round %d for %s while %d inputs were not committed", step.blackhole, step.round, chaosLeaseTTL+time.Second, held)
		chaosEventually(t, 30*time.Second, func() string {
			return "worker did not reconnect through the restored network:\n" + w.log.tail(40)
		}, func() bool {
			return proxy.Forwarded() > before && strings.Count(w.log.String(), "reconnected to NATS") > i
		})
		if !w.running() {
			t.Fatalf("worker exited after the network cut: %v\n%s", w.err, w.log.tail(40))
		}
		close(gates[step.gate])
	}
	pub.wait(t)
	waitSettled(t, js, roundsN*chaosTools, w)
	checkChaosVerdicts(t, js, names, rounds, w)
	if heldAtCut == 0 {
		t.Error("no cut hit the worker holding unacknowledged inputs: no redelivery was exercised")
	}
	if n := strings.Count(w.log.String(), "disconnected from NATS"); n < 2 {
		t.Errorf("the worker noticed %d disconnections, want 2: the cuts did not cut", n)
	}
	w.stop(t)
}
