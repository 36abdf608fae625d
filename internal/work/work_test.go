package work_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

func TestItemValidate(t *testing.T) {
	t.Parallel()
	ok := work.Item{Tenant: "acme", Dest: "postgres", FromSeq: 3, ToSeq: 9, Count: 4, LeaseID: "acme/postgres/0/1", Token: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*work.Item){
		"bad tenant":       func(i *work.Item) { i.Tenant = "a.b" },
		"wildcard tenant":  func(i *work.Item) { i.Tenant = ">" },
		"unknown dest":     func(i *work.Item) { i.Dest = "s3" },
		"dest with dot":    func(i *work.Item) { i.Dest = "b2b:a.b" },
		"reversed range":   func(i *work.Item) { i.FromSeq, i.ToSeq = 9, 3 },
		"zero from":        func(i *work.Item) { i.FromSeq = 0 },
		"count too large":  func(i *work.Item) { i.Count = 8 },
		"zero count":       func(i *work.Item) { i.Count = 0 },
		"missing lease id": func(i *work.Item) { i.LeaseID = "" },
		"times too short":  func(i *work.Item) { i.Times = &work.Times{BaseMs: 1, OffsetsMs: []uint32{0, 1, 2}} },
	}
	for name, mutate := range cases {
		it := ok
		mutate(&it)
		if err := it.Validate(); !errors.Is(err, work.ErrInvalidItem) {
			t.Errorf("%s: err %v, want ErrInvalidItem", name, err)
		}
		if _, err := it.Msg(); err == nil {
			t.Errorf("%s: Msg accepted an invalid item", name)
		}
	}
	b2b := ok
	b2b.Dest = "b2b:partner-1"
	b2b.Times = &work.Times{BaseMs: 1_764_000_000_123, OffsetsMs: []uint32{0, 0, 7, 70_000}}
	if got := b2b.Times.At(3); !got.Equal(time.UnixMilli(1_764_000_070_123)) {
		t.Fatalf("Times.At(3) = %v", got)
	}
	m, err := b2b.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "work.b2b:partner-1.acme" || m.Header.Get("Nats-Msg-Id") != "acme/postgres/0/1/3-9" {
		t.Fatalf("subject %q msg id %q", m.Subject, m.Header.Get("Nats-Msg-Id"))
	}
	back, err := work.Decode(m.Data)
	if err != nil || !reflect.DeepEqual(back, b2b) {
		t.Fatalf("decode: %+v %v", back, err)
	}
}

