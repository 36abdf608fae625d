package status_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestRowsExplainWhyWorkWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, nc, js := setupServers(t, events.StreamConfig{})
	pub, _ := events.NewPublisher(js)
	var evs []events.Event
	for i, tenant := range []string{"acme", "acme", "acme", "busy", "sleepy", "open", "again", "again", "paced", "paced", "paced", "reset", "reset"} {
		evs = append(evs, events.Event{Tenant: tenant, ProductID: fmt.Sprint(i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`)})
	}
	// open: one high and one bulk event too, counted from their own
	// cursors.
	for _, p := range []events.Priority{events.PriorityHigh, events.PriorityBulk} {
		evs = append(evs, events.Event{Tenant: "open", ProductID: "o-" + string(p), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`), Priority: p})
	}
	for _, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// acme: 3 events, cursor past the first → backlog 2, its one slot held.
	if _, err := st.Dispatch(ctx, "acme", "postgres", "d1", 1, 1); err != nil {
		t.Fatal(err)
	}
	// busy: backlog 1, limit 0. sleepy: paused. open: backlog, free slot.
	// quiet: nothing at all. done: slot held, nothing left.
	for _, tn := range []string{"busy", "sleepy", "open", "quiet"} {
		if _, err := st.Cursor(ctx, tn, "postgres"); err != nil {
			t.Fatal(err)
		}
	}
	// again: both events dispatched, then a replay rewinds to the first.
	again, err := st.Cursor(ctx, "again", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Dispatch(ctx, "again", "postgres", "d1", again, 8); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "again", "postgres", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Rewind(ctx, tenancy.Rewind{Tenant: "again", Dest: "postgres", From: 7}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "busy", "postgres", 0); err != nil {
		t.Fatal(err)
	}
	// paced: 3 events behind a rate of 1 a second, slots free.
	if _, err := st.Cursor(ctx, "paced", "postgres"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDestRate(ctx, "paced", "postgres", 1); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, "sleepy", true); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "done", "clickhouse", "s1"); err != nil {
		t.Fatal(err)
	}
	// reset: a cursor past the stream's end, held by the stream check. Its
	// backlog is its 2 events in the stream, which a reset of the cursor to
	// the stream's first event dispatches, not the none past the cursor.
	if err := st.SetCursor(ctx, "reset", "postgres", 100); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CheckStream(ctx, func(ctx context.Context) (tenancy.StreamPosition, error) {
		info, err := stream.Info(ctx)
		if err != nil {
			return tenancy.StreamPosition{}, err
		}
		return tenancy.StreamPosition{Name: info.Config.Name, Created: info.Created, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, "dlq.postgres.acme", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}

	src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js}
	rows, err := src.Rows(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]status.Row{}
	for _, r := range rows {
		got[r.Tenant+"/"+r.Dest] = r
	}
	want := map[string]struct {
		backlog     uint64
		reason      string
		deadLetters uint64
	}{
		"acme/postgres":   {2, status.ReasonAtLimit, 2},
		"busy/postgres":   {1, status.ReasonLimitZero, 0},
		"sleepy/postgres": {1, status.ReasonPaused, 0},
		"open/postgres":   {3, status.ReasonDispatching, 0},
		"quiet/postgres":  {0, status.ReasonIdle, 0},
		"done/clickhouse": {0, status.ReasonApplying, 0},
		"again/postgres":  {0, status.ReasonReplaying, 0},
		"paced/postgres":  {3, status.ReasonRateLimited, 0},
		"reset/postgres":  {2, status.ReasonStreamReset, 0},
	}
	for k, w := range want {
		r, ok := got[k]
		if !ok || r.Backlog != w.backlog || r.Reason != w.reason || r.DeadLetters != w.deadLetters {
			t.Errorf("%s = %+v, want backlog %d reason %q dead letters %d", k, r, w.backlog, w.reason, w.deadLetters)
		}
	}
	if a := got["acme/postgres"]; a.OldestAge <= 0 || a.InUse != 1 || a.Limit != 1 {
		t.Errorf("acme row %+v", a)
	}
	if r := got["again/postgres"]; !r.Replaying || r.ReplayLeft != 2 || r.ReplaySlots != 1 || r.InUse != 1 {
		t.Errorf("again row %+v: want its replay's 2 events left in 1 replay slot, its live batch held", r)
	}
	if r := got["reset/postgres"]; !strings.Contains(r.WaitDetail, "cursor 100 is past the end of stream PRODUCTS") {
		t.Errorf("reset row %+v: the detail does not say why", r)
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}
	one, err := src.Rows(ctx, "acme")
	if err != nil || len(one) != 1 || one[0].DeadLetters != 2 {
		t.Fatalf("one tenant: %+v %v", one, err)
	}
}

// A pair whose oldest waiting event has less than a quarter of PRODUCTS'
// MaxAge left is Expiring, with the time left; one with more is not; with
// no MaxAge nothing expires.
func TestRowsWarnBeforeMaxAgeDropsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, nc, js := setupServers(t, events.StreamConfig{MaxAge: time.Hour})
	pub, _ := events.NewPublisher(js)
	r := pub.Publish(ctx, []events.Event{{Tenant: "held", ProductID: "p", Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)}})
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if _, err := st.Cursor(ctx, "held", "postgres"); err != nil {
		t.Fatal(err)
	}
	rowAt := func(src *status.Source, later time.Duration) status.Row {
		t.Helper()
		src.Now = func() time.Time { return time.Now().Add(later) }
		rows, err := src.Rows(ctx, "held")
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %v, err %v", rows, err)
		}
		return rows[0]
	}
	src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js}
	if row := rowAt(src, 30*time.Minute); row.Expiring || row.ExpiresIn < 29*time.Minute || row.ExpiresIn > 31*time.Minute {
		t.Errorf("half of MaxAge old: expiring %v in %v; want not expiring, in about 30m", row.Expiring, row.ExpiresIn)
	}
	if row := rowAt(src, 50*time.Minute); !row.Expiring || row.ExpiresIn < 9*time.Minute || row.ExpiresIn > 11*time.Minute {
		t.Errorf("50 minutes old: expiring %v in %v; want expiring, in about 10m", row.Expiring, row.ExpiresIn)
	}
	if row := rowAt(&status.Source{Pairs: st, Reader: work.NewReader(nc, "")}, 50*time.Minute); row.Expiring || row.ExpiresIn != 0 {
		t.Errorf("without the stream's MaxAge: expiring %v in %v; want neither", row.Expiring, row.ExpiresIn)
	}
}

// setupServers migrates a fresh database and starts a NATS server with
// stream PRODUCTS as c says.
func setupServers(t *testing.T, c events.StreamConfig) (*tenancy.Store, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	return st, nc, js
}
