package clickhouse

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sink's own (Config.Registerer); the runtime's are
// fairway_sink_* by destination.
type metrics struct {
	insertRows prometheus.Histogram
	heldRounds prometheus.Counter
}

func newMetrics() metrics {
	return metrics{
		insertRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fairway_sink_clickhouse_insert_rows",
			Help:    "Rows (events into product_events) per insert round: every round is a part per table that ClickHouse merges again and again, so fewer, bigger rounds cost it less.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 … 65,536
		}),
		heldRounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairway_sink_clickhouse_held_rounds_total",
			Help: "Insert rounds held back to fill while only caught-up tenants' items waited (FillRows, FillWait).",
		}),
	}
}

func (m metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.insertRows), r.Register(m.heldRounds))
}
