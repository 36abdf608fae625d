package sinktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

func testEmptyBatch(t *testing.T, s sink.Sink, r Reader, h Harness) {
	errs, err := s.Apply(ctxFor(t), nil)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Apply(empty) = %v, %v; want no record errors and no error", errs, err)
	}
}

func testIdempotentReapply(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	var evs []events.Event
	for i := range 20 {
		id := fmt.Sprintf("p%02d", i)
		evs = append(evs, Upsert(tenant, id, 1), Upsert(tenant, id, 2))
		if i%4 == 0 {
			evs = append(evs, Delete(tenant, id, 3))
		}
	}
	batch := Records(evs...)
	mustApply(t, s, batch)
	before := count(t, r, tenant)
	if before == 0 {
		t.Fatalf("CountEvents after the first apply = 0")
	}
	mustApply(t, s, batch)
	// The same events published again (outside the stream's duplicate
	// window) arrive with new sequence numbers and publish times.
	again := Records(evs[:len(evs)/2]...)
	for i := range again {
		again[i].Seq += 1_000_000
		again[i].PublishedAt = again[i].PublishedAt.Add(time.Hour)
	}
	mustApply(t, s, again)
	if after := count(t, r, tenant); after != before {
		t.Fatalf("CountEvents after re-apply = %d, want %d (unchanged)", after, before)
	}
	for i := range 20 {
		id := fmt.Sprintf("p%02d", i)
		if i%4 == 0 {
			wantState(t, r, tenant, id, 3, true)
		} else {
			wantState(t, r, tenant, id, 2, false)
		}
	}
}

func testOlderAcrossBatches(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	mustApply(t, s, Records(Upsert(tenant, "p1", 5), Upsert(tenant, "p2", 1)))
	// Out-of-order delivery: older versions of p1 arrive after v5, while p2
	// moves forward in the same batch.
	mustApply(t, s, Records(Upsert(tenant, "p1", 3), Upsert(tenant, "p2", 2), Upsert(tenant, "p1", 4)))
	wantState(t, r, tenant, "p1", 5, false)
	wantState(t, r, tenant, "p2", 2, false)
	mustApply(t, s, Records(Delete(tenant, "p1", 2)))
	wantState(t, r, tenant, "p1", 5, false)
}

func testOlderWithinBatch(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	mustApply(t, s, Records(
		Upsert(tenant, "p1", 2), Upsert(tenant, "p1", 7), Upsert(tenant, "p1", 1),
		Delete(tenant, "p2", 4), Upsert(tenant, "p2", 3),
	))
	wantState(t, r, tenant, "p1", 7, false)
	wantState(t, r, tenant, "p2", 4, true)
}

func testDuplicateKeys(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	// The same event delivered twice in one batch, plus several versions of
	// one key: a destination that cannot take a key twice per statement must
	// collapse them.
	batch := Records(
		Upsert(tenant, "p1", 1), Upsert(tenant, "p1", 1),
		Upsert(tenant, "p1", 2), Upsert(tenant, "p1", 2),
		Upsert(tenant, "p2", 9), Upsert(tenant, "p2", 9),
	)
	mustApply(t, s, batch)
	wantState(t, r, tenant, "p1", 2, false)
	wantState(t, r, tenant, "p2", 9, false)
	n := count(t, r, tenant)
	mustApply(t, s, batch)
	if m := count(t, r, tenant); m != n {
		t.Fatalf("CountEvents after re-applying duplicates = %d, want %d", m, n)
	}
}

func testDeleteTombstone(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	mustApply(t, s, Records(Upsert(tenant, "p1", 1)))
	mustApply(t, s, Records(Delete(tenant, "p1", 2)))
	wantState(t, r, tenant, "p1", 2, true)
	// A late, older upsert must not resurrect the product.
	mustApply(t, s, Records(Upsert(tenant, "p1", 1)))
	wantState(t, r, tenant, "p1", 2, true)
	// A delete of a product never seen leaves a tombstone that blocks the
	// older upsert arriving after it.
	mustApply(t, s, Records(Delete(tenant, "p2", 5)))
	mustApply(t, s, Records(Upsert(tenant, "p2", 4)))
	wantState(t, r, tenant, "p2", 5, true)
	// A newer upsert resurrects.
	mustApply(t, s, Records(Upsert(tenant, "p1", 3), Upsert(tenant, "p2", 6)))
	wantState(t, r, tenant, "p1", 3, false)
	wantState(t, r, tenant, "p2", 6, false)
}

