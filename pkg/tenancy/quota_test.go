package tenancy_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestQuotaSetReadClear(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	if _, _, err := st.CreateTenant(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if q, err := st.Quota(ctx, "acme"); err != nil || !q.Off() || q.Tenant != "acme" || q.String() != "-" {
		t.Fatalf("default quota %+v %v, want none", q, err)
	}
	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "acme", EventsPerSec: 100, BytesPerSec: 1 << 20, BytesBurst: 4 << 20, MaxBacklog: 5000}); err != nil {
		t.Fatal(err)
	}
	q, err := st.Quota(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// The events burst defaults to one second's worth.
	want := tenancy.Quota{Tenant: "acme", EventsPerSec: 100, EventsBurst: 100, BytesPerSec: 1 << 20, BytesBurst: 4 << 20, MaxBacklog: 5000, ChangedAt: q.ChangedAt}
	if q != want || q.ChangedAt.IsZero() {
		t.Fatalf("quota %+v, want %+v", q, want)
	}
	if s := q.String(); s != "100 events/s (burst 100), 1048576 bytes/s (burst 4194304), max backlog 5000" {
		t.Fatalf("String() = %q", s)
	}
	if qs, err := st.Quotas(ctx); err != nil || len(qs) != 1 || qs[0] != q {
		t.Fatalf("Quotas() = %+v %v", qs, err)
	}

	for name, bad := range map[string]tenancy.Quota{
		"negative rate":        {Tenant: "acme", EventsPerSec: -1},
		"burst without rate":   {Tenant: "acme", EventsBurst: 10},
		"bytes burst, no rate": {Tenant: "acme", BytesBurst: 10, MaxBacklog: 1},
		"negative backlog":     {Tenant: "acme", MaxBacklog: -5},
	} {
		if err := st.SetQuota(ctx, bad); !errors.Is(err, tenancy.ErrInvalidArgument) {
			t.Errorf("%s: SetQuota = %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "ghost", EventsPerSec: 1}); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("quota of an unknown tenant: %v", err)
	}
	if got, _ := st.Quota(ctx, "acme"); got != q {
		t.Fatalf("a refused change changed the quota: %+v", got)
	}

	// Setting nothing clears, as ClearQuota does.
	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if q, err := st.Quota(ctx, "acme"); err != nil || !q.Off() {
		t.Fatalf("after clearing: %+v %v", q, err)
	}
	if err := st.ClearQuota(ctx, "acme"); err != nil {
		t.Fatalf("clearing twice: %v", err)
	}
	if err := st.ClearQuota(ctx, "ghost"); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("clear of an unknown tenant: %v", err)
	}
	if qs, err := st.Quotas(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("Quotas() after clearing = %+v %v", qs, err)
	}
}

func TestQuotaTakeWithinBurstThenRefusedWithWait(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	for _, id := range []string{"acme", "free", "bytes"} {
		if _, _, err := st.CreateTenant(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	// One event per second, ten at once.
	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "acme", EventsPerSec: 1, EventsBurst: 10}); err != nil {
		t.Fatal(err)
	}
	if tk, err := st.TakeQuota(ctx, "acme", 11, 0, false); err != nil || tk.Refused != tenancy.QuotaEventsPerSec || !tk.Never || tk.Burst != 10 {
		t.Fatalf("a take over the burst: %+v %v, want never", tk, err)
	}
	if tk, err := st.TakeQuota(ctx, "acme", 10, 0, false); err != nil || tk.Refused != "" {
		t.Fatalf("the whole burst: %+v %v, want taken", tk, err)
	}
	tk, err := st.TakeQuota(ctx, "acme", 3, 0, false)
	if err != nil || tk.Refused != tenancy.QuotaEventsPerSec || tk.Never || tk.Limit != 1 || tk.Burst != 10 {
		t.Fatalf("a take from an empty bucket: %+v %v, want refused", tk, err)
	}
	// Three tokens come back in three seconds.
	if tk.Wait <= 2*time.Second || tk.Wait > 3*time.Second {
		t.Fatalf("wait %s, want just under 3s", tk.Wait)
	}
	// Clamped, a take over the burst waits for a full bucket instead.
	if tk, err := st.TakeQuota(ctx, "acme", 50, 0, true); err != nil || tk.Never || tk.Wait <= 8*time.Second {
		t.Fatalf("a clamped take over the burst: %+v %v, want a wait for the full bucket", tk, err)
	}

	if tk, err := st.TakeQuota(ctx, "free", 1_000_000, 1<<30, false); err != nil || tk.Refused != "" {
		t.Fatalf("a tenant without quota: %+v %v", tk, err)
	}

	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "bytes", BytesPerSec: 100, BytesBurst: 1000, MaxBacklog: 10}); err != nil {
		t.Fatal(err)
	}
	if tk, err := st.TakeQuota(ctx, "bytes", 500, 1000, false); err != nil || tk.Refused != "" {
		t.Fatalf("bytes within the burst: %+v %v", tk, err)
	}
	if tk, err := st.TakeQuota(ctx, "bytes", 1, 50, false); err != nil || tk.Refused != tenancy.QuotaBytesPerSec || tk.Wait <= 0 || tk.Wait > 500*time.Millisecond {
		t.Fatalf("bytes over: %+v %v, want refused for about half a second", tk, err)
	}
}

