package work_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// ReadItem returns exactly the item's tenant's events in its range, in
// order, whether the range is dense (read by sequence, filtered here) or
// shared with other tenants (read with the server's subject filter).
func TestReadItem(t *testing.T) {
	t.Parallel()
	_, nc := testenv.NATS(t)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	stream, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	seqOf := map[uint64]string{} // seq → tenant
	publish := func(tenants ...string) []uint64 {
		t.Helper()
		evs := make([]events.Event, len(tenants))
		for i, tenant := range tenants {
			evs[i] = events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%d", len(seqOf)+i), Version: 1, Op: events.OpUpsert,
				OccurredAt: time.Now(), Payload: []byte(`{}`)}
		}
		seqs := make([]uint64, len(evs))
		for i, r := range pub.Publish(ctx, evs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			seqs[i] = r.Seq
			seqOf[r.Seq] = tenants[i]
		}
		return seqs
	}
	repeat := func(tenant string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = tenant
		}
		return out
	}
	// want lists tenant's sequences in from..to, at most count.
	want := func(tenant string, from, to uint64, count int) []uint64 {
		var out []uint64
		for s := from; s <= to && len(out) < count; s++ {
			if seqOf[s] == tenant {
				out = append(out, s)
			}
		}
		return out
	}
	check := func(name string, it work.Item, wantSeqs []uint64) {
		t.Helper()
		got, err := work.NewReader(nc, "").ReadItem(ctx, it)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(wantSeqs) {
			t.Fatalf("%s: %d events, want %d", name, len(got), len(wantSeqs))
		}
		for i, s := range got {
			if s.Seq != wantSeqs[i] || s.Subject != "products."+it.Tenant+".upsert" || s.Time.IsZero() || len(s.Data) == 0 {
				t.Fatalf("%s: event %d = seq %d subject %s, want seq %d of %s", name, i, s.Seq, s.Subject, wantSeqs[i], it.Tenant)
			}
		}
	}
	item := func(tenant string, from, to uint64, count int) work.Item {
		return work.Item{Tenant: tenant, Dest: "postgres", FromSeq: from, ToSeq: to, Count: count, LeaseID: "l"}
	}

	// Shared range: acme and globex interleaved.
	mixed := publish("acme", "globex", "acme", "acme", "globex", "acme")
	first, last := mixed[0], mixed[len(mixed)-1]
	check("shared range", item("acme", first, last, 4), want("acme", first, last, 4))
	check("shared range, count below the tenant's events", item("acme", first, last, 2), want("acme", first, last, 2))

	// Dense range longer than one direct get, followed by more of acme that
	// must not leak in.
	dense := publish(repeat("acme", 1050)...)
	publish("acme", "acme")
	from, to := dense[0], dense[len(dense)-1]
	check("dense range", item("acme", from, to, len(dense)), want("acme", from, to, len(dense)))

	// A miscounted "dense" range holding another tenant's event: that event
	// is dropped.
	odd := publish("acme", "acme", "globex", "acme")
	check("miscounted range", item("acme", odd[0], odd[3], 4), want("acme", odd[0], odd[3], 4))

	// A dense range that lost an event (the stream's limits): one fewer,
	// nothing from past its end.
	gap := publish(repeat("acme", 10)...)
	publish("acme")
	if err := stream.DeleteMsg(ctx, gap[9]); err != nil {
		t.Fatal(err)
	}
	delete(seqOf, gap[9])
	check("dense range with a gap", item("acme", gap[0], gap[9], 10), want("acme", gap[0], gap[9], 10))

	// Listed sequences: each read by sequence; a deleted one is missing, not
	// replaced by the next message (globex's, or acme's past the item).
	spread := publish("acme", "globex", "globex", "acme", "globex", "acme", "acme")
	listed := item("acme", spread[0], spread[5], 3)
	listed.Seqs = []uint64{spread[0], spread[3], spread[5]}
	check("listed sequences", listed, listed.Seqs)
	if err := stream.DeleteMsg(ctx, spread[3]); err != nil {
		t.Fatal(err)
	}
	check("listed sequences, one deleted", listed, []uint64{spread[0], spread[5]})
}

// Seqs must list the item's events in order, from FromSeq to ToSeq.
func TestItemSeqsValidate(t *testing.T) {
	t.Parallel()
	base := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: 10, ToSeq: 20, Count: 3, LeaseID: "l"}
	for _, tc := range []struct {
		seqs []uint64
		ok   bool
	}{
		{nil, true},
		{[]uint64{10, 15, 20}, true},
		{[]uint64{10, 20}, false},     // count 3
		{[]uint64{11, 15, 20}, false}, // not from FromSeq
		{[]uint64{10, 15, 19}, false}, // not to ToSeq
		{[]uint64{10, 10, 20}, false}, // not increasing
	} {
		it := base
		it.Seqs = tc.seqs
		if err := it.Validate(); (err == nil) != tc.ok {
			t.Errorf("seqs %v: Validate() = %v, want ok %v", tc.seqs, err, tc.ok)
		}
	}
}
