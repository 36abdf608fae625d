// Package pipelinetest stands up the whole pipeline (internal/pipeline:
// ingest, the dispatcher and a sink runner per destination, as `fairway
// demo` runs it) for a test or a benchmark, on the real servers of
// internal/testenv: a fresh PostgreSQL database, a fresh ClickHouse
// database and an embedded JetStream server, unless the test brings its
// own, and a b2btest receiver per partner. It stops at the test's cleanup,
// before those servers, and fails the test when a component returned an
// error.
//
// It is the tests' one way to run the pipeline in-process; what differs
// between them (the dispatcher's and the runners' settings, a proxy in
// front of ClickHouse, a backlog published before the dispatcher starts, a
// wrapper that records what the sinks applied) are options.
package pipelinetest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/fairwayhq/fairway/internal/pipeline"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// PartnerSecret signs the webhooks to every partner's receiver.
var PartnerSecret = b2b.Secret("pipelinetest-partner-secret-0123")

// startTimeout bounds Start: the databases, the streams, every component.
const startTimeout = 2 * time.Minute

// Config says what to stand up.
type Config struct {
	// Pipeline configures the pipeline (pipeline.Config). Its DSN,
	// NATSURL, the ClickHouse sink's address and database and its
	// partners are filled in here; AllowInsecureHTTP is set, for the
	// receivers.
	Pipeline pipeline.Config
	// DSN is the PostgreSQL database. Default: a fresh one
	// (testenv.NewDatabase).
	DSN string
	// NATSURL is where the NATS servers are. Default: an embedded
	// JetStream server (testenv.NATS; Pipeline.NATSServer).
	NATSURL string
	// ClickHouseVia, when set, gets the ClickHouse server's address and
	// returns the one the clickhouse sink dials: a proxy in front of it.
	ClickHouseVia func(addr string) string
	// Partners are registered, each with a receiver of its own
	// (Pipeline.Receivers).
	Partners []Partner
	// BeforeRun, when set, runs once the streams, tenants, partners and
	// sinks exist, before the dispatcher and the runners start
	// (pipeline.Config.BeforeRun).
	BeforeRun func(*Pipeline)
}

// Partner is a B2B partner with a receiver of its own.
type Partner struct {
	// Name is the partner's name: destination b2b:<name>.
	Name string
	// Tenants registered it. Default: every tenant.
	Tenants []string
	// Reject picks the events the receiver answers 422.
	Reject func(b2b.BodyEvent) bool
}

// Pipeline is a pipeline running for a test.
type Pipeline struct {
	*pipeline.Pipeline
	// DSN is the PostgreSQL database's URL.
	DSN string
	// NATSServer is the embedded server; nil when Config.NATSURL was given.
	NATSServer *server.Server
	// ClickHouseAddr and ClickHouseDatabase locate the ClickHouse
	// database (the server, never a proxy); ClickHouse is a connection to
	// it, for the checks. Empty when no clickhouse sink runs.
	ClickHouseAddr, ClickHouseDatabase string
	ClickHouse                         ch.Conn
	// Receivers are the partners' receivers, by partner name.
	Receivers map[string]*b2btest.Receiver
	// Publisher stores events in PRODUCTS on the operator's connection.
	Publisher *events.Publisher

	t testing.TB
}