// A replay of the same range under a new lease is new work; a re-send
// under the same lease is a duplicate the stream drops.
func TestWorkStreamDedup(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.JetStream(t)
	ctx := context.Background()
	s, err := work.EnsureStream(ctx, js, work.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it := work.Item{Tenant: "acme", Dest: "clickhouse", FromSeq: 1, ToSeq: 5, Count: 5, LeaseID: "acme/clickhouse/0/7", Token: 7}
	send := func(it work.Item) *jetstream.PubAck {
		m, err := it.Msg()
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	if send(it).Duplicate || !send(it).Duplicate {
		t.Fatal("a re-sent item must be a duplicate")
	}
	// A new lease — the next token of the slot, or the same token on
	// another slot of the pair (each slot counts its own) — is new work.
	it.LeaseID, it.Token = "acme/clickhouse/0/8", 8
	if send(it).Duplicate {
		t.Fatal("the same range under a new lease is new work")
	}
	it.LeaseID, it.Token = "acme/clickhouse/1/7", 7
	if send(it).Duplicate {
		t.Fatal("the same range and token on another slot is new work")
	}
	info, _ := s.Info(ctx)
	if info.State.Msgs != 3 {
		t.Fatalf("WORK holds %d messages, want 3", info.State.Msgs)
	}
}

func TestReaderReadsOneTenantInOrder(t *testing.T) {
	t.Parallel()
	nc, _, pub := products(t)
	ctx := context.Background()
	var evs []events.Event
	for i := 1; i <= 30; i++ {
		tenant := []string{"acme", "globex", "acme"}[i%3]
		evs = append(evs, events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%d", i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{"i":` + fmt.Sprint(i) + `}`)})
	}
	var acmeSeqs []uint64
	for i, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if evs[i].Tenant == "acme" {
			acmeSeqs = append(acmeSeqs, r.Seq)
		}
	}
	rd := work.NewReader(nc, "")
	b, err := rd.Next(ctx, "acme", 1, 0, work.ReadOptions{Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Msgs) != 5 || b.Pending != uint64(len(acmeSeqs)-5) {
		t.Fatalf("got %d msgs pending %d, want 5 and %d", len(b.Msgs), b.Pending, len(acmeSeqs)-5)
	}
	for i, m := range b.Msgs {
		if m.Seq != acmeSeqs[i] || !strings.HasPrefix(m.Subject, events.LayoutDefault.StoredSubject("products.acme.")) || m.Time.IsZero() {
			t.Fatalf("msg %d = seq %d subject %s, want seq %d", i, m.Seq, m.Subject, acmeSeqs[i])
		}
		e, err := events.Decode(m.Data)
		if err != nil || e.Tenant != "acme" {
			t.Fatalf("decode %d: %+v %v", i, e, err)
		}
	}
	// upTo trims the batch.
	b, err = rd.Next(ctx, "acme", acmeSeqs[2], acmeSeqs[4], work.ReadOptions{Max: 100})
	if err != nil || len(b.Msgs) != 3 || b.Msgs[2].Seq != acmeSeqs[4] {
		t.Fatalf("upTo: %d msgs %v", len(b.Msgs), err)
	}
	// Past the end, and a tenant without events: empty, no error.
	for _, tc := range []struct {
		tenant string
		from   uint64
	}{{"acme", acmeSeqs[len(acmeSeqs)-1] + 1}, {"nobody", 1}} {
		b, err := rd.Next(ctx, tc.tenant, tc.from, 0, work.ReadOptions{})
		if err != nil || len(b.Msgs) != 0 {
			t.Fatalf("%s from %d: %d msgs %v", tc.tenant, tc.from, len(b.Msgs), err)
		}
	}
	if _, err := rd.Next(ctx, "a.b", 1, 0, work.ReadOptions{}); !errors.Is(err, events.ErrInvalidTenant) {
		t.Fatalf("invalid tenant: %v", err)
	}
	// The leader's view: the tenant's next event at or after a sequence,
	// skipping other tenants' events; none past the last one.
	if seq, ok, err := rd.NextSeqFromLeader(ctx, "acme", acmeSeqs[1]+1); err != nil || !ok || seq != acmeSeqs[2] {
		t.Fatalf("NextSeqFromLeader after %d: %d %v %v, want %d", acmeSeqs[1], seq, ok, err, acmeSeqs[2])
	}
	if seq, ok, err := rd.NextSeqFromLeader(ctx, "acme", acmeSeqs[len(acmeSeqs)-1]+1); err != nil || ok {
		t.Fatalf("NextSeqFromLeader past the end: %d %v %v, want none", seq, ok, err)
	}

	// LastSeq: the tenant's last event over all its subjects (here an
	// upsert after a delete, then another tenant's event).
	var last []uint64
	for _, e := range []events.Event{
		{Tenant: "acme", ProductID: "p1", Version: 2, Op: events.OpDelete, OccurredAt: time.Now()},
		{Tenant: "acme", ProductID: "p2", Version: 2, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)},
		{Tenant: "globex", ProductID: "p3", Version: 2, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)},
	} {
		r := pub.Publish(ctx, []events.Event{e})[0]
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		last = append(last, r.Seq)
	}
	for tenant, want := range map[string]uint64{"acme": last[1], "globex": last[2], "nobody": 0} {
		if got, err := rd.LastSeq(ctx, tenant, ""); err != nil || got != want {
			t.Fatalf("LastSeq(%s) = %d, %v; want %d", tenant, got, err, want)
		}
	}
	if _, err := rd.LastSeq(ctx, "a.b", ""); !errors.Is(err, events.ErrInvalidTenant) {
		t.Fatalf("LastSeq of an invalid tenant: %v", err)
	}
}

// products starts an embedded server holding the PRODUCTS stream and
// returns a connection to it, the stream and a publisher.
func products(t *testing.T) (*nats.Conn, jetstream.Stream, *events.Publisher) {
	t.Helper()
	_, nc, js := testenv.JetStream(t)
	stream, err := events.EnsureStream(context.Background(), js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	return nc, stream, pub
}

// OpSeqs finds a tenant's events stored on an op's subject of one
// priority, or of every priority, in a partitioned stream: what a sink
// checks the deletes carried or read bare against.
func TestOpSeqsPerPriority(t *testing.T) {
	t.Parallel()
	nc, _, pub := products(t)
	ctx := context.Background()
	ev := func(tenant string, op events.Op, p events.Priority, id string) events.Event {
		return events.Event{Tenant: tenant, ProductID: id, Version: 1, Op: op, Priority: p, OccurredAt: time.Now(), Payload: []byte(`{}`)}
	}
	evs := []events.Event{
		ev("acme", events.OpUpsert, "", "a"),
		ev("acme", events.OpDelete, "", "b"),
		ev("globex", events.OpDelete, events.PriorityHigh, "c"),
		ev("acme", events.OpDelete, events.PriorityHigh, "d"),
		ev("acme", events.OpDelete, events.PriorityBulk, "e"),
		ev("acme", events.OpUpsert, events.PriorityHigh, "f"),
	}
	for _, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	rd := work.NewReader(nc, "")
	for p, want := range map[events.Priority][]uint64{"": {2, 4, 5}, events.PriorityNormal: {2}, events.PriorityHigh: {4}, events.PriorityBulk: {5}} {
		got, err := rd.OpSeqs(ctx, "acme", events.OpDelete, p, 1, 6, 10)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("OpSeqs(acme, delete, %q) = %v, %v; want %v", p, got, err, want)
		}
	}
	if got, err := rd.OpSeqs(ctx, "acme", events.OpDelete, "", 3, 4, 10); err != nil || !slices.Equal(got, []uint64{4}) {
		t.Errorf("OpSeqs(acme, delete, all, 3..4) = %v, %v; want [4]", got, err)
	}
}
