package tenancy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// BenchmarkDispatchCPU measures what a DispatchMany costs PostgreSQL: the
// CPU time of the backend serving the Store's one connection (from
// /proc/<pid>/stat: the database must run on this machine), per call of
// one 10-event range, for calls that go out alone (group=1: dispatchSQL)
// and for 2, 4 and 8 calls of different tenants in one statement
// (dispatchGroupSQL, as DispatchMany sends the calls that queue while a
// statement runs). Reported: backend_us/dispatch. /proc counts in ticks
// of 10 ms: run enough iterations (-benchtime 500x) for it to settle.
func BenchmarkDispatchCPU(b *testing.B) {
	dsn := testenv.NewDatabase(b)
	ctx := context.Background()
	if _, err := migrate.Up(ctx, dsn); err != nil {
		b.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	st, err := New(pool, &Config{DefaultMaxSlots: 4})
	if err != nil {
		b.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	for i := range 200 { // tables of a realistic size
		if _, err := st.Cursor(ctx, fmt.Sprintf("d%03d", i), DestPostgres); err != nil {
			b.Fatal(err)
		}
	}
	for gi, group := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			args := make([]dispatchArgs, group)
			for i := range args {
				tenant := fmt.Sprintf("d%03d", gi*10+i)
				from, err := st.Cursor(ctx, tenant, DestPostgres) // where the last run left it
				if err != nil {
					b.Fatal(err)
				}
				args[i] = dispatchArgs{tenant: tenant, dest: DestPostgres, holder: "bench", expectFrom: from}
			}
			var used time.Duration
			b.ResetTimer()
			for range b.N {
				for i := range args {
					a := &args[i]
					a.ranges = []Range{{a.expectFrom, a.expectFrom + 9}}
				}
				c0, _, err := testenv.ProcessCPU(pid)
				if err != nil {
					b.Fatal(err)
				}
				var res []dispatchResult
				if group == 1 {
					res = []dispatchResult{st.dispatchOne(ctx, args[0])}
				} else if res, err = st.dispatchGroup(ctx, args); err != nil {
					b.Fatal(err)
				}
				c1, _, err := testenv.ProcessCPU(pid)
				if err != nil {
					b.Fatal(err)
				}
				used += c1 - c0
				for i, r := range res {
					if r.err != nil || len(r.leases) != 1 {
						b.Fatalf("dispatch %+v: %v", args[i], r.err)
					}
					if err := st.releaseOne(ctx, r.leases[0].ID, r.leases[0].Token); err != nil {
						b.Fatal(err)
					}
					args[i].expectFrom += 10
				}
			}
			b.ReportMetric(float64(used.Microseconds())/float64(b.N*group), "backend_us/dispatch")
		})
	}
}
