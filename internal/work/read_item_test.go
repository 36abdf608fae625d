package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	nc, stream, pub := products(t)
	ctx := context.Background()
	seqOf := map[uint64]string{} // seq → tenant
	publish := func(tenants ...string) []uint64 {
		t.Helper()
		seqs, _ := publishFor(t, pub, len(seqOf), tenants)
		for i, seq := range seqs {
			seqOf[seq] = tenants[i]
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
		for _, rd := range readers(nc) {
			got, err := rd.ReadItem(ctx, it)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(got) != len(wantSeqs) {
				t.Fatalf("%s: %d events, want %d", name, len(got), len(wantSeqs))
			}
			for i, s := range got {
				if s.Seq != wantSeqs[i] || s.Subject != events.LayoutDefault.StoredSubject("products."+it.Tenant+".upsert") || s.Time.IsZero() || len(s.Data) == 0 {
					t.Fatalf("%s: event %d = seq %d subject %s, want seq %d of %s", name, i, s.Seq, s.Subject, wantSeqs[i], it.Tenant)
				}
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
	// Up to SeqsMax sequences, not one more.
	for _, n := range []int{work.SeqsMax, work.SeqsMax + 1} {
		it := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: 1, ToSeq: uint64(2*n - 1), Count: n, LeaseID: "l"}
		for i := range n {
			it.Seqs = append(it.Seqs, uint64(2*i+1))
		}
		if err := it.Validate(); (err == nil) != (n <= work.SeqsMax) {
			t.Errorf("%d seqs: Validate() = %v", n, err)
		}
	}
}

// An item with Times is read without headers when it is dense or lists its
// sequences: bodies only, sequences from the range, times from the item.
// Whenever the stream does not hold exactly those sequences, it is read
// with headers instead, so the result is what the header path returns.
func TestReadItemBare(t *testing.T) {
	t.Parallel()
	nc, stream, pub := products(t)
	ctx := context.Background()
	body := map[uint64]string{} // seq → product id
	publish := func(tenants ...string) []uint64 {
		t.Helper()
		seqs, evs := publishFor(t, pub, len(body), tenants)
		for i, seq := range seqs {
			body[seq] = evs[i].ProductID
		}
		return seqs
	}
	timed := func(it work.Item) work.Item {
		it.Times = &work.Times{BaseMs: 1_764_000_000_000, OffsetsMs: make([]uint32, it.Count)}
		for i := range it.Count {
			it.Times.OffsetsMs[i] = uint32(3 * i)
		}
		return it
	}
	read := func(name string, it work.Item, wantSeqs []uint64, wantBare bool) []work.Stored {
		t.Helper()
		var got []work.Stored
		for _, rd := range readers(nc) {
			var err error
			if got, err = rd.ReadItem(ctx, it); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(got) != len(wantSeqs) {
				t.Fatalf("%s: %d events, want %d", name, len(got), len(wantSeqs))
			}
			for i, s := range got {
				ev, err := events.Decode(s.Data)
				if err != nil || s.Seq != wantSeqs[i] || ev.ProductID != body[s.Seq] || s.Bare != wantBare {
					t.Fatalf("%s: event %d = seq %d product %s bare %v (%v), want seq %d product %s bare %v",
						name, i, s.Seq, ev.ProductID, s.Bare, err, wantSeqs[i], body[wantSeqs[i]], wantBare)
				}
				if wantBare && (!s.Time.Equal(it.Times.At(i)) || s.Subject != "" || s.Header != nil) {
					t.Fatalf("%s: event %d time %v subject %q header %v, want time %v and no headers", name, i, s.Time, s.Subject, s.Header, it.Times.At(i))
				}
				if !wantBare && (s.Subject == "" || s.Time.IsZero()) {
					t.Fatalf("%s: event %d read with headers lacks subject or time", name, i)
				}
			}
		}
		return got
	}
	item := func(tenant string, from, to uint64, count int) work.Item {
		return work.Item{Tenant: tenant, Dest: "postgres", FromSeq: from, ToSeq: to, Count: count, LeaseID: "l"}
	}
	repeat := func(tenant string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = tenant
		}
		return out
	}

	// Dense, over more than one direct get, more of acme after it.
	dense := publish(repeat("acme", 1050)...)
	publish("acme", "acme")
	read("dense", timed(item("acme", dense[0], dense[1049], 1050)), dense, true)
	read("dense without times", item("acme", dense[0], dense[1049], 1050), dense, false)

	// Listed sequences among other tenants' events.
	spread := publish("acme", "globex", "globex", "acme", "globex", "acme", "acme")
	listed := item("acme", spread[0], spread[5], 3)
	listed.Seqs = []uint64{spread[0], spread[3], spread[5]}
	read("listed", timed(listed), listed.Seqs, true)

	// Two tenants alternating over more than one direct get: acme's batch
	// lists its sequences over twice as many (work.RangeRead) and is read
	// as the whole range without headers, keeping acme's.
	alt := publish(func() (ts []string) {
		for i := range 1300 {
			ts = append(ts, []string{"acme", "globex"}[i%2])
		}
		return ts
	}()...)
	var acmes []uint64
	for i := 0; i < len(alt); i += 2 {
		acmes = append(acmes, alt[i])
	}
	long := item("acme", acmes[0], acmes[len(acmes)-1], len(acmes))
	long.Seqs = acmes
	if !work.RangeRead(long.Count, long.ToSeq-long.FromSeq+1) {
		t.Fatal("an alternating batch is not read as its range")
	}
	read("listed, interleaved", timed(long), acmes, true)

	// Listed over more than 4 times its count: a request per sequence.
	wide := publish("acme", "globex", "globex", "globex", "globex", "globex", "globex", "globex", "acme")
	far := item("acme", wide[0], wide[8], 2)
	far.Seqs = []uint64{wide[0], wide[8]}
	if work.RangeRead(far.Count, far.ToSeq-far.FromSeq+1) {
		t.Fatal("a sparse batch is read as its range")
	}
	read("listed, wide", timed(far), far.Seqs, true)

	// Another tenant's event of the range deleted: the range read comes
	// back short, so the item is read with headers, all of acme's there.
	if err := stream.DeleteMsg(ctx, alt[701]); err != nil {
		t.Fatal(err)
	}
	read("listed, interleaved, another's event deleted", timed(long), acmes, false)

	// A shared range without a list: the subject filter needs headers.
	read("shared", timed(item("acme", spread[0], spread[6], 4)), []uint64{spread[0], spread[3], spread[5], spread[6]}, false)

	// A dense range that lost an event: the bare read runs into the next
	// sequence, so the item is read with headers (one fewer, none past it).
	gap := publish(repeat("acme", 10)...)
	publish("acme")
	if err := stream.DeleteMsg(ctx, gap[4]); err != nil {
		t.Fatal(err)
	}
	read("dense with a gap", timed(item("acme", gap[0], gap[9], 10)), append(append([]uint64{}, gap[:4]...), gap[5:]...), false)

	// A listed sequence deleted: the server answers with the next message;
	// read with headers, it is missing.
	if err := stream.DeleteMsg(ctx, spread[3]); err != nil {
		t.Fatal(err)
	}
	read("listed, one deleted", timed(listed), []uint64{spread[0], spread[5]}, false)

	// A miscounted dense range holding another tenant's event cannot be
	// told without subjects: it comes back bare, and the caller (the sink
	// runner) checks each event's tenant.
	odd := publish("acme", "acme", "globex", "acme")
	got := read("miscounted", timed(item("acme", odd[0], odd[3], 4)), odd, true)
	if ev, _ := events.Decode(got[2].Data); ev.Tenant != "globex" {
		t.Fatalf("miscounted: event 2 is %s's", ev.Tenant)
	}
}

// publishFor publishes one event for each of tenants, product ids p<n>,
// p<n+1>, … and returns their sequences.
func publishFor(t *testing.T, pub *events.Publisher, n int, tenants []string) ([]uint64, []events.Event) {
	t.Helper()
	evs := make([]events.Event, len(tenants))
	for i, tenant := range tenants {
		evs[i] = events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%d", n+i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`)}
	}
	seqs := make([]uint64, len(evs))
	for i, r := range pub.Publish(context.Background(), evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		seqs[i] = r.Seq
	}
	return seqs, evs
}

// A server that does not know no_hdr (older than the one we test with)
// answers with headers. Those replies are not taken as bare: the item is
// read with headers, whose subject check leaves another tenant's event out
// of a miscounted range, as without Times. The fake server answers direct
// gets on stream OLD with every sequence asked for, seq 12 globex's; the
// stream exists, without direct gets and partitions, for its info.
func TestReadItemServerWithoutNoHdr(t *testing.T) {
	t.Parallel()
	_, nc, js := testenv.JetStream(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OLD", Subjects: []string{"old.>"}}); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.OLD", func(m *nats.Msg) {
		var req struct {
			Seq   uint64 `json:"seq"`
			Batch int    `json:"batch"`
		}
		_ = json.Unmarshal(m.Data, &req)
		for i := 0; i < req.Batch; i++ {
			seq := req.Seq + uint64(i)
			tenant := "acme"
			if seq == 12 {
				tenant = "globex"
			}
			body, _ := json.Marshal(events.Event{Tenant: tenant, ProductID: fmt.Sprint("p", seq), Version: 1, Op: events.OpUpsert,
				OccurredAt: time.Now(), Payload: []byte(`{}`)})
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Nats-Sequence", fmt.Sprint(seq))
			r.Header.Set("Nats-Subject", "products."+tenant+".upsert")
			r.Header.Set("Nats-Time-Stamp", time.Now().UTC().Format(time.RFC3339Nano))
			r.Data = body
			_ = nc.PublishMsg(r)
		}
		eob := nats.NewMsg(m.Reply)
		eob.Header.Set("Status", "204")
		eob.Header.Set("Nats-Last-Sequence", fmt.Sprint(req.Seq+uint64(req.Batch)-1))
		_ = nc.PublishMsg(eob)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	it := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: 10, ToSeq: 13, Count: 4, LeaseID: "l",
		Times: &work.Times{BaseMs: 1, OffsetsMs: []uint32{0, 0, 0, 0}}}
	got, err := work.NewReader(nc, "OLD").ReadItem(context.Background(), it)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d events, want acme's 3 (globex's at seq 12 left out by subject)", len(got))
	}
	for _, s := range got {
		ev, _ := events.Decode(s.Data)
		if ev.Tenant != it.Tenant || s.Bare || s.Subject != "products.acme.upsert" {
			t.Errorf("seq %d: tenant %s subject %q bare %v, want acme's, read with headers", s.Seq, ev.Tenant, s.Subject, s.Bare)
		}
	}
}

