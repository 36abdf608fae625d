package natsconf_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

// loadCluster parses cluster/n1..n3.conf, checks that they describe one
// cluster whose routes name every node's cluster port, and moves the cluster
// ports to free ones (rewriting the routes to match).
func loadCluster(t *testing.T) []*server.Options {
	t.Helper()
	var nodes []*server.Options
	names := map[string]bool{}
	for i := 1; i <= 3; i++ {
		o := loadConfig(t, fmt.Sprintf("cluster/n%d.conf", i))
		if o.Cluster.Name != "fairway" || o.ServerName == "" || names[o.ServerName] || !o.JetStream ||
			o.JetStreamMaxStore != 10<<30 || o.StoreDir == "" || o.SystemAccount != "SYS" {
			t.Fatalf("cluster/n%d.conf: cluster %q, server name %q (seen: %v), jetstream %v, max_file_store %d, store_dir %q, system account %q",
				i, o.Cluster.Name, o.ServerName, names[o.ServerName], o.JetStream, o.JetStreamMaxStore, o.StoreDir, o.SystemAccount)
		}
		names[o.ServerName] = true
		nodes = append(nodes, o)
	}

	// Free ports, held until all are picked so that they differ.
	ports := map[int]int{} // committed cluster port -> free port
	var lns []net.Listener
	for _, o := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		if _, dup := ports[o.Cluster.Port]; dup {
			t.Fatalf("two nodes use cluster port %d", o.Cluster.Port)
		}
		ports[o.Cluster.Port] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, ln := range lns {
		_ = ln.Close()
	}

	for _, o := range nodes {
		seen := map[int]bool{}
		var routes []*url.URL
		for _, r := range o.Routes {
			p, err := strconv.Atoi(r.Port())
			if err != nil {
				t.Fatalf("%s: route %s: %v", o.ServerName, r, err)
			}
			free, ok := ports[p]
			if !ok || r.Hostname() != o.Cluster.Host {
				t.Fatalf("%s: route %s is not the cluster port of a node on %s", o.ServerName, r, o.Cluster.Host)
			}
			seen[p] = true
			u := *r
			u.Host = net.JoinHostPort(r.Hostname(), strconv.Itoa(free))
			routes = append(routes, &u)
		}
		for p := range ports {
			if p != o.Cluster.Port && !seen[p] {
				t.Fatalf("%s: no route to cluster port %d", o.ServerName, p)
			}
		}
		o.Routes = routes
		o.Cluster.Port = ports[o.Cluster.Port]
	}
	return nodes
}

// waitForMetaLeader waits until the three servers agree on a JetStream meta
// leader and every one of them is current.
func waitForMetaLeader(t *testing.T, srvs []*server.Server) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "a JetStream meta leader", func() error {
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
			return fmt.Errorf("%d leaders, %d of %d current", leaders, current, len(srvs))
		}
		return nil
	})
}

func TestCluster(t *testing.T) {
	t.Parallel()
	nodes := loadCluster(t)
	srvs := make([]*server.Server, len(nodes))
	for i, o := range nodes {
		o.Port = -1
		o.HTTPPort = -1
		o.StoreDir = t.TempDir()
		o.NoLog, o.NoSigs = true, true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("new server %s: %v", o.ServerName, err)
		}
		s.Start()
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		srvs[i] = s
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("server %s not ready in 10s", s.Name())
		}
	}
	waitForMetaLeader(t, srvs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// ingest on n1 creates PRODUCTS with three replicas. Right after the
	// election the meta leader may not know every peer yet: retry.
	ingest := connect(t, srvs[0].ClientURL(), "ingest")
	var stream jetstream.Stream
	testenv.Eventually(t, 15*time.Second, "ingest: create PRODUCTS R3", func() error {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		var err error
		stream, err = events.EnsureStream(sctx, ingest.js, events.StreamConfig{Replicas: 3})
		return err
	})
	if ci := stream.CachedInfo().Cluster; ci == nil || len(ci.Replicas) != 2 || ci.Leader == "" {
		t.Fatalf("PRODUCTS is not R3: %+v", ci)
	}

	// publisher-acme on n2 publishes through the service import.
	// Right after the stream is created, the tenant account's service
	// import may not have reached n2 over the routes yet ("no response from
	// stream"): retry; the idempotency key makes a repeat a duplicate.
	pub := connect(t, srvs[1].ClientURL(), "publisher-acme")
	var seq uint64
	p, err := events.NewPublisher(pub.js, events.WithAckTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "publisher-acme: publish on n2", func() error {
		res := p.PublishOne(ctx, testEvent("acme", "sku-9", 4))
		if res.Err != nil || res.Seq == 0 {
			return fmt.Errorf("%+v", res)
		}
		seq = res.Seq
		return nil
	})
	pub.denyJSPublish("products.globex.upsert")
	pub.denyPublish("work.postgres.acme")
	pub.denyPublish("$JS.API.STREAM.CREATE.EVIL")

	// dispatcher on n3 reads it back by direct get. Any replica may answer
	// a direct get, and a follower may not have applied it yet: poll.
	disp := connect(t, srvs[2].ClientURL(), "dispatcher")
	products := disp.stream(ctx, events.StreamName)
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("dispatcher: direct get of seq %d", seq), func() error {
		m, err := products.GetLastMsgForSubject(ctx, stored("products.acme.upsert"))
		if err != nil || m.Sequence != seq || !strings.Contains(string(m.Data), `"sku-9"`) {
			return fmt.Errorf("%v %+v", err, m)
		}
		return nil
	})
	disp.denyPublish("products.acme.upsert")

	// The system account spans the cluster: every server answers.
	sys := connect(t, srvs[0].ClientURL(), "sys")
	if n := pingJSZ(t, sys, 3); n != 3 {
		t.Errorf("sys: %d JSZ answers, want 3", n)
	}
}
