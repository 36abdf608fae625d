package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/replay"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

type fixture struct {
	svc    *replay.Service
	store  *tenancy.Store
	stream jetstream.Stream
	seqs   map[string][]uint64 // tenant → its sequences
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, _ := tenancy.New(pool, &tenancy.Config{DefaultMaxSlots: 100})
	_, nc, js := testenv.JetStream(t)
	stream, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	f := &fixture{store: store, stream: stream, seqs: map[string][]uint64{},
		svc: &replay.Service{Store: store, Pool: pool, JS: js, Reader: work.NewReader(nc, "")}}
	var evs []events.Event
	for i := range 30 {
		tenant := "acme"
		if i%3 == 2 {
			tenant = "globex"
		}
		evs = append(evs, events.Event{Tenant: tenant, ProductID: fmt.Sprint(i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`)})
	}
	for i, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		f.seqs[evs[i].Tenant] = append(f.seqs[evs[i].Tenant], r.Seq)
	}
	return f
}

// dispatch moves (tenant, dest)'s cursor to after seq as the dispatcher would.
func (f *fixture) dispatch(t *testing.T, tenant, dest string, to uint64) {
	t.Helper()
	ctx := context.Background()
	from, err := f.store.Cursor(ctx, tenant, dest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Dispatch(ctx, tenant, dest, "test", from, to); err != nil {
		t.Fatal(err)
	}
}

// dispatchReplay dispatches (tenant, dest)'s replay up to seq as the
// dispatcher would, in one batch it then releases.
func (f *fixture) dispatchReplay(t *testing.T, tenant, dest string, to uint64) {
	t.Helper()
	ctx := context.Background()
	ps, err := f.store.PairState(ctx, tenant, dest)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := f.store.DispatchReplay(ctx, tenant, dest, "test", ps.ReplayNext, []tenancy.Range{{From: ps.ReplayNext, To: to}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Release(ctx, ls[0].ID, ls[0].Token); err != nil {
		t.Fatal(err)
	}
}

// pair returns (tenant, dest)'s state.
func (f *fixture) pair(t *testing.T, tenant, dest string) tenancy.PairState {
	t.Helper()
	ps, err := f.store.PairState(context.Background(), tenant, dest)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestReplayRewindsAndTracksProgress(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	acme := f.seqs["acme"]
	last := acme[len(acme)-1]
	f.dispatch(t, "acme", "postgres", last)
	f.dispatch(t, "acme", "clickhouse", acme[4])

	rs, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[0]})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Total != uint64(len(acme)) || r.TargetSeq != last+1 || r.FromSeq != acme[0] {
		t.Fatalf("replay %+v, want %d events up to %d", r, len(acme), last+1)
	}
	if ps := f.pair(t, "acme", "postgres"); ps.NextSeq != last+1 || ps.ReplayNext != acme[0] || ps.ReplayUntil != last+1 {
		t.Fatalf("pair %+v, want the cursor at %d and the replay lane from %d", ps, last+1, acme[0])
	}
	f.dispatchReplay(t, "acme", "postgres", acme[9])
	got, err := f.svc.Get(ctx, r.ID)
	if err != nil || got.Done != 10 || got.State != replay.StateRunning {
		t.Fatalf("progress %+v %v, want 10 done", got, err)
	}
	f.dispatchReplay(t, "acme", "postgres", last)
	if got, _ := f.svc.Get(ctx, r.ID); got.State != replay.StateDone || got.Done != got.Total {
		t.Fatalf("after the range: %+v", got)
	}

	// all: only destinations that dispatched past the start replay; the
	// rate goes to each, is listed, and reaches the dispatcher through the
	// cursor row.
	if _, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "all", FromSeq: acme[2], Rate: -2}); err == nil {
		t.Fatal("rate -2 accepted")
	}
	rs, err = f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "all", FromSeq: acme[2], Rate: 700})
	if err != nil || len(rs) != 2 {
		t.Fatalf("all: %+v %v", rs, err)
	}
	for _, r := range rs {
		listed, err := f.svc.Get(ctx, r.ID)
		if err != nil || listed.Rate != 700 {
			t.Fatalf("listed %+v %v, want rate 700", listed, err)
		}
		ps, err := f.store.PairState(ctx, "acme", r.Dest)
		if err != nil || ps.ReplayRate != 700 || !ps.Replaying() {
			t.Fatalf("%s pair state %+v %v, want replaying at 700/s", r.Dest, ps, err)
		}
	}
	// Cancel ends the replay lane; the cursor stays where it is.
	c, err := f.svc.Cancel(ctx, rs[0].ID)
	if err != nil || c.State != replay.StateCancelled {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if ps := f.pair(t, c.Tenant, c.Dest); ps.Replaying() || ps.NextSeq != c.TargetSeq {
		t.Fatalf("pair after cancel %+v, want not replaying, cursor %d", ps, c.TargetSeq)
	}
	if _, err := f.svc.Cancel(ctx, rs[0].ID); err == nil {
		t.Fatal("cancelled twice")
	}
}

func TestReplaySince(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	acme := f.seqs["acme"]
	f.dispatch(t, "acme", "postgres", acme[len(acme)-1])
	rs, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", From: time.Now().Add(-time.Hour)})
	if err != nil || rs[0].FromSeq != acme[0] {
		t.Fatalf("since an hour: %+v %v", rs, err)
	}
	if _, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", From: time.Now().Add(time.Hour)}); !errors.Is(err, replay.ErrNothing) {
		t.Fatalf("from the future: %v", err)
	}
}

func TestReplayErrorsAreClear(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	acme := f.seqs["acme"]
	f.dispatch(t, "acme", "postgres", acme[3])
	if _, err := f.store.EnsureTenant(ctx, "newbie"); err != nil {
		t.Fatal(err)
	}
	if err := f.stream.Purge(ctx, jetstream.WithPurgeSequence(5)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		req  replay.Request
		want error
		text string
	}{
		{"unknown tenant", replay.Request{Tenant: "ghost", Dest: "postgres", FromSeq: 5}, replay.ErrUnknownTenant, "ghost"},
		{"no destinations", replay.Request{Tenant: "newbie", Dest: "postgres", FromSeq: 5}, replay.ErrUnknownDest, "no destinations"},
		{"unknown destination", replay.Request{Tenant: "acme", Dest: "s3", FromSeq: 5}, replay.ErrUnknownDest, "it has: postgres"},
		{"too old", replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: 2}, replay.ErrTooOld, "oldest event is sequence 5"},
		{"nothing dispatched yet", replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[8]}, replay.ErrNothing, "cursor is at"},
	}
	for _, c := range cases {
		_, err := f.svc.Start(ctx, c.req)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %v mentioning %q", c.name, err, c.want, c.text)
		}
	}
	if _, err := f.svc.Start(ctx, replay.Request{Tenant: "Bad.Id", Dest: "postgres", FromSeq: 5}); !errors.Is(err, events.ErrInvalidTenant) {
		t.Errorf("invalid tenant id: %v", err)
	}
}
