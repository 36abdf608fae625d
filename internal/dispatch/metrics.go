package dispatch

import "github.com/prometheus/client_golang/prometheus"

// metrics are the dispatcher's Prometheus series. No tenant labels: tenant
// counts are unbounded.
type metrics struct {
	items         *prometheus.CounterVec   // dest
	grants        *prometheus.CounterVec   // dest, source: where a grant's sequences came from (index, read)
	events        *prometheus.CounterVec   // dest
	latency       *prometheus.HistogramVec // dest: oldest event's store time -> work item acked
	active        *prometheus.GaugeVec     // dest
	blocked       *prometheus.GaugeVec     // dest
	inFlight      *prometheus.GaugeVec     // dest
	wakeups       *prometheus.CounterVec   // source: doorbell, backfill, release, rescan, poll, cursor, members
	atLimit       *prometheus.CounterVec   // dest
	moved         *prometheus.CounterVec   // dest: lost a cursor race to another dispatcher
	recovered     *prometheus.CounterVec   // dest: orphans re-dispatched
	returned      *prometheus.CounterVec   // dest: batches handed back unpublished
	errors        *prometheus.CounterVec   // dest, op
	replayed      *prometheus.CounterVec   // dest: events dispatched again for a replay
	priorities    *prometheus.CounterVec   // dest, priority: events dispatched, by their priority
	throttled     *prometheus.CounterVec   // dest: grants a replay's rate held back
	rateLimited   *prometheus.CounterVec   // dest: grants a pair's dispatch rate held back
	backfillWaits *prometheus.CounterVec   // dest: grants held back for the start-up backfill to deliver a batch
	bodyWaits     *prometheus.CounterVec   // dest: grants held back for the refill to bring their bodies
	refilled      prometheus.Counter       // event bodies the refill read again
	read          *prometheus.CounterVec   // dest: events read from PRODUCTS to cut grants
	streamResets  *prometheus.CounterVec   // dest: pairs held because their cursor does not belong to the stream (stream_reset.go)
	behindStream  *prometheus.CounterVec   // dest: pairs found with backlog and a cursor behind the stream's first sequence
	pruned        prometheus.Counter       // batch-log rows deleted (Config.BatchLogRetention)
	scanSecond    prometheus.Histogram
	members       prometheus.Gauge     // dispatchers alive at the last heartbeat
	partitions    prometheus.Gauge     // partitions of PRODUCTS this dispatcher reads
	feeds         prometheus.Gauge     // replay feeds running
	bellPull      prometheus.Gauge     // the live doorbell's pull (paced_bell.go)
	bellSwitches  prometheus.Counter   // changes of that pull
	workWindow    *prometheus.GaugeVec // dest: items this dispatcher lets wait in WORK (work_window.go)
	workWaiting   *prometheus.GaugeVec // dest: this dispatcher's items waiting in WORK at the last look
	backfillQueue prometheus.Gauge     // partition backfills waiting their turn (backfillQueue)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "fairway", "dispatcher"
	m := &metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "items_total", Help: "Work items handed to stream WORK, by destination."}, []string{"dest"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "grants_total", Help: "Grants with events, by destination and where their sequence numbers came from: index (what the doorbell or backfill delivered), feed (what a replay feed delivered), dense (a replayed range known to hold only the tenant's events, cut without reading) or read (a direct get of PRODUCTS)."}, []string{"dest", "source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "events_total", Help: "Events covered by dispatched work items, by destination."}, []string{"dest"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name:    "dispatch_latency_seconds",
			Help:    "From when PRODUCTS stored a batch's oldest event to when its work item was acknowledged.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"dest"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "scheduler_active", Help: "Tenants with backlog waiting their turn."}, []string{"dest"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "scheduler_blocked", Help: "Tenants skipped: at their slot limit, or held back a moment (a replay's rate, a wait for the backfill or a first-sight load, an error)."}, []string{"dest"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "in_flight", Help: "Grants being dispatched right now."}, []string{"dest"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "wakeups_total", Help: "Wake-ups by source: doorbell (new events), backfill (backlog indexed at start), release (a slot freed), rescan (listener reconnected), poll, cursor (an operator moved a cursor: replay, cancel, cursor reset), weight (an operator changed a weight), partner (an operator added, changed or removed a partner), members (a dispatcher joined or left)."}, []string{"source"}),
		atLimit: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "at_limit_total", Help: "Dispatch attempts that found the tenant at its slot limit."}, []string{"dest"}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "members", Help: "Dispatchers alive at this one's last heartbeat (fairway.dispatchers); they split the stream's partitions (or, in a stream without partitions, the (tenant, destination) pairs) between them."}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "partitions", Help: "Partitions of PRODUCTS this dispatcher reads and dispatches: its share of them at its last heartbeat (1 for a stream without partitions)."}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cursor_moved_total", Help: "Dispatch attempts another dispatcher won."}, []string{"dest"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "recovered_total", Help: "Orphaned batches re-dispatched under a new lease."}, []string{"dest"}),
		returned: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "returned_total", Help: "Dispatched batches handed back unpublished (shutdown, publish failure)."}, []string{"dest"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "errors_total", Help: "Errors by destination and operation."}, []string{"dest", "op"}),
		priorities: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "priority_events_total", Help: "Events dispatched by their priority (high, normal, bulk), by destination; a replay's are not counted here."}, []string{"dest", "priority"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "replayed_events_total", Help: "Events dispatched again for a replay (included in events_total), by destination."}, []string{"dest"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "replay_throttled_total", Help: "Grants of a replaying tenant held back by the replay's rate, by destination."}, []string{"dest"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rate_limited_total", Help: "Grants held back by their pair's dispatch rate (fairway tenants set-rate), by destination."}, []string{"dest"}),
		backfillWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "backfill_waits_total", Help: "Grants held back a moment because the start-up backfill had delivered less than a batch past the tenant's cursor, by destination."}, []string{"dest"}),
		bodyWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "body_waits_total", Help: "Grants held back a moment for the bodies of their events, which did not fit the body budget when the doorbell delivered them, to be read again in stream order (--body-budget), by destination."}, []string{"dest"}),
		refilled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "bodies_refilled_total", Help: "Event bodies read again in stream order, once the body budget had room, for work items to carry them (--body-budget)."}),
		read: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "read_events_total", Help: "Events the dispatcher read from PRODUCTS (with headers) to cut grants its index could not, by destination."}, []string{"dest"}),
		streamResets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stream_resets_total", Help: "(tenant, destination) pairs this dispatcher held because their cursor does not belong to stream PRODUCTS (recreated, or restored from an older backup), by destination. A held pair is not dispatched until `fairway cursors reset`."}, []string{"dest"}),
		behindStream: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cursor_behind_stream_total", Help: "(tenant, destination) pairs found with backlog and a cursor behind the first sequence stream PRODUCTS still holds (purge, MaxAge, MaxBytes): any of the tenant's events in between were removed before they were dispatched. Counted once per pair and cursor, by destination."}, []string{"dest"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "batch_log_pruned_total", Help: "Rows of the batch log (fairway.batches) deleted as older than the retention (--batch-log-retention)."}),
		scanSecond: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "scan_seconds", Help: "Duration of a full backlog scan.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		feeds: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "replay_feeds", Help: "Replay feeds running: one consumer of PRODUCTS per (tenant, destination) this dispatcher is replaying, which learns the replayed events' sequences and store times."}),
		bellPull: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "doorbell_pull", Help: "Messages the live doorbell asks PRODUCTS for at a time: 16384 while it reads ahead of the stream's end (the body budget has room), 4096 while it paces itself and the backlog waits in the stream."}),
		bellSwitches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "doorbell_pull_changes_total", Help: "Changes of the live doorbell's pull (fairway_dispatcher_doorbell_pull), each a new ordered consumer from the sequence after the last delivered."}),
		workWindow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "work_window", Help: "Work items this dispatcher lets wait in WORK for the destination's sinks (the work window), by destination."}, []string{"dest"}),
		workWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "work_waiting", Help: "This dispatcher's work items waiting in WORK, published and not yet delivered to a sink, at its last look (every 20 ms while it has any), by destination."}, []string{"dest"}),
		backfillQueue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "backfills_queued", Help: "Partition backfills waiting for the one running to end: a dispatcher runs them one at a time."}),
	}
	for _, c := range []prometheus.Collector{m.items, m.grants, m.events, m.latency, m.active, m.blocked, m.inFlight,
		m.wakeups, m.atLimit, m.moved, m.recovered, m.returned, m.errors, m.replayed, m.priorities, m.throttled, m.rateLimited, m.backfillWaits, m.bodyWaits, m.refilled, m.read,
		m.streamResets, m.behindStream, m.pruned, m.scanSecond, m.members, m.partitions, m.feeds, m.bellPull, m.bellSwitches,
		m.workWindow, m.workWaiting, m.backfillQueue} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
