package demo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// fakeSink refuses the records whose product id is "bad" and fails whole
// batches while failing is set.
type fakeSink struct{ failing bool }

func (f *fakeSink) Name() string { return "pg" }

func (f *fakeSink) Apply(_ context.Context, batch []sink.Record) ([]error, error) {
	if f.failing {
		return nil, errors.New("down")
	}
	errs := make([]error, len(batch))
	for i, r := range batch {
		if r.Event.ProductID == "bad" {
			errs[i] = &sink.PermanentError{Err: errors.New("bad")}
		}
	}
	return errs, nil
}

func TestTrackerCountsAppliedRecordsPerTenantAndDest(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	fs := &fakeSink{}
	s := tr.Wrap(fs)
	rec := func(tenant, id string) sink.Record {
		return sink.Record{Event: events.Event{Tenant: tenant, ProductID: id}, PublishedAt: time.Now()}
	}
	if _, err := s.Apply(t.Context(), []sink.Record{rec("a", "1"), rec("a", "bad"), rec("b", "2")}); err != nil {
		t.Fatal(err)
	}
	fs.failing = true
	if _, err := s.Apply(t.Context(), []sink.Record{rec("a", "3")}); err == nil {
		t.Fatal("want the batch error")
	}
	if got := tr.Applied("a", "pg"); got != 1 {
		t.Errorf("Applied(a) = %d, want 1", got)
	}
	if got := tr.Applied("b", "pg"); got != 1 {
		t.Errorf("Applied(b) = %d, want 1", got)
	}
	if got := tr.Total("pg"); got != 2 {
		t.Errorf("Total(pg) = %d, want 2", got)
	}
	if got := tr.Total("clickhouse"); got != 0 {
		t.Errorf("Total(clickhouse) = %d, want 0", got)
	}
}

// TestWaitSettled: the summary waits for stored events still on their
// way, and says how many a destination had not applied when it gave up.
func TestWaitSettled(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	pg := tr.Wrap(&fakeSink{})
	cfg := Config{Tracker: tr, Dests: []string{"pg"}}
	a := &tenantStats{name: "a", accepted: 2}
	rec := sink.Record{Event: events.Event{Tenant: "a", ProductID: "1"}, PublishedAt: time.Now()}
	if _, err := pg.Apply(t.Context(), []sink.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if got := pending(cfg, []*tenantStats{a}); got["pg"] != 1 {
		t.Fatalf("pending = %v, want pg: 1", got)
	}
	start := time.Now()
	if waitSettled(t.Context(), cfg, []*tenantStats{a}, 50*time.Millisecond, func() {}) { // gives up
		t.Error("waitSettled reported an event not applied as settled")
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("waitSettled returned before its limit with an event not applied")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = pg.Apply(context.Background(), []sink.Record{rec})
	}()
	if !waitSettled(t.Context(), cfg, []*tenantStats{a}, time.Minute, func() {}) { // the event arrives
		t.Error("waitSettled did not report the settled event")
	}
	if got := pending(cfg, []*tenantStats{a}); len(got) != 0 {
		t.Fatalf("pending after settling = %v, want none", got)
	}
	var out strings.Builder
	cfg.Out = &out
	summary(t.Context(), cfg, time.Second, "--duration 1s passed", &tenantStats{name: "noisy"}, []*tenantStats{{name: "b", accepted: 3}})
	if !strings.Contains(out.String(), "3 stored events not applied yet") || !strings.Contains(out.String(), "(stopped: --duration 1s passed)") {
		t.Errorf("summary does not say what is still on its way:\n%s", out.String())
	}
}
