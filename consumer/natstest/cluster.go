package natstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of embedded nats-servers on loopback,
// built as nats-server's own tests build one (createJetStreamClusterExplicit
// in server/jetstream_helpers_test.go): every server lists every route, has
// its own store directory in t.TempDir(), and the cluster is ready when a
// meta leader sees every peer and every server is current.
type Cluster struct {
	t       testing.TB
	Servers []*server.Server
	once    []sync.Once
}

// RunCluster starts an n-node JetStream cluster and waits until it is ready;
// every node is shut down when the test ends.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := StartCluster(t, n)
	c.WaitReady()
	return c
}

// StartCluster starts an n-node JetStream cluster and returns at once, as
// a deployment that starts its workers together with its NATS nodes does:
// the nodes may not accept connections yet, and no meta leader is elected.
// Every node is shut down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := freePorts(t, 2*n) // routes, then clients: known before a node listens
	routes := make([]string, n)
	for i, p := range ports[:n] {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	c := &Cluster{t: t, Servers: make([]*server.Server, n), once: make([]sync.Once, n)}
	for i := range n {
		opts := &server.Options{
			ServerName:            fmt.Sprintf("S-%d", i+1),
			Host:                  "127.0.0.1",
			Port:                  ports[n+i],
			MaxControlLine:        4096,
			DisableShortFirstPing: true,
			NoLog:                 true,
			NoSigs:                true,
			JetStream:             true,
			JetStreamMaxMemory:    256 << 20,
			JetStreamMaxStore:     2 << 30,
			StoreDir:              t.TempDir(),
			Cluster: server.ClusterOpts{
				Name: "toolsentry-test",
				Host: "127.0.0.1",
				Port: ports[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("creating cluster node %d: %v", i+1, err)
		}
		go s.Start()
		c.Servers[i] = s
		t.Cleanup(func() { c.Shutdown(i) })
	}
	return c
}

// WaitReady waits until every node accepts connections, a meta leader sees
// every peer and every node is current.
func (c *Cluster) WaitReady() {
	t, n := c.t, len(c.Servers)
	t.Helper()
	for i, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("cluster node %d not ready for connections", i+1)
		}
	}
	Eventually(t, 40*time.Second, "a JetStream meta leader that sees every peer, every node current", func() bool {
		var leader *server.Server
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				leader = s
			}
		}
		if leader == nil || len(leader.JetStreamClusterPeers()) != n {
			return false
		}
		for _, s := range c.Servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
		}
		return true
	})
}

// URL is the client URL of node i.
func (c *Cluster) URL(i int) string { return c.Servers[i].ClientURL() }

// URLs lists every node's client URL, node first first, comma-separated as
// nats.Connect takes them: a client connects to node first and fails over
// to the others.
func (c *Cluster) URLs(first int) string {
	urls := make([]string, 0, len(c.Servers))
	for i := range c.Servers {
		urls = append(urls, c.URL((first+i)%len(c.Servers)))
	}
	return strings.Join(urls, ",")
}

// Shutdown stops node i and waits until it has stopped, as a crash of that
// node would (its store stays on disk). It is idempotent.
func (c *Cluster) Shutdown(i int) {
	c.once[i].Do(func() {
		c.Servers[i].Shutdown()
		c.Servers[i].WaitForShutdown()
	})
}

// freePorts reserves n distinct loopback ports for the cluster routes.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserving a port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}
