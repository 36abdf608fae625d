package b2b

import "github.com/prometheus/client_golang/prometheus/testutil"

// Filtered returns fairway_sink_b2b_filtered_events_total.
func (s *Sink) Filtered() float64 { return testutil.ToFloat64(s.m.filtered) }

// TransformErrors returns fairway_sink_b2b_transform_errors_total.
func (s *Sink) TransformErrors() float64 { return testutil.ToFloat64(s.m.transformErrors) }

// LogDropped returns fairway_sink_b2b_delivery_log_dropped_total{reason}.
func (s *Sink) LogDropped(reason string) float64 {
	return testutil.ToFloat64(s.m.logDropped.WithLabelValues(reason))
}

// BenchTransform is the typical transform of the benchmarks.
var BenchTransform = benchTransform

// CatalogPayload is the benchmarks' payload of the i-th product.
var CatalogPayload = catalogPayload
