// Package sinktest is the conformance suite every sink.Sink runs against its
// real destination: idempotent re-apply, ordering by version, tombstones,
// duplicate keys in a batch, partial-batch isolation of a poison record and
// many tenants in one batch.
//
// A sink's test calls Run with a Harness that builds a fresh sink and a
// Reader over its destination.
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// State is what a destination holds for one product.
type State struct {
	Version int64
	Deleted bool
	// Payload is the stored document; empty for a tombstone.
	Payload json.RawMessage
}

// Reader reads a destination back for the suite.
type Reader interface {
	// Get returns the current state of one product; false when the
	// destination has never seen it.
	Get(ctx context.Context, tenant, productID string) (State, bool, error)
	// CountEvents counts what the destination holds for tenant after
	// deduplication: distinct applied events for an event log, rows for a
	// table of current state.
	CountEvents(ctx context.Context, tenant string) (int, error)
}

// Harness tells Run how to exercise one sink.
type Harness struct {
	// New returns a sink writing to a fresh, empty destination and a Reader
	// over that destination. It is called once per case; cases run in
	// parallel.
	New func(t *testing.T) (sink.Sink, Reader)
	// Poison returns an event for tenant that the sink rejects permanently
	// (for example a payload the destination refuses).
	Poison func(tenant string) events.Event
}

// Run runs every case of the suite against h.
func Run(t *testing.T, h Harness) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s sink.Sink, r Reader, h Harness)
	}{
		{"EmptyBatch", testEmptyBatch},
		{"IdempotentReapply", testIdempotentReapply},
		{"OlderVersionAcrossBatches", testOlderAcrossBatches},
		{"OlderVersionWithinBatch", testOlderWithinBatch},
		{"DuplicateKeysInBatch", testDuplicateKeys},
		{"DeleteTombstone", testDeleteTombstone},
		{"PartialBatchIsolation", testPartialBatch},
		{"PoisonNewestKeepsOlder", testPoisonNewest},
		{"ManyTenants", testManyTenants},
		{"CanceledContext", testCanceledContext},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, r := h.New(t)
			c.run(t, s, r, h)
		})
	}
}

var baseTime = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

// Upsert builds an upsert event with a small JSON payload derived from its
// arguments.
func Upsert(tenant, productID string, version int64) events.Event {
	return events.Event{
		Tenant:         tenant,
		ProductID:      productID,
		Version:        version,
		Op:             events.OpUpsert,
		OccurredAt:     baseTime.Add(time.Duration(version) * time.Second),
		Payload:        payloadFor(productID, version),
		IdempotencyKey: fmt.Sprintf("%s/%s/%d", tenant, productID, version),
	}
}

// Delete builds a delete event.
func Delete(tenant, productID string, version int64) events.Event {
	return events.Event{
		Tenant:         tenant,
		ProductID:      productID,
		Version:        version,
		Op:             events.OpDelete,
		OccurredAt:     baseTime.Add(time.Duration(version) * time.Second),
		IdempotencyKey: fmt.Sprintf("%s/%s/%d/delete", tenant, productID, version),
	}
}

func payloadFor(productID string, version int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"name": "product " + productID, "version": version, "tags": []string{"a", "b"}})
	return b
}

// Records wraps events as records with increasing sequence numbers.
func Records(evs ...events.Event) []sink.Record {
	out := make([]sink.Record, len(evs))
	for i, e := range evs {
		out[i] = sink.Record{Seq: uint64(i + 1), Event: e, PublishedAt: baseTime.Add(time.Hour)}
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustApply applies batch and fails the test on a batch error or on any
// record error.
func mustApply(t *testing.T, s sink.Sink, batch []sink.Record) {
	t.Helper()
	errs, err := s.Apply(ctxFor(t), batch)
	if err != nil {
		t.Fatalf("Apply(%d records): batch error: %v", len(batch), err)
	}
	if len(errs) != len(batch) {
		t.Fatalf("Apply(%d records) returned %d record errors, want %d", len(batch), len(errs), len(batch))
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("Apply: record %d (%s/%s v%d): %v", i, batch[i].Event.Tenant, batch[i].Event.ProductID, batch[i].Event.Version, e)
		}
	}
}

// wantState fails unless the product is present with version and deleted as
// given and, for a live product, the payload of payloadFor(version).
func wantState(t *testing.T, r Reader, tenant, productID string, version int64, deleted bool) {
	t.Helper()
	st, ok, err := r.Get(ctxFor(t), tenant, productID)
	if err != nil {
		t.Fatalf("Get(%s, %s): %v", tenant, productID, err)
	}
	if !ok {
		t.Fatalf("Get(%s, %s): not found, want version %d deleted=%v", tenant, productID, version, deleted)
	}
	if st.Version != version || st.Deleted != deleted {
		t.Fatalf("Get(%s, %s) = version %d deleted=%v, want version %d deleted=%v", tenant, productID, st.Version, st.Deleted, version, deleted)
	}
	if deleted {
		if len(st.Payload) != 0 && string(st.Payload) != "null" {
			t.Fatalf("Get(%s, %s): tombstone payload = %s, want none", tenant, productID, st.Payload)
		}
		return
	}
	if !jsonEqual(st.Payload, payloadFor(productID, version)) {
		t.Fatalf("Get(%s, %s) payload = %s, want %s", tenant, productID, st.Payload, payloadFor(productID, version))
	}
}

func wantAbsent(t *testing.T, r Reader, tenant, productID string) {
	t.Helper()
	st, ok, err := r.Get(ctxFor(t), tenant, productID)
	if err != nil {
		t.Fatalf("Get(%s, %s): %v", tenant, productID, err)
	}
	if ok {
		t.Fatalf("Get(%s, %s) = %+v, want not found", tenant, productID, st)
	}
}

func count(t *testing.T, r Reader, tenant string) int {
	t.Helper()
	n, err := r.CountEvents(ctxFor(t), tenant)
	if err != nil {
		t.Fatalf("CountEvents(%s): %v", tenant, err)
	}
	return n
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
