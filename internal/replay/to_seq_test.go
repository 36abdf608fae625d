package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/replay"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestReplayToSeq(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	acme := f.seqs["acme"] // 20 events
	last := acme[len(acme)-1]
	f.dispatch(t, "acme", "postgres", last)

	rs, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[2], ToSeq: acme[9]})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Total != 8 || r.ToSeq != acme[9] || r.End() != acme[9]+1 || r.TargetSeq != last+1 {
		t.Fatalf("replay %+v, want 8 events %d..%d", r, acme[2], acme[9])
	}
	if ps := f.pair(t, "acme", "postgres"); ps.ReplayUntil != acme[9]+1 || ps.NextSeq != last+1 {
		t.Fatalf("pair %+v, want the replay to end after %d and the cursor at %d", ps, acme[9], last+1)
	}
	f.dispatchReplay(t, "acme", "postgres", acme[5])
	if got, _ := f.svc.Get(ctx, r.ID); got.Done != 4 || got.State != replay.StateRunning {
		t.Fatalf("progress %+v, want 4 of 8", got)
	}
	// No batch of the replay reaches past its end.
	ps := f.pair(t, "acme", "postgres")
	if _, err := f.store.DispatchReplay(ctx, "acme", "postgres", "test", ps.ReplayNext, []tenancy.Range{{From: ps.ReplayNext, To: acme[11]}}); !errors.Is(err, tenancy.ErrCursorMoved) {
		t.Fatalf("a replay batch past the end: %v, want ErrCursorMoved", err)
	}
	f.dispatchReplay(t, "acme", "postgres", acme[9])
	if got, _ := f.svc.Get(ctx, r.ID); got.State != replay.StateDone || got.Done != 8 {
		t.Fatalf("after the end: %+v", got)
	}
	if ps := f.pair(t, "acme", "postgres"); ps.Replaying() || ps.NextSeq != last+1 {
		t.Fatalf("pair after the replay %+v, want not replaying, cursor %d", ps, last+1)
	}
	out, _ := f.svc.List(ctx, "acme", false)
	if len(out) != 1 || out[0].ToSeq != acme[9] {
		t.Fatalf("listed %+v", out)
	}

	// Cancel ends a bounded replay.
	rs, err = f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[0], ToSeq: acme[3]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Cancel(ctx, rs[0].ID); err != nil {
		t.Fatal(err)
	}
	if ps := f.pair(t, "acme", "postgres"); ps.Replaying() || ps.NextSeq != last+1 {
		t.Fatalf("pair after cancel %+v, want not replaying, cursor %d", ps, last+1)
	}

	// An end at or past the cursor is no end; an end before the start is
	// refused.
	rs, err = f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[15], ToSeq: last + 100})
	if err != nil || rs[0].ToSeq != 0 || rs[0].Total != 5 {
		t.Fatalf("end past the cursor: %+v %v", rs, err)
	}
	if _, err := f.svc.Start(ctx, replay.Request{Tenant: "acme", Dest: "postgres", FromSeq: acme[5], ToSeq: acme[4]}); err == nil {
		t.Fatal("end before start accepted")
	}
}

// seqSink records every sequence it applies.
type seqSink struct {
	mu   sync.Mutex
	seen map[uint64]int
}

func (s *seqSink) Name() string { return tenancy.DestPostgres }

func (s *seqSink) Apply(_ context.Context, batch []sink.Record) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range batch {
		s.seen[r.Seq]++
	}
	return make([]error, len(batch)), nil
}

func (s *seqSink) counts() map[uint64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint64]int, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// TestReplayToSeqThroughThePipeline: the real dispatcher (batches of 5)
// and sink runner; a replay of 6..15 applies exactly those again, then the
// pipeline goes on with live events, skipping 16..30.
func TestReplayToSeqThroughThePipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, _ := tenancy.New(pool, nil)
	_, nc, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	s := &seqSink{seen: map[uint64]int{}}
	reg := prometheus.NewRegistry()
	d, err := dispatch.New(dispatch.Deps{Store: store, NATS: nc, Registry: reg},
		&dispatch.Config{Dests: []string{tenancy.DestPostgres}, BatchSize: 5, PollInterval: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(ctx, runner.Deps{JetStream: js, Sink: s, Leases: store, Registry: reg}, &runner.Config{FetchWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Go(func() { _ = d.Run(runCtx) })
	wg.Go(func() { _ = r.Run(runCtx) })

	pub, _ := events.NewPublisher(js)
	publish := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			res := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: fmt.Sprint(i), Version: 1, Op: events.OpUpsert,
				OccurredAt: time.Now(), Payload: []byte(`{}`)})
			if res.Err != nil || res.Seq != uint64(i) {
				t.Fatalf("publish %d: seq %d %v", i, res.Seq, res.Err)
			}
		}
	}
	want := map[uint64]int{}
	waitApplied := func(what string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, what, func() error {
			got := s.counts()
			ok := len(got) == len(want)
			for k, v := range want {
				ok = ok && got[k] >= v
			}
			if !ok {
				return fmt.Errorf("applied %v, want %v", got, want)
			}
			return nil
		})
	}
	publish(1, 30)
	for i := uint64(1); i <= 30; i++ {
		want[i] = 1
	}
	waitApplied("first pass")
	// Wait for the last release, so the cursor is at 31 when replaying.
	testenv.Eventually(t, time.Minute, "acme's postgres cursor at 31", func() error {
		if c, err := store.Cursor(ctx, "acme", tenancy.DestPostgres); err != nil || c != 31 {
			return fmt.Errorf("cursor %d (%v)", c, err)
		}
		return nil
	})
	svc := &replay.Service{Store: store, Pool: pool, JS: js, Reader: work.NewReader(nc, "")}
	rs, err := svc.Start(ctx, replay.Request{Tenant: "acme", Dest: tenancy.DestPostgres, FromSeq: 6, ToSeq: 15})
	if err != nil || rs[0].Total != 10 {
		t.Fatalf("start: %+v %v", rs, err)
	}
	for i := uint64(6); i <= 15; i++ {
		want[i] = 2
	}
	waitApplied("replay 6..15")
	publish(31, 32)
	want[31], want[32] = 1, 1
	waitApplied("live after the replay")
	got := s.counts()
	// Only the batch that holds 15 may reach past it: at most BatchSize-1
	// (4) events right after 15 may be applied a second time, none later.
	for i := uint64(16); i <= 19 && got[i] == 2; i++ {
		want[i] = 2
	}
	var wrong []string
	for i := uint64(1); i <= 32; i++ {
		if got[i] != want[i] {
			wrong = append(wrong, fmt.Sprintf("%d applied %d times, want %d", i, got[i], want[i]))
		}
	}
	if len(wrong) > 0 || len(got) != 32 {
		slices.Sort(wrong)
		t.Fatalf("after the replay: %v (all: %v)", wrong, got)
	}
	if rp, err := svc.Get(ctx, rs[0].ID); err != nil || rp.State != replay.StateDone {
		t.Fatalf("replay %+v %v, want done", rp, err)
	}
}
