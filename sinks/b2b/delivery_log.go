package b2b

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the delivery log (Config).
const (
	// DeliveryLogKeepDefault is how many of the newest delivery log rows
	// are kept per tenant and partner.
	DeliveryLogKeepDefault = 1000
	// DeliveryLogBufferDefault is how many rows wait, at most, to be
	// written.
	DeliveryLogBufferDefault = 4096
	// deliveryLogFlushMax bounds the rows of one write.
	deliveryLogFlushMax = 1000
	// deliveryLogWriteTimeout bounds one write.
	deliveryLogWriteTimeout = 10 * time.Second
	// deliveryLogErrorMax bounds the error text of one row.
	deliveryLogErrorMax = 1024
)

// deliveryLog writes the sink's request attempts to
// fairway.partner_deliveries in the background: add never blocks (a row
// that finds the buffer full is dropped and counted), and one goroutine
// writes what has queued in one statement, then trims each (tenant,
// partner) it wrote to its newest keep rows. Under load the writes grow
// instead of multiplying.
type deliveryLog struct {
	pool    *pgxpool.Pool
	keep    int
	log     *slog.Logger
	rows    chan Delivery
	dropped *prometheus.CounterVec
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

func newDeliveryLog(pool *pgxpool.Pool, keep, buffer int, log *slog.Logger, dropped *prometheus.CounterVec) *deliveryLog {
	l := &deliveryLog{pool: pool, keep: keep, log: log, rows: make(chan Delivery, buffer), dropped: dropped,
		stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// add queues d without waiting.
func (l *deliveryLog) add(d Delivery) {
	if len(d.Error) > deliveryLogErrorMax {
		d.Error = d.Error[:deliveryLogErrorMax]
	}
	select {
	case l.rows <- d:
	default:
		l.dropped.WithLabelValues("full").Inc()
	}
}

// close writes what is queued, waiting at most until ctx ends. Rows
// added afterwards are not written.
func (l *deliveryLog) close(ctx context.Context) {
	l.stopped.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-ctx.Done():
	}
}

func (l *deliveryLog) run() {
	defer close(l.done)
	batch := make([]Delivery, 0, deliveryLogFlushMax)
	for {
		select {
		case d := <-l.rows:
			batch = append(batch[:0], d)
		case <-l.stop:
			l.drain(batch[:0])
			return
		}
		l.flush(l.take(batch))
	}
}

// take adds to batch what is queued, up to deliveryLogFlushMax rows.
func (l *deliveryLog) take(batch []Delivery) []Delivery {
	for len(batch) < deliveryLogFlushMax {
		select {
		case d := <-l.rows:
			batch = append(batch, d)
		default:
			return batch
		}
	}
	return batch
}

// drain writes everything queued.
func (l *deliveryLog) drain(batch []Delivery) {
	for {
		batch = l.take(batch[:0])
		if len(batch) == 0 {
			return
		}
		l.flush(batch)
	}
}

func (l *deliveryLog) flush(batch []Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), deliveryLogWriteTimeout)
	defer cancel()
	if err := l.write(ctx, batch); err != nil {
		l.dropped.WithLabelValues("failed").Add(float64(len(batch)))
		l.log.Warn("b2b delivery log not written", "rows", len(batch), "err", err)
	}
}

// write inserts batch (rows of partners removed meanwhile are left out)
// and trims the log of every (tenant, partner) in it.
func (l *deliveryLog) write(ctx context.Context, batch []Delivery) error {
	n := len(batch)
	tenants, partners, webhookIDs, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	evs, statuses := make([]int32, n), make([]int32, n)
	latencies := make([]int64, n)
	for i, d := range batch {
		tenants[i], partners[i], webhookIDs[i], errs[i] = d.Tenant, d.Partner, d.WebhookID, d.Error
		ats[i], evs[i], statuses[i], latencies[i] = d.At, int32(d.Events), int32(d.Status), d.Latency.Microseconds()
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO fairway.partner_deliveries (tenant_id, partner, at, webhook_id, events, status, latency_us, error)
			SELECT r.tenant_id, r.partner, r.at, r.webhook_id, r.events, r.status, r.latency_us, r.error
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::int[], $6::int[], $7::bigint[], $8::text[])
				WITH ORDINALITY AS r(tenant_id, partner, at, webhook_id, events, status, latency_us, error, ord)
			WHERE EXISTS (SELECT 1 FROM fairway.partners p WHERE p.tenant_id = r.tenant_id AND p.partner = r.partner)
			ORDER BY r.ord`,
			tenants, partners, ats, webhookIDs, evs, statuses, latencies, errs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM fairway.partner_deliveries d USING (
				SELECT t, p, (SELECT id FROM fairway.partner_deliveries x WHERE x.tenant_id = t AND x.partner = p
					ORDER BY id DESC OFFSET $3 LIMIT 1) AS cut
				FROM (SELECT DISTINCT t, p FROM unnest($1::text[], $2::text[]) AS u(t, p)) pairs
			) c
			WHERE d.tenant_id = c.t AND d.partner = c.p AND d.id <= c.cut`, tenants, partners, l.keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("b2b: delivery log: %w", err)
	}
	return nil
}
