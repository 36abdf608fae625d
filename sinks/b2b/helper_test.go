package b2b_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// testSecret is the signing secret of every test partner. Tests assert it
// never shows up in errors or logs.
const testSecret = "s3cr3t-SIGNING-key-never-logged"

// fakeClock is an injected clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Now().Truncate(time.Second)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one test database with the schema and a registry.
type env struct {
	pool  *pgxpool.Pool
	reg   *b2b.Registry
	clock *fakeClock
	n     atomic.Int64
}

func setup(t testing.TB) *env {
	t.Helper()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(context.Background(), dsn); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, reg: reg, clock: newClock()}
}

// encrypted returns a registry on the env's database that encrypts
// secrets at rest with a random key.
func (e *env) encrypted(t testing.TB) *b2b.Registry {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	reg, err := b2b.NewRegistry(e.pool, &b2b.RegistryConfig{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func (e *env) tenants(t testing.TB, ids ...string) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO fairway.tenants (id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, ids); err != nil {
		t.Fatalf("insert tenants: %v", err)
	}
}

// partnerName returns a partner name unique in the env.
func (e *env) partnerName() string { return fmt.Sprintf("p%d", e.n.Add(1)) }

// receiver starts a receiver on the env's clock.
func (e *env) receiver(t testing.TB) *b2btest.Receiver {
	return b2btest.New(t, b2btest.Options{Secret: []byte(testSecret), Clock: e.clock.Now, KeepRequests: true})
}

// partner registers p (defaults: the given tenant/url, test secret,
// enabled) and returns it.
func (e *env) partner(t testing.TB, p b2b.Partner) b2b.Partner {
	t.Helper()
	e.tenants(t, p.Tenant)
	if p.Secret == nil {
		p.Secret = b2b.Secret(testSecret)
	}
	p.Enabled = true
	out, err := e.reg.Add(context.Background(), p)
	if err != nil {
		t.Fatalf("Registry.Add(%s/%s): %v", p.Tenant, p.Name, err)
	}
	return out
}

// sink returns a sink for partner on the env's clock.
func (e *env) sink(t testing.TB, partner string, cfg b2b.Config) *b2b.Sink {
	t.Helper()
	cfg.Registry, cfg.Partner = e.reg, partner
	if cfg.Clock == nil {
		cfg.Clock = e.clock.Now
	}
	s, err := b2b.New(&cfg)
	if err != nil {
		t.Fatalf("b2b.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// simple registers partner for tenant "acme" at a fresh receiver and
// returns the sink and the receiver.
func (e *env) simple(t testing.TB, p b2b.Partner, cfg b2b.Config) (*b2b.Sink, *b2btest.Receiver) {
	t.Helper()
	rcv := e.receiver(t)
	p.Tenant, p.Name, p.URL = "acme", e.partnerName(), rcv.URL()
	e.partner(t, p)
	return e.sink(t, p.Name, cfg), rcv
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func one(id string, v int64) []sink.Record {
	return sinktest.Records(sinktest.Upsert("acme", id, v))
}

// mustApply fails on any error.
func mustApply(t testing.TB, s *b2b.Sink, batch []sink.Record) {
	t.Helper()
	errs, err := s.Apply(ctx(t), batch)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("Apply: record %d: %v", i, e)
		}
	}
}

// batchErr applies batch and returns its batch error, failing when there is
// none.
func batchErr(t testing.TB, s *b2b.Sink, batch []sink.Record) error {
	t.Helper()
	errs, err := s.Apply(ctx(t), batch)
	if err == nil {
		t.Fatalf("Apply = %v, nil; want a batch error", errs)
	}
	if errs != nil {
		t.Fatalf("Apply returned record errors %v with batch error %v", errs, err)
	}
	return err
}
