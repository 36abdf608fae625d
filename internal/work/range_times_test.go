package work_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// RangeTimes gives every event of a dense range the store time, to the
// millisecond, that a read with headers gives it, from a request per
// millisecond boundary; a range spanning more milliseconds than allowed
// gets none; a range that is not stored is an error.
func TestRangeTimes(t *testing.T) {
	t.Parallel()
	nc, _, pub := products(t)
	ctx := context.Background()
	// Bursts a few milliseconds apart, so that the range spans several
	// milliseconds and several events share each.
	var seqs []uint64
	for b := range 6 {
		evs := make([]events.Event, 50)
		for i := range evs {
			evs[i] = events.Event{Tenant: "acme", ProductID: fmt.Sprintf("p%d-%d", b, i), Version: 1, Op: events.OpUpsert,
				OccurredAt: time.Now(), Payload: []byte(`{}`)}
		}
		for _, r := range pub.Publish(ctx, evs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			seqs = append(seqs, r.Seq)
		}
		time.Sleep(3 * time.Millisecond)
	}
	from, to := seqs[0], seqs[len(seqs)-1]
	rd := work.NewReader(nc, "")
	b, err := rd.Next(ctx, "acme", from, 0, work.ReadOptions{Max: len(seqs), NoData: true})
	if err != nil || len(b.Msgs) != len(seqs) {
		t.Fatalf("read %d events, %v", len(b.Msgs), err)
	}
	span := int(b.Msgs[len(b.Msgs)-1].Time.UnixMilli() - b.Msgs[0].Time.UnixMilli())
	if span < 5 {
		t.Fatalf("the events span %d ms, want at least 5 (six bursts 3 ms apart)", span)
	}

	// Whole range, and a part starting and ending inside bursts.
	for _, r := range [][2]int{{0, len(seqs) - 1}, {25, 230}} {
		got, err := rd.RangeTimes(ctx, seqs[r[0]], seqs[r[1]], 10_000)
		if err != nil || got == nil {
			t.Fatalf("RangeTimes(%d..%d): %v, %v", seqs[r[0]], seqs[r[1]], got, err)
		}
		if len(got.OffsetsMs) != r[1]-r[0]+1 {
			t.Fatalf("RangeTimes(%d..%d): %d times", seqs[r[0]], seqs[r[1]], len(got.OffsetsMs))
		}
		for i, m := range b.Msgs[r[0] : r[1]+1] {
			if want := time.UnixMilli(m.Time.UnixMilli()); !got.At(i).Equal(want) {
				t.Fatalf("event %d (seq %d): time %v, stored %v", i, m.Seq, got.At(i), want)
			}
		}
	}
	if got, err := rd.RangeTimes(ctx, from, to, span-1); err != nil || got != nil {
		t.Fatalf("a range spanning %d ms with at most %d allowed: %v, %v; want none", span, span-1, got, err)
	}
	if _, err := rd.RangeTimes(ctx, from, to+5, 10_000); !errors.Is(err, work.ErrStreamRead) {
		t.Fatalf("a range past the stream's end: %v, want ErrStreamRead", err)
	}
	if got := work.RangeTimesSpan(2000); got != 64 {
		t.Fatalf("RangeTimesSpan(2000) = %d, want 64", got)
	}
	if got := work.RangeTimesSpan(160); got != 10 {
		t.Fatalf("RangeTimesSpan(160) = %d, want 10", got)
	}
}

// FirstOn finds the first message at or after a sequence on a subject
// filter, skipping other subjects' messages, and none past the last.
func TestFirstOn(t *testing.T) {
	t.Parallel()
	nc, _, pub := products(t)
	ctx := context.Background()
	seqs := map[string][]uint64{}
	for i := range 6 {
		tenant := []string{"acme", "globex"}[i%2]
		r := pub.Publish(ctx, []events.Event{{Tenant: tenant, ProductID: fmt.Sprintf("p%d", i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`)}})
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
		seqs[tenant] = append(seqs[tenant], r[0].Seq)
	}
	rd := work.NewReader(nc, "")
	subj, err := rd.TenantSubjects(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := rd.FirstOn(ctx, subj, seqs["globex"][0]); err != nil || !ok || got != seqs["acme"][1] {
		t.Errorf("FirstOn(%s, %d) = %d, %v, %v; want acme's second event, %d", subj, seqs["globex"][0], got, ok, err, seqs["acme"][1])
	}
	if got, ok, err := rd.FirstOn(ctx, subj, seqs["acme"][2]+1); err != nil || ok {
		t.Errorf("FirstOn(%s, past acme's last) = %d, %v, %v; want none", subj, got, ok, err)
	}
}