// Start stands the pipeline up; it stops at t's cleanup, and t fails when
// a component returned an error.
func Start(t testing.TB, cfg Config) *Pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p := &Pipeline{t: t, DSN: cfg.DSN, Receivers: map[string]*b2btest.Receiver{}}
	pc := cfg.Pipeline
	if p.DSN == "" {
		p.DSN = testenv.NewDatabase(t)
	}
	pc.DSN = p.DSN
	pc.NATSURL = cfg.NATSURL
	if pc.NATSURL == "" {
		p.NATSServer, _ = testenv.NATS(t)
		pc.NATSURL = p.NATSServer.ClientURL()
	}
	if pc.Dests == nil || slices.Contains(pc.Dests, tenancy.DestClickHouse) {
		p.ClickHouseAddr, p.ClickHouseDatabase = testenv.NewClickHouseDatabase(t)
		conn, err := ch.Open(&ch.Options{Addr: []string{p.ClickHouseAddr}, Auth: ch.Auth{Database: p.ClickHouseDatabase},
			DialTimeout: 10 * time.Second, ReadTimeout: time.Minute})
		if err != nil {
			t.Fatalf("ClickHouse at %s: %v", p.ClickHouseAddr, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		p.ClickHouse = conn
		pc.Sinks.ClickHouse.Addr, pc.Sinks.ClickHouse.Database = p.ClickHouseAddr, p.ClickHouseDatabase
		if cfg.ClickHouseVia != nil {
			pc.Sinks.ClickHouse.Addr = cfg.ClickHouseVia(p.ClickHouseAddr)
		}
	}
	pc.Sinks.B2B.AllowInsecureHTTP = true
	for _, pa := range cfg.Partners {
		r := b2btest.New(t, b2btest.Options{Secret: PartnerSecret, Reject: pa.Reject})
		p.Receivers[pa.Name] = r
		pc.Partners = append(pc.Partners, pipeline.Partner{Name: pa.Name, URL: r.URL(), Secret: PartnerSecret, Tenants: pa.Tenants})
	}
	beforeRun := pc.BeforeRun
	pc.BeforeRun = func(ctx context.Context, ip *pipeline.Pipeline) error {
		if err := p.attach(ip); err != nil {
			return err
		}
		if beforeRun != nil {
			if err := beforeRun(ctx, ip); err != nil {
				return err
			}
		}
		if cfg.BeforeRun != nil {
			cfg.BeforeRun(p)
		}
		return nil
	}

	ip, err := pipeline.Start(ctx, pc)
	if err != nil {
		t.Fatalf("start the pipeline: %v", err)
	}
	// Registered after the servers' cleanups, so it runs before them: the
	// pipeline stops before the servers it uses.
	t.Cleanup(func() {
		if err := ip.Close(context.Background()); err != nil {
			t.Errorf("pipeline: %v", err)
		}
	})
	return p
}

// attach makes p the test's view of ip.
func (p *Pipeline) attach(ip *pipeline.Pipeline) error {
	if p.Pipeline != nil {
		return nil
	}
	pub, err := events.NewPublisher(ip.JS)
	if err != nil {
		return err
	}
	p.Pipeline, p.Publisher = ip, pub
	return nil
}

// IngestURL serves the ingest API (Config.Pipeline.Ingest) on a loopback
// port until the pipeline stops and returns its base URL.
func (p *Pipeline) IngestURL() string {
	p.t.Helper()
	if p.Ingest == nil {
		p.t.Fatal("pipelinetest: IngestURL of a pipeline without ingest (set Config.Pipeline.Ingest)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	p.Serve(ln, p.Ingest.Handler())
	return "http://" + ln.Addr().String()
}

// Quiet says why the pipeline is not at rest, nil when it is: a work item
// waiting or out for a destination, or a slot of a tenant held.
func (p *Pipeline) Quiet(ctx context.Context) error {
	for _, d := range p.Dests {
		name := work.ConsumerName(d)
		c, err := p.JS.Consumer(ctx, work.StreamName, name)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		if n := info.NumPending + uint64(info.NumAckPending); n > 0 {
			return fmt.Errorf("%s has %d work items pending", name, n)
		}
	}
	ps, err := p.Store.PairStatuses(ctx, "")
	if err != nil {
		return err
	}
	for _, s := range ps {
		if s.InUse+s.ReplayInUse > 0 {
			return fmt.Errorf("%s/%s holds %d slots and %d of its replay's", s.Tenant, s.Dest, s.InUse, s.ReplayInUse)
		}
		if s.Replaying() {
			return fmt.Errorf("%s/%s is still replaying", s.Tenant, s.Dest)
		}
	}
	return nil
}
