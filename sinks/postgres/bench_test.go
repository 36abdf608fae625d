package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

const (
	benchBatch = 1000
	benchKeys  = 50_000 // per writer; after 50 batches a writer updates
)

var benchPayload = json.RawMessage(`{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}`)

// benchBatchFor is batch n of writer w: 1k distinct keys of tenant w, at
// version n+1.
func benchBatchFor(w, n int) []sink.Record {
	out := make([]sink.Record, benchBatch)
	at := time.Unix(1_700_000_000, 0)
	for j := range out {
		out[j] = sink.Record{Seq: uint64(n*benchBatch + j), Event: events.Event{
			Tenant:     fmt.Sprintf("tenant-%d", w),
			ProductID:  fmt.Sprintf("p%06d", (n*benchBatch+j)%benchKeys),
			Version:    int64(n + 1),
			Op:         events.OpUpsert,
			OccurredAt: at,
			Payload:    benchPayload,
		}}
	}
	return out
}

// runWriters calls apply b.N times, batch n by writer n%writers, on writers
// goroutines, and reports rows/s.
func runWriters(b *testing.B, writers int, apply func(w, n int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			for n := 0; ; n++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				if err := apply(w, n); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "rows/s")
}

func benchPool(b *testing.B) *pgxpool.Pool {
	pool, _ := setupPool(b)
	return pool
}

func setupPool(b *testing.B) (*pgxpool.Pool, reader) {
	s, r := setup(b, postgres.MethodUnnest) // creates the schema
	s.Close()
	return r.pool, r
}

// BenchmarkSink measures Sink.Apply of 1k-row batches with each method.
func BenchmarkSink(b *testing.B) {
	for _, method := range []string{postgres.MethodUnnest, postgres.MethodCopy} {
		for _, writers := range []int{1, 4} {
			b.Run(fmt.Sprintf("method=%s/writers=%d", method, writers), func(b *testing.B) {
				pool := benchPool(b)
				s, err := postgres.New(context.Background(), &postgres.Config{Pool: pool, Method: method})
				if err != nil {
					b.Fatal(err)
				}
				runWriters(b, writers, func(w, n int) error {
					_, err := s.Apply(context.Background(), benchBatchFor(w, n))
					return err
				})
			})
		}
	}
}

// BenchmarkBareCopyMerge is the baseline for MethodCopy: the same SQL issued
// straight from the benchmark, without the sink (no validation, collapse or
// sorting).
func BenchmarkBareCopyMerge(b *testing.B) {
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			pool := benchPool(b)
			cols := []string{"tenant_id", "product_id", "version", "deleted", "payload", "updated_at"}
			runWriters(b, writers, func(w, n int) error {
				batch := benchBatchFor(w, n)
				return pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
					ctx := context.Background()
					if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS bare_stage (tenant_id text, product_id text, version bigint, deleted boolean, payload jsonb, updated_at timestamptz) ON COMMIT DELETE ROWS`); err != nil {
						return err
					}
					rows := make([][]any, len(batch))
					for i, r := range batch {
						rows[i] = []any{r.Event.Tenant, r.Event.ProductID, r.Event.Version, false, string(r.Event.Payload), r.Event.OccurredAt}
					}
					if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bare_stage"}, cols, pgx.CopyFromRows(rows)); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO catalog.products AS p (tenant_id, product_id, version, deleted, payload, updated_at, applied_at)
SELECT tenant_id, product_id, version, deleted, payload, updated_at, now() FROM bare_stage
ON CONFLICT (tenant_id, product_id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted,
	payload = EXCLUDED.payload, updated_at = EXCLUDED.updated_at, applied_at = EXCLUDED.applied_at
WHERE p.version < EXCLUDED.version`)
					return err
				})
			})
		})
	}
}

// BenchmarkBareUnnest is the baseline for MethodUnnest: one autocommitted
// INSERT … SELECT FROM unnest(…) statement straight from the benchmark.
func BenchmarkBareUnnest(b *testing.B) {
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			pool := benchPool(b)
			runWriters(b, writers, func(w, n int) error {
				batch := benchBatchFor(w, n)
				var t, p, pl []string
				var v []int64
				var d []bool
				var at []time.Time
				for _, r := range batch {
					t, p, v, d = append(t, r.Event.Tenant), append(p, r.Event.ProductID), append(v, r.Event.Version), append(d, false)
					pl, at = append(pl, string(r.Event.Payload)), append(at, r.Event.OccurredAt)
				}
				_, err := pool.Exec(context.Background(), `INSERT INTO catalog.products AS p (tenant_id, product_id, version, deleted, payload, updated_at, applied_at)
SELECT u.t, u.p, u.v, u.d, u.pl::jsonb, u.at, now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::text[], $6::timestamptz[]) AS u(t, p, v, d, pl, at)
ON CONFLICT (tenant_id, product_id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted,
	payload = EXCLUDED.payload, updated_at = EXCLUDED.updated_at, applied_at = EXCLUDED.applied_at
WHERE p.version < EXCLUDED.version`, t, p, v, d, pl, at)
				return err
			})
		})
	}
}
