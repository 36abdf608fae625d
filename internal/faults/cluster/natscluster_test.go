package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// clusterName is the JetStream cluster the three embedded nodes form.
const clusterName = "fairway-failover"

// natsCluster is three embedded nats-server nodes with JetStream on
// loopback. Each node keeps its name, client port, route port and store
// directory across restarts, so a restarted node is the same Raft peer and
// clients find it at the same URL.
type natsCluster struct {
	t     *testing.T
	mu    sync.Mutex
	nodes []*natsNode
}

type natsNode struct {
	name                  string
	clientPort, routePort int
	storeDir              string
	srv                   *server.Server // nil while stopped
}

// startCluster starts three nodes and waits until they elected a JetStream
// meta leader. Every node is shut down at cleanup.
func startCluster(t *testing.T) *natsCluster {
	t.Helper()
	ports := freePorts(t, 6)
	c := &natsCluster{t: t}
	for i := range 3 {
		c.nodes = append(c.nodes, &natsNode{
			name:       fmt.Sprintf("n%d", i+1),
			clientPort: ports[2*i],
			routePort:  ports[2*i+1],
			storeDir:   t.TempDir(),
		})
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	for i := range c.nodes {
		c.start(i)
	}
	c.waitMetaLeader(60 * time.Second)
	return c
}

// freePorts returns n distinct free loopback ports, never NATS' default
// 4222/6222 (a system NATS may own them).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var out []int
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserve a free port: %v", err)
		}
		lns = append(lns, ln)
		p := ln.Addr().(*net.TCPAddr).Port
		if p == 4222 || p == 6222 {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (c *natsCluster) options(n *natsNode) *server.Options {
	var routes []*url.URL
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", o.routePort)})
		}
	}
	return &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.clientPort,
		JetStream:  true,
		StoreDir:   n.storeDir,
		Cluster: server.ClusterOpts{
			Name: clusterName,
			Host: "127.0.0.1",
			Port: n.routePort,
		},
		Routes: routes,
		NoLog:  true,
		NoSigs: true,
	}
}

// start starts node i (again) on its ports and store.
func (c *natsCluster) start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.srv != nil {
		c.t.Fatalf("node %s is already running", n.name)
	}
	srv, err := server.NewServer(c.options(n))
	if err != nil {
		c.t.Fatalf("node %s: %v", n.name, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		c.t.Fatalf("node %s not ready for connections in 30s", n.name)
	}
	n.srv = srv
}

// stop shuts node i down (a clean shutdown, as a rolling restart or an
// orchestrator's stop would do). Stopping a stopped node does nothing.
func (c *natsCluster) stop(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// urls is every node's client URL, comma separated, as a service's
// NATS_URL lists a cluster.
func (c *natsCluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort))
	}
	return strings.Join(us, ",")
}

// index returns the index of the node named name, or -1.
func (c *natsCluster) index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

func (c *natsCluster) running() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*server.Server
	for _, n := range c.nodes {
		if n.srv != nil {
			out = append(out, n.srv)
		}
	}
	return out
}

// waitMetaLeader waits until the running nodes agree on one JetStream meta
// leader and each of them is current.
func (c *natsCluster) waitMetaLeader(within time.Duration) {
	c.t.Helper()
	testenv.Eventually(c.t, within, "a JetStream meta leader", func() error {
		srvs := c.running()
		leaders, current := 0, 0
		for _, s := range srvs {
			if s.JetStreamIsLeader() {
				leaders++
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders != 1 || current != len(srvs) {
			return fmt.Errorf("%d leaders, %d of %d nodes current", leaders, current, len(srvs))
		}
		return nil
	})
}

// streamHealth is what stream info says about a stream's replicas.
type streamHealth struct {
	leader  string
	current int // replicas (leader included) that are current
	lastSeq uint64
}

func getStreamHealth(ctx context.Context, js jetstream.JetStream, name string) (streamHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return streamHealth{}, err
	}
	info := s.CachedInfo()
	h := streamHealth{lastSeq: info.State.LastSeq}
	if info.Cluster == nil {
		return h, fmt.Errorf("stream %s has no cluster info", name)
	}
	h.leader = info.Cluster.Leader
	if h.leader != "" {
		h.current = 1
	}
	for _, r := range info.Cluster.Replicas {
		if r.Current && !r.Offline {
			h.current++
		}
	}
	return h, nil
}

// waitStreams waits until every named stream has a leader and want current
// replicas (leader included).
func waitStreams(ctx context.Context, t *testing.T, js jetstream.JetStream, want int, within time.Duration, names ...string) {
	t.Helper()
	testenv.Eventually(t, within, fmt.Sprintf("a leader and %d current replicas of %v", want, names), func() error {
		for _, name := range names {
			h, err := getStreamHealth(ctx, js, name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			if h.leader == "" || h.current < want {
				return fmt.Errorf("stream %s: %+v", name, h)
			}
		}
		return nil
	})
}