func testPartialBatch(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	const poisonAt = 37
	var evs []events.Event
	for i := range 100 {
		if i == poisonAt {
			evs = append(evs, h.Poison(tenant))
		}
		evs = append(evs, Upsert(tenant, fmt.Sprintf("good-%03d", i), 1))
	}
	batch := Records(evs...)
	for attempt := range 2 { // the second attempt is a redelivery
		errs, err := s.Apply(ctxFor(t), batch)
		if err != nil {
			t.Fatalf("attempt %d: Apply: batch error %v, want only the poison record rejected", attempt, err)
		}
		if len(errs) != len(batch) {
			t.Fatalf("attempt %d: Apply returned %d record errors, want %d", attempt, len(errs), len(batch))
		}
		for i, e := range errs {
			switch {
			case i == poisonAt && !sink.IsPermanent(e):
				t.Fatalf("attempt %d: poison record error = %v, want a *sink.PermanentError", attempt, e)
			case i != poisonAt && e != nil:
				t.Fatalf("attempt %d: good record %d rejected: %v", attempt, i, e)
			}
		}
	}
	for i := range 100 {
		wantState(t, r, tenant, fmt.Sprintf("good-%03d", i), 1, false)
	}
	if n := count(t, r, tenant); n != 100 {
		t.Fatalf("CountEvents = %d, want 100 (the poison record must not land)", n)
	}
}

func testPoisonNewest(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenant = "acme"
	poison := h.Poison(tenant)
	good := Upsert(tenant, poison.ProductID, 1)
	poison.Version = 2
	batch := Records(good, poison)
	errs, err := s.Apply(ctxFor(t), batch)
	if err != nil {
		t.Fatalf("Apply: batch error %v", err)
	}
	if len(errs) != 2 || errs[0] != nil || !sink.IsPermanent(errs[1]) {
		t.Fatalf("Apply errors = %v, want [nil, permanent]", errs)
	}
	// The rejected newer version must not hide the older good one.
	wantState(t, r, tenant, poison.ProductID, 1, false)
}

func testManyTenants(t *testing.T, s sink.Sink, r Reader, h Harness) {
	const tenants, products = 40, 25
	var evs []events.Event
	// Interleave tenants so a batch is not sorted by tenant.
	for p := range products {
		for tn := range tenants {
			evs = append(evs, Upsert(fmt.Sprintf("tenant-%02d", tn), fmt.Sprintf("p%02d", p), int64(tn+1)))
		}
	}
	mustApply(t, s, Records(evs...))
	for tn := range tenants {
		tenant := fmt.Sprintf("tenant-%02d", tn)
		if n := count(t, r, tenant); n != products {
			t.Fatalf("CountEvents(%s) = %d, want %d", tenant, n, products)
		}
		wantState(t, r, tenant, "p00", int64(tn+1), false)
		wantState(t, r, tenant, fmt.Sprintf("p%02d", products-1), int64(tn+1), false)
	}
	wantAbsent(t, r, "tenant-unknown", "p00")
	if n := count(t, r, "tenant-unknown"); n != 0 {
		t.Fatalf("CountEvents(tenant-unknown) = %d, want 0", n)
	}
}

func testCanceledContext(t *testing.T, s sink.Sink, r Reader, h Harness) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	errs, err := s.Apply(ctx, Records(Upsert("acme", "p1", 1)))
	if err == nil {
		t.Fatalf("Apply with a canceled context = %v, nil; want a batch error", errs)
	}
	if errs != nil {
		t.Fatalf("Apply with a canceled context returned record errors %v with batch error %v; want nil", errs, err)
	}
	wantAbsent(t, r, "acme", "p1")
}
