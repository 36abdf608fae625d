package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// The benchmarks report acquire+release pairs per second (pairs/s) for
// the Store and, in the same run, for the bare baseline: a counter row per
// tenant taken with `UPDATE ... SET n = n + 1 WHERE n < max` and given back
// with the matching decrement. Compare pairs/s of BenchmarkAcquireRelease
// with BenchmarkBareCounter at equal callers/tenants.

const benchMaxSlots = 16 // ≥ callers, so a hot tenant never refuses

// runCallers runs b.N operations spread over callers goroutines and reports
// op/s under unit. op returns false when it did not count (at limit).
func runCallers(b *testing.B, callers int, unit string, perOp float64, op func(ctx context.Context, rng *rand.Rand) (bool, error)) {
	b.Helper()
	ctx := context.Background()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	b.ResetTimer()
	start := time.Now()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for next.Add(1) <= int64(b.N) {
				for {
					ok, err := op(ctx, rng)
					if err != nil {
						errMu.Lock()
						first = cmpErr(first, err)
						errMu.Unlock()
						return
					}
					if ok {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	b.ReportMetric(float64(b.N)*perOp/el.Seconds(), unit)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func benchStore(b *testing.B, tenants, callers int) (*tenancy.Store, *pgxpool.Pool) {
	b.Helper()
	_, _, dsn := setup(b, &tenancy.Config{DefaultMaxSlots: benchMaxSlots})
	pool := newPool(b, dsn, int32(callers+2))
	st, err := tenancy.New(pool, &tenancy.Config{DefaultMaxSlots: benchMaxSlots})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	reqs := make([]tenancy.AcquireRequest, tenants)
	for i := range reqs {
		reqs[i] = tenancy.AcquireRequest{Tenant: tenantName(i), Dest: tenancy.DestPostgres, Holder: "bench"}
	}
	leases, err := st.AcquireMany(ctx, reqs) // creates every pair
	if err != nil {
		b.Fatal(err)
	}
	if err := st.ReleaseMany(ctx, leases); err != nil {
		b.Fatal(err)
	}
	return st, pool
}

// BenchmarkAcquireRelease measures Store pairs and, interleaved in the same
// run on the same database (so machine load hits both alike), bare counter
// pairs on the same number of rows: each caller alternates one Store pair
// and one bare pair and times each. Reported: pairs/s (Store), bare_pairs/s
// and ratio = pairs/s ÷ bare_pairs/s (target ≥ 0.7).
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tenants := range []int{1, 1000} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("tenants=%d/callers=%d", tenants, callers), func(b *testing.B) {
				st, pool := benchStore(b, tenants, callers)
				bare := bareCounter(b, pool, tenants)
				var lat [2]atomic.Int64 // ns spent in Store pairs, bare pairs
				var cnt [2]atomic.Int64
				timed := func(k int, f func() (bool, error)) (bool, error) {
					t0 := time.Now()
					ok, err := f()
					if ok {
						lat[k].Add(int64(time.Since(t0)))
						cnt[k].Add(1)
					}
					return ok, err
				}
				runCallers(b, callers, "wall_pairs/s", 2, func(ctx context.Context, rng *rand.Rand) (bool, error) {
					ok, err := timed(0, func() (bool, error) {
						l, err := st.Acquire(ctx, tenantName(rng.IntN(tenants)), tenancy.DestPostgres, "bench")
						if errors.Is(err, tenancy.ErrAtLimit) {
							return false, nil
						}
						if err != nil {
							return false, err
						}
						return true, st.Release(ctx, l.ID, l.Token)
					})
					if !ok || err != nil {
						return ok, err
					}
					for {
						ok, err := timed(1, func() (bool, error) { return bare(ctx, rng) })
						if ok || err != nil {
							return true, err
						}
					}
				})
				rate := func(k int) float64 {
					return float64(cnt[k].Load()) / (time.Duration(lat[k].Load()).Seconds() / float64(callers))
				}
				b.ReportMetric(rate(0), "pairs/s")
				b.ReportMetric(rate(1), "bare_pairs/s")
				b.ReportMetric(rate(0)/rate(1), "ratio")
			})
		}
	}
}