// Every ingest replica takes from the same bucket: two stores on two pools
// hammering one tenant's quota together never take more than
// burst + rate * elapsed.
func TestQuotaTakeSharedByTwoStoresNeverExceedsRate(t *testing.T) {
	t.Parallel()
	st, _, dsn := setup(t, nil)
	ctx := testCtx(t)
	other, err := tenancy.New(newPool(t, dsn, 8), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateTenant(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	const rate, burst = 200, 50
	if err := st.SetQuota(ctx, tenancy.Quota{Tenant: "acme", EventsPerSec: rate, EventsBurst: burst}); err != nil {
		t.Fatal(err)
	}
	var taken, refused atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(2 * time.Second)
	for _, s := range []*tenancy.Store{st, other} {
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					tk, err := s.TakeQuota(ctx, "acme", 3, 0, false)
					if err != nil {
						t.Error(err)
						return
					}
					if tk.Refused == "" {
						taken.Add(3)
					} else {
						refused.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	limit := burst + rate*elapsed.Seconds()
	t.Logf("taken %d events in %s (bound %.0f), %d takes refused", taken.Load(), elapsed, limit, refused.Load())
	if float64(taken.Load()) > limit {
		t.Fatalf("taken %d events in %s, more than burst + rate * elapsed = %.0f", taken.Load(), elapsed, limit)
	}
	if taken.Load() < rate || refused.Load() == 0 {
		t.Fatalf("taken %d, refused %d: the bucket did not let the rate through, or refused nothing", taken.Load(), refused.Load())
	}
}

func TestFirstUndispatchedIsTheSlowestDestinationsHighWater(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	if _, _, err := st.CreateTenant(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if seq, err := st.FirstUndispatched(ctx, "acme"); err != nil || seq[events.PriorityNormal] != 1 || seq[events.PriorityHigh] != 1 || seq[events.PriorityBulk] != 1 {
		t.Fatalf("no destination yet: %v %v, want 1 for every priority", seq, err)
	}
	if err := st.SetCursor(ctx, "acme", "postgres", 40); err != nil {
		t.Fatal(err)
	}
	if err := st.SetCursor(ctx, "acme", "clickhouse", 25); err != nil {
		t.Fatal(err)
	}
	if seq, err := st.FirstUndispatched(ctx, "acme"); err != nil || seq[events.PriorityNormal] != 25 {
		t.Fatalf("two destinations: %v %v, want the slower one's 25", seq, err)
	}
	// A replay rewinds clickhouse to 3: those events were dispatched once.
	if _, err := st.Rewind(ctx, tenancy.Rewind{Tenant: "acme", Dest: "clickhouse", From: 3}); err != nil {
		t.Fatal(err)
	}
	if seq, err := st.FirstUndispatched(ctx, "acme"); err != nil || seq[events.PriorityNormal] != 25 {
		t.Fatalf("during a replay: %v %v, want 25", seq, err)
	}
}
