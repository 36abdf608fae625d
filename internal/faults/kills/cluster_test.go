package kills_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// The topology and its settings.
const (
	tenantCount = 20
	maxSlots    = 2 // per (tenant, destination): small, so limits matter
	partner     = "erp"
	// leaseTTL is short so that a killed holder's slot and batch come back
	// within seconds; extendEvery keeps working items' leases well inside it.
	leaseTTL    = 5 * time.Second
	extendEvery = time.Second
	ackWait     = 5 * time.Second
	batchSize   = 50
	// dispatchers split the stream's partitions, heartbeating every
	// heartbeat: a killed one's partitions are taken over within 3.
	dispatchers = 3
	heartbeat   = time.Second
	// startTimeout bounds one process start (migrations, connections):
	// generous, the machine may be busy.
	startTimeout = 3 * time.Minute
)

var dests = []string{"postgres", "clickhouse", "b2b:" + partner}

// cluster is everything one test run owns.
type cluster struct {
	t        *testing.T
	dsn      string
	pool     *pgxpool.Pool
	natsURL  string
	js       jetstream.JetStream
	chAddr   string
	chDB     string
	chConn   driver.Conn
	receiver *b2btest.Receiver
	tokens   map[string]string // tenant → API token
	tenants  []string

	ingest      *proc
	dispatchers []*proc
	sinks       []*proc
	ingestURL   string
}

func (c *cluster) procs() []*proc {
	return append(append([]*proc{c.ingest}, c.dispatchers...), c.sinks...)
}

// startCluster builds the binaries, prepares the servers, tenants and
// partners, and starts 1 ingest, 3 dispatchers and 2 sinks per destination.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := testenv.BuildServices(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	c := &cluster{t: t, tokens: map[string]string{}}
	c.dsn = testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, c.dsn); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var err error
	c.pool, err = pgxpool.New(ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)
	srv, nc := testenv.NATS(t)
	c.natsURL = srv.ClientURL()
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	c.chAddr, c.chDB = testenv.NewClickHouseDatabase(t)
	c.chConn, err = ch.Open(&ch.Options{Addr: []string{c.chAddr}, Auth: ch.Auth{Database: c.chDB},
		DialTimeout: 10 * time.Second, ReadTimeout: time.Minute})
	if err != nil {
		t.Fatalf("ClickHouse at %s: %v", c.chAddr, err)
	}
	t.Cleanup(func() { _ = c.chConn.Close() })

	// The partner: a real HTTP receiver that verifies signatures.
	secret := randomBytes(t, 32)
	c.receiver = b2btest.New(t, b2btest.Options{Secret: secret, KeepRequests: true})
	key := randomBytes(t, 32)
	store, err := tenancy.New(c.pool, &tenancy.Config{LeaseTTL: leaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := b2b.NewRegistry(c.pool, &b2b.RegistryConfig{SecretKey: key, AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tenantCount {
		id := fmt.Sprintf("t%02d", i)
		_, tok, err := store.CreateTenant(ctx, id, "chaos tenant "+id)
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[id] = tok
		c.tenants = append(c.tenants, id)
		for _, d := range dests {
			if err := store.SetLimit(ctx, id, d, maxSlots); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reg.Add(ctx, b2b.Partner{Tenant: id, Name: partner, URL: c.receiver.URL(), Secret: secret, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}

	logs := t.TempDir()
	common := []string{"--nats-url", c.natsURL, "--database-url", c.dsn, "--listen", "127.0.0.1:0", "--log-format", "json"}
	c.ingest = newProc(logs, "ingest", filepath.Join(bin, "ingest"), nil, func(int) []string {
		return append(append([]string(nil), common...), "--node", "chaos-ingest", "--spool-dir", filepath.Join(logs, "spool"))
	})
	for i := range dispatchers {
		name := fmt.Sprintf("dispatcher-%d", i+1)
		c.dispatchers = append(c.dispatchers, newProc(logs, name, filepath.Join(bin, "dispatcher"), nil, func(inc int) []string {
			return append(append([]string(nil), common...),
				"--holder", name+"-"+strconv.Itoa(inc),
				"--dest", "postgres,clickhouse", // + b2b:erp from each tenant's partners
				"--lease-ttl", leaseTTL.String(),
				"--batch-size", strconv.Itoa(batchSize),
				"--recover-interval", "1s",
				"--heartbeat", heartbeat.String(),
				"--poll-interval", "10s")
		}))
	}
	sinkEnv := []string{b2b.SecretKeyEnv + "=" + hex.EncodeToString(key)}
	for _, d := range dests {
		for i := range 2 {
			name := fmt.Sprintf("sinks-%s-%d", sanitize(d), i+1)
			c.sinks = append(c.sinks, newProc(logs, name, filepath.Join(bin, "sinks"), sinkEnv, func(int) []string {
				return append(append([]string(nil), common...),
					"--dest", d,
					"--clickhouse-addr", c.chAddr, "--clickhouse-database", c.chDB,
					"--allow-insecure-http",
					"--ack-wait", ackWait.String(),
					"--extend-every", extendEvery.String(),
					"--backoff-initial", "100ms", "--backoff-max", "2s")
			}))
		}
	}
	t.Cleanup(func() {
		for _, p := range c.procs() {
			p.kill()
		}
		if t.Failed() {
			for _, p := range c.procs() {
				t.Logf("--- last lines of %s (%d incarnations)\n%s", p.name, p.starts, p.tail(25))
			}
		}
	})
	// First one of each kind (the sinks create their tables), then the rest.
	first := []*proc{c.ingest, c.dispatchers[0], c.sinks[0], c.sinks[2], c.sinks[4]}
	rest := append(c.dispatchers[1:], c.sinks[1], c.sinks[3], c.sinks[5])
	c.startAll(first)
	c.startAll(rest)
	addr, err := c.ingest.waitListening(startTimeout)
	if err != nil {
		t.Fatal(err)
	}
	c.ingestURL = "http://" + addr
	return c
}

// startAll starts ps at once and waits until each serves HTTP.
func (c *cluster) startAll(ps []*proc) {
	c.t.Helper()
	for _, p := range ps {
		if err := p.start(); err != nil {
			c.t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ps))
	for i, p := range ps {
		wg.Go(func() { _, errs[i] = p.waitListening(startTimeout) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// sanitize makes a destination usable in a file name.
func sanitize(d string) string {
	out := []byte(d)
	for i, b := range out {
		if b == ':' {
			out[i] = '-'
		}
	}
	return string(out)
}
