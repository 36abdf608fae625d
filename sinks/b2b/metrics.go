package b2b

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the B2B sink's own (Config.Registerer, docs/metrics.md),
// labelled with the destination so that several sinks can share a
// registry; the runtime's are fairway_sink_* by destination.
type metrics struct {
	filtered        prometheus.Counter
	transformErrors prometheus.Counter
	logDropped      *prometheus.CounterVec
	paced           prometheus.Counter
}

func newMetrics(dest string) metrics {
	labels := prometheus.Labels{"dest": dest}
	return metrics{
		filtered: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fairway_sink_b2b_filtered_events_total",
			Help:        "Events a partner's filter dropped: acknowledged without being sent.",
			ConstLabels: labels,
		}),
		transformErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fairway_sink_b2b_transform_errors_total",
			Help:        "Events a partner's filter or map failed on: dead-lettered as permanent with the expression's error.",
			ConstLabels: labels,
		}),
		logDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fairway_sink_b2b_delivery_log_dropped_total",
			Help:        "Delivery log rows not written: reason=full (the buffer was full; deliveries never wait for the log) or failed (the write failed).",
			ConstLabels: labels,
		}, []string{"reason"}),
		paced: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fairway_sink_b2b_rate_wait_seconds_total",
			Help:        "Time requests waited for a partner's declared request rate (fairway partners set-rate).",
			ConstLabels: labels,
		}),
	}
}

func (m metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.filtered), r.Register(m.transformErrors), r.Register(m.logDropped), r.Register(m.paced))
}