// bareCounter creates the baseline table with rows counter rows and returns
// one bare pair: conditional increment, then the matching decrement.
func bareCounter(b *testing.B, pool *pgxpool.Pool, rows int) func(context.Context, *rand.Rand) (bool, error) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_counter (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, max int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_counter (id, max) SELECT g, $2 FROM generate_series(0, $1 - 1) g`, rows, benchMaxSlots); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, rng *rand.Rand) (bool, error) {
		id := rng.IntN(rows)
		tag, err := pool.Exec(ctx, `UPDATE bench_counter SET n = n + 1 WHERE id = $1 AND n < max`, id)
		if err != nil || tag.RowsAffected() == 0 {
			return false, err
		}
		_, err = pool.Exec(ctx, `UPDATE bench_counter SET n = n - 1 WHERE id = $1 AND n > 0`, id)
		return true, err
	}
}

// BenchmarkAcquireManyRelease acquires 64 slots (64 tenants × 1 slot, or 1
// tenant × 64 slots) in one round trip and releases them in one more.
func BenchmarkAcquireManyRelease(b *testing.B) {
	const batch = 64
	for _, shape := range []string{"64tenants", "1tenant"} {
		for _, callers := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/callers=%d", shape, callers), func(b *testing.B) {
				st, _ := benchStore(b, 1000, callers)
				if shape == "1tenant" {
					for i := range callers {
						if err := st.SetLimit(context.Background(), tenantName(i), tenancy.DestPostgres, batch); err != nil {
							b.Fatal(err)
						}
					}
				}
				runCallers(b, callers, "slots/s", batch, func(ctx context.Context, rng *rand.Rand) (bool, error) {
					var reqs []tenancy.AcquireRequest
					if shape == "1tenant" {
						reqs = []tenancy.AcquireRequest{{Tenant: tenantName(rng.IntN(callers)), Dest: tenancy.DestPostgres, Holder: "bench", N: batch}}
					} else {
						base := rng.IntN(1000 - batch)
						for i := range batch {
							reqs = append(reqs, tenancy.AcquireRequest{Tenant: tenantName(base + i), Dest: tenancy.DestPostgres, Holder: "bench"})
						}
					}
					ls, err := st.AcquireMany(ctx, reqs)
					if err != nil {
						return false, err
					}
					if err := st.ReleaseMany(ctx, ls); err != nil {
						return false, err
					}
					return len(ls) == batch, nil
				})
			})
		}
	}
}

// BenchmarkBareCounter is the baseline: the cheapest possible conditional
// counter, no fencing, no expiry, no notification.
func BenchmarkBareCounter(b *testing.B) {
	for _, rows := range []int{1, 1000} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("tenants=%d/callers=%d", rows, callers), func(b *testing.B) {
				_, _, dsn := setup(b, nil)
				bare := bareCounter(b, newPool(b, dsn, int32(callers+2)), rows)
				runCallers(b, callers, "pairs/s", 1, bare)
			})
		}
	}
}

// backendCPU opens a one-connection Store on a fresh database and returns
// it with a reading of the CPU time its backend has used (from
// /proc/<pid>/stat, so the database must run on this machine).
func backendCPU(b *testing.B, maxSlots int) (*tenancy.Store, func() time.Duration) {
	b.Helper()
	_, _, dsn := setup(b, &tenancy.Config{DefaultMaxSlots: maxSlots})
	pool := newPool(b, dsn, 1)
	st, err := tenancy.New(pool, &tenancy.Config{DefaultMaxSlots: maxSlots})
	if err != nil {
		b.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	return st, func() time.Duration {
		used, _, err := testenv.ProcessCPU(pid)
		if err != nil {
			b.Fatal(err)
		}
		return used
	}
}

// BenchmarkReleaseCPU measures what a release costs PostgreSQL: the CPU
// time of the one backend serving the Store's one connection (backendCPU),
// per slot released by Release one at a time (group=1, the statement
// Release runs alone) and by ReleaseMany of 4 and 16 leases of as many
// tenants, as Release sends the calls that queued while a statement ran.
// Reported: backend_us/release. /proc counts in ticks of 10 ms: run enough
// iterations (-benchtime 2000x) for the figure to settle.
func BenchmarkReleaseCPU(b *testing.B) {
	for _, group := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			st, cpu := backendCPU(b, 1)
			ctx := context.Background()
			reqs := make([]tenancy.AcquireRequest, group)
			for i := range reqs {
				reqs[i] = tenancy.AcquireRequest{Tenant: tenantName(i), Dest: tenancy.DestPostgres, Holder: "bench"}
			}
			var used time.Duration
			b.ResetTimer()
			for range b.N {
				ls, err := st.AcquireMany(ctx, reqs)
				if err != nil || len(ls) != group {
					b.Fatalf("acquired %d of %d: %v", len(ls), group, err)
				}
				c0 := cpu()
				if group == 1 {
					err = st.Release(ctx, ls[0].ID, ls[0].Token)
				} else {
					err = st.ReleaseMany(ctx, ls)
				}
				if err != nil {
					b.Fatal(err)
				}
				used += cpu() - c0
			}
			b.ReportMetric(float64(used.Microseconds())/float64(b.N*group), "backend_us/release")
		})
	}
}

// BenchmarkDispatchCPU measures what a DispatchMany costs PostgreSQL, as
// BenchmarkReleaseCPU does a release: per call of one 10-event range,
// alone (group=1: dispatchSQL) and 2, 4 and 8 calls of different tenants
// in one statement (dispatchGroupSQL, as DispatchMany sends the calls that
// queue while a statement runs), among 200 known tenants. Reported:
// backend_us/dispatch. Run -benchtime 500x or more.
func BenchmarkDispatchCPU(b *testing.B) {
	st, cpu := backendCPU(b, 4)
	ctx := context.Background()
	for i := range 200 { // tables of a realistic size
		if _, err := st.Cursor(ctx, tenantName(i), tenancy.DestPostgres); err != nil {
			b.Fatal(err)
		}
	}
	for gi, group := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			tenants, from := make([]string, group), make([]uint64, group)
			for i := range tenants {
				tenants[i] = tenantName(gi*10 + i)
				c, err := st.Cursor(ctx, tenants[i], tenancy.DestPostgres) // where the last run left it
				if err != nil {
					b.Fatal(err)
				}
				from[i] = c
			}
			calls := make([]tenancy.DispatchCall, group)
			var used time.Duration
			b.ResetTimer()
			for range b.N {
				for i, t := range tenants {
					calls[i] = tenancy.NewDispatchCall(t, tenancy.DestPostgres, "bench", from[i], []tenancy.Range{{From: from[i], To: from[i] + 9}})
				}
				c0 := cpu()
				leases, err := st.DispatchStatement(ctx, calls)
				if err != nil {
					b.Fatal(err)
				}
				used += cpu() - c0
				for i, ls := range leases {
					if len(ls) != 1 {
						b.Fatalf("%s: %d leases, want 1", tenants[i], len(ls))
					}
					if err := st.Release(ctx, ls[0].ID, ls[0].Token); err != nil {
						b.Fatal(err)
					}
					from[i] += 10
				}
			}
			b.ReportMetric(float64(used.Microseconds())/float64(b.N*group), "backend_us/dispatch")
		})
	}
}

// BenchmarkVerifyToken measures what ingest and the dashboard pay per
// request for checking a token in PostgreSQL rather than caching it (a
// cache would delay revocation): one primary-key read, from 1 and from 8
// callers. Reported: µs per check (one caller's wait) and checks/s.
func BenchmarkVerifyToken(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			_, _, dsn := setup(b, nil)
			st, err := tenancy.New(newPool(b, dsn, int32(callers)), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			tokens := make([]string, 100)
			for i := range tokens {
				if _, tokens[i], err = st.CreateTenant(ctx, tenantName(i), ""); err != nil {
					b.Fatal(err)
				}
			}
			// Open the pool's connections before the clock starts.
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					if _, err := st.VerifyToken(ctx, tokens[0]); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			start := time.Now()
			runCallers(b, callers, "checks/s", 1, func(ctx context.Context, rng *rand.Rand) (bool, error) {
				_, err := st.VerifyToken(ctx, tokens[rng.IntN(len(tokens))])
				return true, err
			})
			b.ReportMetric(float64(time.Since(start).Microseconds())*float64(callers)/float64(b.N), "µs/check")
		})
	}
}

// BenchmarkTakeQuota measures what ingest pays per request for a tenant
// with a rate quota: one TakeQuota statement on the tenant's bucket row,
// shared by every replica. One tenant takes the row lock in turn from
// every caller; 100 tenants spread the callers over rows. Each take
// fits (the rate is far above what the callers reach). Reported: µs per
// take (one caller's wait) and takes/s; BenchmarkVerifyToken, the
// primary-key read every request pays already, is the baseline.
func BenchmarkTakeQuota(b *testing.B) {
	for _, c := range []struct{ tenants, callers int }{{1, 1}, {1, 8}, {100, 8}} {
		b.Run(fmt.Sprintf("tenants=%d/callers=%d", c.tenants, c.callers), func(b *testing.B) {
			_, _, dsn := setup(b, nil)
			st, err := tenancy.New(newPool(b, dsn, int32(c.callers)), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := range c.tenants {
				if _, _, err := st.CreateTenant(ctx, tenantName(i), ""); err != nil {
					b.Fatal(err)
				}
				if err := st.SetQuota(ctx, tenancy.Quota{Tenant: tenantName(i), EventsPerSec: 1 << 40, BytesPerSec: 1 << 50}); err != nil {
					b.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for range c.callers {
				wg.Go(func() {
					if _, err := st.TakeQuota(ctx, tenantName(0), 1, 1, false); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			start := time.Now()
			runCallers(b, c.callers, "takes/s", 1, func(ctx context.Context, rng *rand.Rand) (bool, error) {
				tk, err := st.TakeQuota(ctx, tenantName(rng.IntN(c.tenants)), 500, 128<<10, false)
				if err == nil && tk.Refused != "" {
					err = fmt.Errorf("refused: %+v", tk)
				}
				return true, err
			})
			b.ReportMetric(float64(time.Since(start).Microseconds())*float64(c.callers)/float64(b.N), "µs/take")
		})
	}
}
