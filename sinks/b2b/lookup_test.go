package b2b

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// A sink compiles a partner's transform when the transform changes, not
// each time it reads the partner again.
func TestLookupCompilesOncePerChange(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.NewPool(t)
	ctx := context.Background()
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(pool, &RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fairway.tenants (id) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, Partner{Tenant: "acme", Name: "erp", URL: "http://127.0.0.1:9/hook", Secret: GenerateSecret(), Enabled: true,
		Transform: Transform{Map: `{"id": event.product_id}`}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); now = now.Add(PartnerCacheTTLDefault + time.Second); mu.Unlock() }
	s, err := New(&Config{Registry: reg, Partner: "erp", Clock: clock, DeliveryLogKeep: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, first, err := s.lookup(ctx, "acme")
	if err != nil || first == nil {
		t.Fatalf("lookup = %v, %v; want a compiled transform", first, err)
	}
	advance()
	if _, again, err := s.lookup(ctx, "acme"); err != nil || again != first {
		t.Fatalf("lookup after the cache expired compiled again (%p, %p, %v); want the same transform", first, again, err)
	}
	if _, err := reg.SetTransform(ctx, "acme", "erp", Transform{Map: `{"sku": event.product_id}`}); err != nil {
		t.Fatal(err)
	}
	advance()
	if _, changed, err := s.lookup(ctx, "acme"); err != nil || changed == first || changed.src.Map != `{"sku": event.product_id}` {
		t.Fatalf("lookup after a change = %+v, %v; want the new transform compiled", changed, err)
	}
	if _, err := reg.SetTransform(ctx, "acme", "erp", Transform{}); err != nil {
		t.Fatal(err)
	}
	advance()
	if _, cleared, err := s.lookup(ctx, "acme"); err != nil || cleared != nil {
		t.Fatalf("lookup after clearing = %v, %v; want none", cleared, err)
	}
}
