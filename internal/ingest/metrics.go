package ingest

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the ingest service's Prometheus collectors. Tenants are not a
// label: 10,000 tenants must not become 10,000 series here.
type Metrics struct {
	Events         *prometheus.CounterVec   // result = accepted | duplicate | rejected | failed
	Requests       *prometheus.CounterVec   // route, code
	PublishLatency prometheus.Histogram     // seconds from first publish to last ack of a request
	RequestLatency *prometheus.HistogramVec // route
	ImportRows     *prometheus.CounterVec   // result
	ImportsRunning prometheus.Gauge
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairway_ingest_events_total",
			Help: "Events received by ingest, by result: accepted (stored), duplicate (already stored within the dedup window), rejected (invalid), failed (JetStream did not acknowledge).",
		}, []string{"result"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairway_ingest_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		PublishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fairway_ingest_publish_seconds",
			Help:    "Time from the first publish of a request's events to the last JetStream acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		RequestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairway_ingest_request_seconds",
			Help:    "HTTP request duration by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		ImportRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairway_ingest_import_rows_total",
			Help: "CSV import rows by result: accepted, duplicate, rejected.",
		}, []string{"result"}),
		ImportsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fairway_ingest_imports_running",
			Help: "CSV imports running on this node.",
		}),
	}
	for _, c := range []prometheus.Collector{m.Events, m.Requests, m.PublishLatency, m.RequestLatency, m.ImportRows, m.ImportsRunning} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
