package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// reader reads <schema>.products back for the conformance suite.
type reader struct {
	pool   *pgxpool.Pool
	schema string
}

func (r reader) Get(ctx context.Context, tenant, productID string) (sinktest.State, bool, error) {
	var st sinktest.State
	var payload []byte
	err := r.pool.QueryRow(ctx,
		"SELECT version, deleted, payload FROM "+pgx.Identifier{r.schema, "products"}.Sanitize()+" WHERE tenant_id = $1 AND product_id = $2",
		tenant, productID).Scan(&st.Version, &st.Deleted, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	st.Payload = payload
	return st, err == nil, err
}

func (r reader) CountEvents(ctx context.Context, tenant string) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{r.schema, "products"}.Sanitize()+" WHERE tenant_id = $1", tenant).Scan(&n)
	return n, err
}

func setup(t testing.TB, method string) (*postgres.Sink, reader) {
	t.Helper()
	pool, _ := testenv.NewPool(t)
	s, err := postgres.New(context.Background(), &postgres.Config{Pool: pool, Method: method})
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s, reader{pool: pool, schema: postgres.SchemaDefault}
}

// poison is an upsert whose payload is valid JSON that jsonb refuses (a
// \u0000 escape): only PostgreSQL can reject it, so the suite exercises the
// bisection, not the sink's own validation.
func poison(tenant string) events.Event {
	e := sinktest.Upsert(tenant, "poison", 1)
	e.Payload = json.RawMessage(`{"name":"nul \u0000 inside"}`)
	return e
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, method := range []string{postgres.MethodUnnest, postgres.MethodCopy} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			sinktest.Run(t, sinktest.Harness{
				New: func(t *testing.T) (sink.Sink, sinktest.Reader) {
					s, r := setup(t, method)
					return s, r
				},
				Poison: poison,
			})
		})
	}
}

func TestPermanentRecordErrors(t *testing.T) {
	t.Parallel()
	for _, method := range []string{postgres.MethodUnnest, postgres.MethodCopy} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			s, r := setup(t, method)
			nulID := sinktest.Upsert("acme", "nul\x00id", 1)
			badUTF8 := sinktest.Upsert("acme", "bad\xffid", 1)
			notJSON := sinktest.Upsert("acme", "notjson", 1)
			notJSON.Payload = json.RawMessage(`{"a":`)
			noPayload := sinktest.Upsert("acme", "nopayload", 1)
			noPayload.Payload = nil
			badOp := sinktest.Upsert("acme", "badop", 1)
			badOp.Op = "merge"
			batch := sinktest.Records(
				sinktest.Upsert("acme", "a", 1), nulID, sinktest.Upsert("acme", "b", 1), badUTF8,
				notJSON, noPayload, badOp, sinktest.Upsert("acme", "c", 1), poison("acme"),
			)
			wantPermanent := map[int]string{1: "22021", 3: "22021", 4: "22P02", 5: "", 6: "", 8: "22P05"}
			errs, err := s.Apply(t.Context(), batch)
			if err != nil {
				t.Fatalf("Apply: batch error %v", err)
			}
			for i, e := range errs {
				code, bad := wantPermanent[i]
				if !bad {
					if e != nil {
						t.Errorf("record %d: %v, want applied", i, e)
					}
					continue
				}
				if !sink.IsPermanent(e) {
					t.Errorf("record %d: error %v, want permanent", i, e)
					continue
				}
				var pgErr *pgconn.PgError
				switch {
				case code == "" && !errors.Is(e, sink.ErrInvalidRecord):
					t.Errorf("record %d: %v, want sink.ErrInvalidRecord", i, e)
				case code != "" && (!errors.As(e, &pgErr) || pgErr.Code != code):
					t.Errorf("record %d: %v, want SQLSTATE %s", i, e, code)
				}
			}
			for _, id := range []string{"a", "b", "c"} {
				if _, ok, err := r.Get(t.Context(), "acme", id); err != nil || !ok {
					t.Errorf("Get(%s) = %v, %v; want the good record applied", id, ok, err)
				}
			}
			if n, err := r.CountEvents(t.Context(), "acme"); err != nil || n != 3 {
				t.Errorf("CountEvents = %d, %v; want 3", n, err)
			}
		})
	}
}

// A failure that is not caused by the data (here: the table is gone) is the
// batch error, with the PgError reachable, and nothing is reported applied.
func TestBatchErrorIsNotPermanent(t *testing.T) {
	t.Parallel()
	for _, method := range []string{postgres.MethodUnnest, postgres.MethodCopy} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			s, r := setup(t, method)
			if _, err := r.pool.Exec(t.Context(), "DROP TABLE catalog.products"); err != nil {
				t.Fatal(err)
			}
			errs, err := s.Apply(t.Context(), sinktest.Records(sinktest.Upsert("acme", "a", 1), poison("acme")))
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
				t.Fatalf("Apply = %v, %v; want a batch error wrapping SQLSTATE 42P01", errs, err)
			}
			if errs != nil || sink.IsPermanent(err) {
				t.Fatalf("Apply = %v, %v; want no record errors and a non-permanent batch error", errs, err)
			}
		})
	}
}

// Writers racing on the same keys with shuffled versions end with the newest
// version of every key, without deadlocks (keys are written in sorted order).
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, method := range []string{postgres.MethodUnnest, postgres.MethodCopy} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			s, r := setup(t, method)
			const writers, rounds, keys = 4, 10, 200
			var wg sync.WaitGroup
			errc := make(chan error, writers*rounds)
			for w := range writers {
				wg.Go(func() {
					for round := range rounds {
						var evs []events.Event
						for k := range keys {
							// Every writer writes every key; versions interleave
							// across writers and arrive in both directions.
							k := (k*7 + w*13) % keys
							v := int64(round*writers + w + 1)
							if w%2 == 1 {
								v = int64((rounds-1-round)*writers + w + 1)
							}
							evs = append(evs, sinktest.Upsert("acme", fmt.Sprintf("p%03d", k), v))
						}
						if _, err := s.Apply(t.Context(), sinktest.Records(evs...)); err != nil {
							errc <- err
						}
					}
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("Apply: %v", err)
			}
			const newest = rounds * writers
			for k := range keys {
				st, ok, err := r.Get(t.Context(), "acme", fmt.Sprintf("p%03d", k))
				if err != nil || !ok || st.Version != newest {
					t.Fatalf("p%03d = %+v, %v, %v; want version %d", k, st, ok, err, newest)
				}
			}
		})
	}
}

func TestNewCreatesSchemaConcurrently(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.NewPool(t)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := postgres.New(t.Context(), &postgres.Config{DSN: dsn, Schema: "other_catalog"})
			if err != nil {
				errc <- err
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("New: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]postgres.Config{
		"no pool or dsn": {},
		"bad schema":     {DSN: "postgres://x", Schema: "Catalog; DROP"},
		"bad method":     {DSN: "postgres://x", Method: "insert"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := postgres.New(t.Context(), &cfg); !errors.Is(err, postgres.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}