// readers are a Reader with the default limits and one that asks for 2
// events per get, one get at a time, so that every way ReadItem reads is
// also read in several gets.
func readers(nc *nats.Conn) []*work.Reader {
	small := work.NewReader(nc, "")
	work.SetReadLimits(small, 2, 1)
	return []*work.Reader{work.NewReader(nc, ""), small}
}

// ReadItem asks for at most ReadChunk events per direct get and has at
// most ReadsInFlight of a Reader's gets in flight, however many items are
// read at once: the server queues the replies of every get in flight ahead
// of other tenants' publishes. A responder stands in for the stream
// (a core subscription on the direct-get subject of a stream that does not
// exist) so that the gets it holds can be counted.
func TestReadItemBoundsGetsInFlight(t *testing.T) {
	t.Parallel()
	_, nc := testenv.NATS(t)
	var mu sync.Mutex
	inFlight, most, gets := 0, 0, 0
	var asked []int
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.FAKE", func(m *nats.Msg) {
		var req struct {
			Seq   uint64 `json:"seq"`
			Batch int    `json:"batch"`
			NoHdr bool   `json:"no_hdr"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil || !req.NoHdr || req.Batch < 1 {
			t.Errorf("request %s: %v", m.Data, err)
			return
		}
		mu.Lock()
		inFlight++
		most, gets = max(most, inFlight), gets+1
		asked = append(asked, req.Batch)
		mu.Unlock()
		go func() {
			time.Sleep(5 * time.Millisecond) // held long enough for the others to pile up
			for range req.Batch {
				if err := nc.Publish(m.Reply, []byte("x")); err != nil {
					t.Error(err)
				}
			}
			mu.Lock()
			inFlight-- // before the end of batch: the reader may ask again once it has it
			mu.Unlock()
			eob := nats.NewMsg(m.Reply)
			eob.Header.Set("Status", "204")
			eob.Header.Set("Nats-Last-Sequence", strconv.FormatUint(req.Seq+uint64(req.Batch)-1, 10))
			if err := nc.PublishMsg(eob); err != nil {
				t.Error(err)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	const items, count = 2*work.ReadsInFlight + 4, 2*work.ReadChunk + 1
	rd := work.NewReader(nc, "FAKE")
	var wg sync.WaitGroup
	for i := range items {
		wg.Go(func() {
			from := uint64(1 + i*count)
			it := work.Item{Tenant: "acme", FromSeq: from, ToSeq: from + count - 1, Count: count,
				Times: &work.Times{BaseMs: 1_764_000_000_000, OffsetsMs: make([]uint32, count)}}
			got, err := rd.ReadItem(context.Background(), it)
			if err != nil || len(got) != count || got[count-1].Seq != it.ToSeq || !got[0].Bare {
				t.Errorf("item %d: %d events, want %d bare, last at %d: %v", i, len(got), count, it.ToSeq, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	if most > work.ReadsInFlight || most < 1 {
		t.Errorf("%d gets in flight at most, want 1..%d", most, work.ReadsInFlight)
	}
	if want := items * 3; gets != want {
		t.Errorf("%d gets for %d items of %d events, want %d (ReadChunk %d)", gets, items, count, want, work.ReadChunk)
	}
	for _, n := range asked {
		if n > work.ReadChunk {
			t.Errorf("a get asked for %d events, more than ReadChunk (%d)", n, work.ReadChunk)
		}
	}
	mu.Unlock()

	// A read waiting for a place gives up with its context: a stream that
	// never answers holds every place.
	var held atomic.Int32
	stuck, err := nc.Subscribe("$JS.API.DIRECT.GET.STUCK", func(*nats.Msg) { held.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stuck.Unsubscribe() })
	rd = work.NewReader(nc, "STUCK")
	one := work.Item{Tenant: "acme", FromSeq: 1, ToSeq: 1, Count: 1, Times: &work.Times{OffsetsMs: []uint32{0}}}
	holders, stop := context.WithCancel(context.Background())
	defer stop()
	for range work.ReadsInFlight {
		wg.Go(func() { _, _ = rd.ReadItem(holders, one) })
	}
	testenv.Eventually(t, 10*time.Second, "every read allowed in flight to reach the stream", func() error {
		if n := held.Load(); n != work.ReadsInFlight {
			return fmt.Errorf("%d gets reached the stream, want %d", n, work.ReadsInFlight)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = rd.ReadItem(ctx, one)
	if !errors.Is(err, work.ErrStreamRead) || !strings.Contains(err.Error(), "waiting for a read") {
		t.Errorf("a read with every place taken: %v, want ErrStreamRead waiting for a read", err)
	}
	if n := held.Load(); n != work.ReadsInFlight {
		t.Errorf("%d gets reached the stream, want %d: the waiting read asked too", n, work.ReadsInFlight)
	}
	stop()
	wg.Wait()
}
