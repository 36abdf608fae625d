package runner

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Item outcomes, the "outcome" label of fairway_sink_items_total and
// fairway_sink_item_seconds.
const (
	outcomeDone       = "done"        // applied (perhaps with dead letters), released, acked
	outcomeFenced     = "fenced"      // lease stale while retrying: acked, left to the newer lease
	outcomeHandedBack = "handed_back" // nak: shutdown or a failure to finish
	outcomeTerminated = "terminated"  // malformed item
)

// endToEndBuckets are the buckets of the end-to-end latency histograms:
// 5ms to about 12 minutes.
var endToEndBuckets = prometheus.ExponentialBuckets(0.005, 2.5, 14)

// metrics are one destination's sink metrics. The registry is injected;
// several runners (tests) register on different registries, or on one when
// their destinations differ.
type metrics struct {
	applied     prometheus.Counter
	items       *prometheus.CounterVec
	itemSeconds prometheus.ObserverVec
	retries     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	endToEnd    prometheus.Observer
	// tenantEndToEnd is the same by tenant, its label bounded
	// (tenantLatency).
	tenantEndToEnd *prometheus.HistogramVec
	inFlight       prometheus.Gauge
	staleLeases    prometheus.Counter
	readEvents     *prometheus.CounterVec // mode (bare, headers), replay
}

func newMetrics(reg prometheus.Registerer, dest string) (*metrics, error) {
	l := prometheus.Labels{"dest": dest}
	m := &metrics{}
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_applied_events_total", Help: "Events applied to the destination (superseded within a batch included).",
	}, []string{"dest"})
	items := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_items_total", Help: "Work items finished, by outcome (done, fenced, handed_back, terminated).",
	}, []string{"dest", "outcome"})
	itemSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fairway_sink_item_seconds", Help: "Time from fetching a work item to its ack or nak (batch latency).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
	}, []string{"dest", "outcome"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_retries_total", Help: "Apply attempts retried, by class of the failure.",
	}, []string{"dest", "class"})
	deadLetters := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_dead_letters_total", Help: "Events (or lost ranges) put in the dead-letter stream, by class.",
	}, []string{"dest", "class"})
	endToEnd := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fairway_sink_end_to_end_seconds", Help: "Time from the event's store in PRODUCTS to its apply.",
		Buckets: endToEndBuckets,
	}, []string{"dest"})
	tenantEndToEnd := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fairway_sink_tenant_end_to_end_seconds",
		Help:    "Time from the event's store in PRODUCTS to its apply, for the top-K tenants by events applied in the last minute; tenant=\"other\" holds the rest.",
		Buckets: endToEndBuckets,
	}, []string{"dest", "tenant"})
	inFlight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fairway_sink_in_flight_items", Help: "Work items held by this process (reading, applying or finishing).",
	}, []string{"dest"})
	stale := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_stale_leases_total", Help: "Leases found fenced out (re-dispatched) on extend or release.",
	}, []string{"dest"})
	readEvents := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairway_sink_read_events_total",
		Help: "Events of work items, by how they were read (carried: in the item itself, nothing read from PRODUCTS; bare: from PRODUCTS, bodies only, the item carried their store times; headers: from PRODUCTS with the server's six headers) and whether the item was a replay.",
	}, []string{"dest", "mode", "replay"})
	for _, c := range []prometheus.Collector{applied, items, itemSeconds, retries, deadLetters, endToEnd, tenantEndToEnd, inFlight, stale, readEvents} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			switch v := are.ExistingCollector.(type) { // a second runner on the registry
			case *prometheus.CounterVec:
				switch c {
				case applied:
					applied = v
				case items:
					items = v
				case retries:
					retries = v
				case deadLetters:
					deadLetters = v
				case stale:
					stale = v
				case readEvents:
					readEvents = v
				}
			case *prometheus.HistogramVec:
				switch c {
				case itemSeconds:
					itemSeconds = v
				case endToEnd:
					endToEnd = v
				case tenantEndToEnd:
					tenantEndToEnd = v
				}
			case *prometheus.GaugeVec:
				inFlight = v
			}
		}
	}
	m.applied = applied.With(l)
	m.items = items.MustCurryWith(l)
	m.itemSeconds = itemSeconds.MustCurryWith(l)
	m.retries = retries.MustCurryWith(l)
	m.deadLetters = deadLetters.MustCurryWith(l)
	m.endToEnd = endToEnd.With(l)
	m.tenantEndToEnd = tenantEndToEnd
	m.inFlight = inFlight.With(l)
	m.staleLeases = stale.With(l)
	m.readEvents = readEvents.MustCurryWith(l)
	return m, nil
}
