package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Metrics are the ingest service's Prometheus collectors. Tenants are not a
// label: 10,000 tenants must not become 10,000 series here.
type Metrics struct {
	Events          *prometheus.CounterVec   // result = accepted | duplicate | rejected | failed
	Requests        *prometheus.CounterVec   // route, code
	PublishLatency  prometheus.Histogram     // seconds from first publish to last ack of a request
	RequestLatency  *prometheus.HistogramVec // route
	ImportRows      *prometheus.CounterVec   // result
	ImportsRunning  prometheus.Gauge
	QuotaRefusals   *prometheus.CounterVec // quota
	ImportQuotaWait prometheus.Counter     // seconds
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
		QuotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairway_ingest_quota_refusals_total",
			Help: "Events requests refused by a tenant's quota (429, or 413 over its burst), by quota: events_per_sec, bytes_per_sec, max_backlog.",
		}, []string{"quota"}),
		ImportQuotaWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairway_ingest_import_quota_wait_seconds_total",
			Help: "Time CSV imports spent waiting for their tenants' quotas.",
		}),
	}
	for _, k := range tenancy.QuotaKinds {
		m.QuotaRefusals.WithLabelValues(string(k))
	}
	for _, c := range []prometheus.Collector{m.Events, m.Requests, m.PublishLatency, m.RequestLatency, m.ImportRows, m.ImportsRunning,
		m.QuotaRefusals, m.ImportQuotaWait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
