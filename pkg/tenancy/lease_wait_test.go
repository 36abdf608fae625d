package tenancy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestSetLeaseWait(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := context.Background()
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", "postgres", 2); err != nil {
		t.Fatal(err)
	}
	wait := func() tenancy.PairStatus {
		t.Helper()
		ps, err := st.PairStatuses(ctx, "acme")
		if err != nil || len(ps) != 1 {
			t.Fatalf("pair statuses: %+v %v", ps, err)
		}
		return ps[0]
	}
	a, err := st.Acquire(ctx, "acme", "postgres", "h1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Acquire(ctx, "acme", "postgres", "h2")
	if err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != "" || p.WaitDetail != "" || !p.WaitSince.IsZero() {
		t.Fatalf("no note yet: %+v", p)
	}
	if err := st.SetLeaseWait(ctx, a.ID, a.Token, tenancy.WaitRetrying, "attempt 1: boom"); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != tenancy.WaitRetrying || p.WaitDetail != "attempt 1: boom" || p.WaitSince.IsZero() {
		t.Fatalf("retrying: %+v", p)
	}
	// An open circuit on any held lease outranks retrying on another.
	if err := st.SetLeaseWait(ctx, b.ID, b.Token, tenancy.WaitCircuitOpen, "partner down"); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != tenancy.WaitCircuitOpen || p.WaitDetail != "partner down" {
		t.Fatalf("circuit open: %+v", p)
	}
	// Released: its note is gone with it.
	if err := st.Release(ctx, b.ID, b.Token); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != tenancy.WaitRetrying {
		t.Fatalf("after release of the open one: %+v", p)
	}
	// A new acquisition of the released slot does not inherit the note.
	c, err := st.Acquire(ctx, "acme", "postgres", "h3")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, a.ID, a.Token); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != "" || p.InUse != 1 {
		t.Fatalf("new lease %s inherited a note: %+v", c.ID, p)
	}
	// Stale or released leases cannot write; bad kinds are refused; a long
	// detail is cut; "" clears.
	if err := st.SetLeaseWait(ctx, a.ID, a.Token, tenancy.WaitRetrying, "late"); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("released lease: %v, want ErrStaleLease", err)
	}
	if err := st.SetLeaseWait(ctx, c.ID, c.Token+1, tenancy.WaitRetrying, "x"); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("wrong token: %v, want ErrStaleLease", err)
	}
	if err := st.SetLeaseWait(ctx, c.ID, c.Token, "sleeping", "x"); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("bad kind: %v, want ErrInvalidArgument", err)
	}
	if err := st.SetLeaseWait(ctx, c.ID, c.Token, tenancy.WaitRetrying, strings.Repeat("é", 1000)); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != tenancy.WaitRetrying || len(p.WaitDetail) > 510 || !strings.HasSuffix(p.WaitDetail, "…") {
		t.Fatalf("long detail: %d bytes %q", len(p.WaitDetail), p.WaitDetail[:20])
	}
	if err := st.SetLeaseWait(ctx, c.ID, c.Token, "", ""); err != nil {
		t.Fatal(err)
	}
	if p := wait(); p.Wait != "" {
		t.Fatalf("cleared: %+v", p)
	}
}
