package tenancy_test

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Weight changes reach dispatchers at once: SetWeight once per destination
// of the tenant, SetDestWeight for its pair.
func TestWeightChangesNotify(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"postgres", "clickhouse"} {
		if err := st.SetLimit(ctx, "acme", d, 2); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	weights := func(n int) map[string]bool {
		t.Helper()
		got := map[string]bool{}
		deadline := time.After(30 * time.Second)
		for len(got) < n {
			select {
			case r := <-ch:
				if r.Weight {
					if r.Tenant != "acme" || r.Slots != 0 {
						t.Fatalf("weight notification %+v", r)
					}
					got[r.Dest] = true
				}
			case <-deadline:
				t.Fatalf("weight notifications: %v, want %d", got, n)
			}
		}
		return got
	}
	if err := st.SetWeight(ctx, "acme", 5); err != nil {
		t.Fatal(err)
	}
	if got := weights(2); !got["postgres"] || !got["clickhouse"] {
		t.Fatalf("SetWeight notified %v", got)
	}
	if err := st.SetDestWeight(ctx, "acme", "clickhouse", 7); err != nil {
		t.Fatal(err)
	}
	if got := weights(1); !got["clickhouse"] {
		t.Fatalf("SetDestWeight notified %v", got)
	}
}

// A partner change reaches ListenPartners (and Listen) when its transaction
// commits, and never when it rolls back; ListenPartners does not carry slot
// releases.
func TestNotifyPartner(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)
	partners, err := st.ListenPartners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "d1"))
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tenancy.NotifyPartner(ctx, tx, "acme", "erp", tenancy.PartnerChanged); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tenancy.NotifyPartner(ctx, pool, "acme", "erp", tenancy.PartnerAdded); err != nil {
		t.Fatal(err)
	}
	want := tenancy.Released{Tenant: "acme", Dest: "b2b:erp", Partner: tenancy.PartnerAdded}
	select {
	case r := <-partners:
		if r != want {
			t.Fatalf("ListenPartners got %+v, want %+v", r, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no partner notification")
	}
	for {
		select {
		case r := <-all:
			if r.Partner == "" {
				continue // the release
			}
			if r != want {
				t.Fatalf("Listen got %+v, want %+v", r, want)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatal("Listen: no partner notification")
		}
	}
}
