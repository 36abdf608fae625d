package b2b_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// singles returns n one-event batches for distinct products.
func singles(n int) [][]sink.Record {
	out := make([][]sink.Record, n)
	for i := range out {
		out[i] = sinktest.Records(sinktest.Upsert("acme", string(rune('a'+i)), 1))
		out[i][0].Seq = uint64(i + 1)
	}
	return out
}

// Every request attempt is logged: time, webhook-id, events, status,
// latency, error, and how many earlier attempts of the same events the
// log holds; DeliveryStats sums a partner up.
func TestDeliveryLogRecordsAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
	name := strings.TrimPrefix(s.Name(), "b2b:")
	batch := sinktest.Records(sinktest.Upsert("acme", "p1", 1), sinktest.Upsert("acme", "p2", 1))
	rcv.FailNext(1, b2btest.Failure{Status: 503, Body: []byte("busy")})
	if err := batchErr(t, s, batch); !strings.Contains(err.Error(), "503") {
		t.Fatalf("first attempt: %v", err)
	}
	mustApply(t, s, batch)
	s.Close() // writes the queued rows
	got, err := e.reg.Deliveries(ctx(t), "acme", name, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("deliveries = %+v; want 2 attempts", got)
	}
	ok, failed := got[0], got[1]
	if !ok.OK() || ok.Status != 200 || ok.Error != "" || ok.Retries != 1 || ok.Events != 2 || ok.Latency <= 0 || !ok.At.Equal(e.clock.Now()) {
		t.Errorf("newest attempt %+v; want 200, 2 events, a latency, retry 1", ok)
	}
	if failed.OK() || failed.Status != 503 || !strings.Contains(failed.Error, "busy") || failed.Retries != 0 || failed.Events != 2 {
		t.Errorf("first attempt %+v; want 503 with the partner's answer, retry 0", failed)
	}
	if ok.WebhookID != failed.WebhookID || ok.WebhookID != rcv.Requests()[1].Header.Get("webhook-id") {
		t.Errorf("webhook ids %q, %q; want the request's, the same on the retry", ok.WebhookID, failed.WebhookID)
	}
	stats, err := e.reg.DeliveryStats(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	var st b2b.DeliveryStats
	for _, x := range stats {
		if x.Partner == name {
			st = x
		}
	}
	if st.Attempts != 2 || st.Succeeded != 1 || st.SuccessRate() != 0.5 || !strings.Contains(st.LastError, "503") || st.LastErrorAt.IsZero() ||
		st.LastFailed {
		t.Fatalf("stats %+v; want 2 attempts, 1 succeeded, the 503 as last error, the newest attempt accepted", st)
	}
}

// DeliveryStats says whether the newest attempt failed, whatever came
// before it.
func TestDeliveryStatsLastFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
	name := strings.TrimPrefix(s.Name(), "b2b:")
	b := singles(2)
	mustApply(t, s, b[0])
	rcv.FailNext(1, b2btest.Failure{Status: 500})
	_ = batchErr(t, s, b[1])
	s.Close()
	stats, err := e.reg.DeliveryStats(ctx(t), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Partner != name || !stats[0].LastFailed || stats[0].Attempts != 2 || !strings.Contains(stats[0].LastError, "500") {
		t.Fatalf("stats %+v; want %s with 2 attempts, the newest failed with 500", stats, name)
	}
}

// The log keeps the newest DeliveryLogKeep attempts per partner.
func TestDeliveryLogKeepsTheNewest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, _ := e.simple(t, b2b.Partner{}, b2b.Config{DeliveryLogKeep: 3})
	name := strings.TrimPrefix(s.Name(), "b2b:")
	for _, b := range singles(5) {
		mustApply(t, s, b)
	}
	s.Close()
	got, err := e.reg.Deliveries(ctx(t), "acme", name, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("log holds %d rows; want the newest 3", len(got))
	}
	var n int
	if err := e.pool.QueryRow(ctx(t), `SELECT count(*) FROM fairway.partner_deliveries WHERE partner = $1`, name).Scan(&n); err != nil || n != 3 {
		t.Fatalf("table holds %d rows (%v); want 3", n, err)
	}
}

// A database that does not take the log holds no delivery: rows that
// find the buffer full are dropped and counted, the others are written
// once it answers.
func TestDeliveryLogNeverHoldsDelivery(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tx, err := e.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(context.Background(), `LOCK TABLE fairway.partner_deliveries IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{DeliveryLogBuffer: 1})
	name := strings.TrimPrefix(s.Name(), "b2b:")
	start := time.Now()
	for _, b := range singles(5) {
		mustApply(t, s, b)
	}
	if took := time.Since(start); took > 5*time.Second || rcv.OK() != 5 {
		t.Fatalf("5 deliveries took %s with %d accepted while the log could not be written", took, rcv.OK())
	}
	dropped := s.LogDropped("full")
	if dropped < 3 {
		t.Fatalf("dropped %v rows; want at least 3 of 5 with one row writing and a buffer of 1", dropped)
	}
	if err := tx.Rollback(context.Background()); err != nil && err != pgx.ErrTxClosed {
		t.Fatal(err)
	}
	s.Close()
	got, err := e.reg.Deliveries(ctx(t), "acme", name, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got)+int(dropped) != 5 {
		t.Fatalf("log holds %d rows and %v were dropped; want 5 in all", len(got), dropped)
	}
}
