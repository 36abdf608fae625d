package tenancy_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fairwayhq/fairway/pkg/tenancy"
	"testing"
)

func TestPairStatuses(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := context.Background()
	if _, err := st.Acquire(ctx, "acme", "postgres", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", "clickhouse", 3); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWeight(ctx, "acme", 4); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDestWeight(ctx, "acme", "clickhouse", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Dispatch(ctx, "globex", "postgres", "h1", 1, 10); err != nil {
		t.Fatal(err)
	}
	all, err := st.PairStatuses(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range all {
		got[p.Tenant+"/"+p.Dest] = fmtState(p.MaxSlots, p.Weight, p.InUse, p.NextSeq)
	}
	want := map[string]string{
		"acme/clickhouse": fmtState(3, 7, 0, 1),
		"acme/postgres":   fmtState(1, 4, 1, 1),
		"globex/postgres": fmtState(1, 1, 1, 11),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %s, want %s", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	one, err := st.PairStatuses(ctx, "globex")
	if err != nil || len(one) != 1 {
		t.Fatalf("one tenant: %+v %v", one, err)
	}
	if _, err := st.PairStatuses(ctx, "Bad!"); err == nil {
		t.Fatal("invalid tenant accepted")
	}
}

func fmtState(max, weight, inUse int, next uint64) string {
	return fmt.Sprintf("max=%d weight=%d in_use=%d next=%d", max, weight, inUse, next)
}

func TestDestPause(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := context.Background()
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"postgres", "b2b:p1"} {
		if err := st.SetLimit(ctx, "acme", d, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetDestPaused(ctx, "acme", "b2b:p1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "acme", "b2b:p1", "h"); !errors.Is(err, tenancy.ErrPaused) {
		t.Fatalf("paused destination: %v, want ErrPaused", err)
	}
	if _, err := st.Acquire(ctx, "acme", "postgres", "h"); err != nil {
		t.Fatalf("other destination: %v", err)
	}
	ps, _ := st.PairStatuses(ctx, "acme")
	for _, p := range ps {
		if p.Paused != (p.Dest == "b2b:p1") {
			t.Errorf("%s paused=%v", p.Dest, p.Paused)
		}
	}
	if err := st.SetDestPaused(ctx, "acme", "b2b:p1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "acme", "b2b:p1", "h"); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if err := st.SetDestPaused(ctx, "acme", "clickhouse", true); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("unknown pair: %v", err)
	}
}
