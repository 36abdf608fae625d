package demo

import (
	"context"
	"errors"
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
