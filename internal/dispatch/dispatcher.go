package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Deps are the Dispatcher's collaborators.
type Deps struct {
	// Store holds slots, cursors and weights. Required. Its LeaseTTL must
	// cover the time from dispatch until a sink starts (and extends) the
	// work: a lease that expires first is re-dispatched.
	Store *tenancy.Store
	// NATS is the connection to the JetStream that holds PRODUCTS and
	// WORK. Required.
	NATS *nats.Conn
	// Doorbell, when set, is a second connection to the same JetStream,
	// used only by the doorbell, the backfill (the ordered consumers on
	// PRODUCTS, see startDoorbell) and replay feeds, so that their deliveries do not share
	// a socket and the client's read loop with the dispatcher's reads and
	// publishes on NATS, or with anything else on NATS. (When one
	// connection served everything in one process, the doorbell stopped
	// for about 9.5 s in 5 of 25 end-to-end runs.) Default: NATS.
	// cmd/dispatcher opens one.
	Doorbell *nats.Conn
	// Registry receives the dispatcher's metrics. Default: a private
	// registry nobody scrapes.
	Registry prometheus.Registerer
	// Logger. Default: discard.
	Logger *slog.Logger
	// Partners, when set, adds a "b2b:<partner>" destination for each of a
	// tenant's partners. Optional.
	Partners PartnerSource
	// Tracer, when set, traces every grant's publish (tracing.go;
	// bootstrap.StartTracing). Default nil: tracing off.
	Tracer trace.Tracer
}

// Dispatcher moves each tenant's events from PRODUCTS to WORK, fairly
// across tenants and inside their slot limits. See the package doc.
type Dispatcher struct {
	cfg      *Config
	st       *tenancy.Store
	js       jetstream.JetStream
	bellJS   jetstream.JetStream // Deps.Doorbell's (or NATS's): the doorbell, backfill and replay feeds
	rd       *work.Reader
	log      *slog.Logger
	m        *metrics
	partners PartnerSource
	hooks    hooks
	traces   *grantTracing // nil: tracing off

	mu          sync.Mutex
	dests       map[string]*destination
	tenantDests map[string][]*destination // tenant -> its destinations (static + partners); read at every event
	running     bool
	loopCtx     context.Context // ends when Run's ctx ends: stop granting
	workCtx     context.Context // ends ShutdownGrace later: abandon in-flight work
	loops       sync.WaitGroup

	recoverKick chan struct{}
	beatKick    chan struct{}  // heartbeat now: a dispatcher joined or left
	readKick    chan struct{}  // partitions moved: readLoop aligns the readers
	reloads     sync.WaitGroup // reloadPair calls
	feeds       sync.WaitGroup // replay feeds (replay_feed.go)

	// liveFrom is where the doorbells started (0: not started); each
	// partition's index is exact from its own point on (partRead).
	liveFrom atomic.Uint64
	// Which tenants have events from before liveFrom (the start-up
	// scan's, read-only once the doorbell starts), and the first sequence
	// the doorbell rang for each tenant since: together they tell a
	// tenant state whether the live index holds every event of its
	// tenant (tenantState.fresh).
	before map[string]bool
	rung   sync.Map // tenant -> first uint64 rung
	// members is the last heartbeat's view of the dispatchers alive
	// (members.go); nil before the first.
	members atomic.Pointer[membership]
	// parts: which partitions of the stream this dispatcher reads
	// (partitions.go); set by Run before the first heartbeat. readers:
	// the reader of each partition read (partitions.go); reading: Run
	// has started them.
	parts     *partReads
	readersMu sync.Mutex
	readers   map[int]*reader
	reading   atomic.Bool
	backfills backfillQueue
	// resets: cursors that do not fit the stream (stream_reset.go).
	resets streamResets
	// sight loads the pairs of the states the doorbell creates
	// (first_sight.go).
	sight *firstSight

	// bodies bounds the event bodies the index holds for work items to
	// carry (carried_body.go); itemBytes is the most body bytes one item
	// is cut to carry, and maxItem the most bytes an item may take: the
	// server's max payload, less room for its headers. An item that would
	// take more goes without its bodies.
	bodies    *bodyBudget
	itemBytes int
	maxItem   int
}

// hooks let tests stop the dispatcher at exact points. All optional.
type hooks struct {
	beforeDispatch func(scheduler.Grant)                   // a grant is about to be read
	afterCommit    func([]tenancy.Lease)                   // a grant's batches committed; no item published yet
	onBell         func(tenant string, seq uint64)         // the doorbell rang for tenant
	feedHeld       func(n int)                             // a replay feed added an event and now holds n
	atLimit        func(scheduler.Key)                     // a grant found its slot limit; its end not yet reported
	takeOver       func(parts []int)                       // partitions gained are about to be scanned and read
	backfill       func(parts []int, over <-chan struct{}) // a backfill of parts started; over closes when it is
	backfillBell   func(seq uint64)                        // the backfill is about to ring the event at seq
	probe          func(tenant string)                     // a scan is about to count tenant's backlog
	sight          func(dest string, tenants []string)     // a first-sight load of tenants is about to be read
}

// New returns a Dispatcher. It does nothing until Run.
func New(deps Deps, cfg *Config) (*Dispatcher, error) {
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.NATS == nil {
		return nil, fmt.Errorf("%w: Store and NATS are required", ErrInvalidConfig)
	}
	js, err := jetstream.New(deps.NATS)
	if err != nil {
		return nil, fmt.Errorf("dispatch: jetstream: %w", err)
	}
	bellJS := js
	if deps.Doorbell != nil && deps.Doorbell != deps.NATS {
		if bellJS, err = jetstream.New(deps.Doorbell); err != nil {
			return nil, fmt.Errorf("dispatch: doorbell jetstream: %w", err)
		}
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("dispatch: metrics: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{
		cfg: c, st: deps.Store, js: js, bellJS: bellJS, rd: work.NewReader(deps.NATS, c.Stream), log: log, m: m,
		partners:    deps.Partners,
		traces:      newGrantTracing(deps.Tracer),
		dests:       map[string]*destination{},
		tenantDests: map[string][]*destination{},
		recoverKick: make(chan struct{}, 1),
		beatKick:    make(chan struct{}, 1),
		readKick:    make(chan struct{}, 1),
		sight:       newFirstSight(),
		bodies:      newBodyBudget(c.BodyBudget),
		parts:       newPartReads(events.Layout{}), // Run asks the stream
		readers:     map[int]*reader{},
		maxItem:     int(deps.NATS.MaxPayload()) - 512,
		itemBytes:   max(int(deps.NATS.MaxPayload())-work.ItemOverhead, work.ItemOverhead),
	}
	for _, name := range c.Dests {
		if _, err := d.destination(name); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Run dispatches until ctx ends, then shuts down in two phases: it stops
// taking grants, gives batches in flight up to Config.ShutdownGrace to be
// published, and hands back (tenancy.ReturnBatches) any batch whose work
// item was not published. It returns nil after a clean shutdown, or the
// error that stopped it from starting.
func (d *Dispatcher) Run(ctx context.Context) (err error) {
	// A stop that comes while the dispatcher is still starting is a
	// stop, not a failure: whatever start-up step it interrupted returns
	// the context's error, which is not the caller's concern.
	caller := ctx
	defer func() {
		if err != nil && caller.Err() != nil {
			err = nil
		}
	}()
	ctx, stop := context.WithCancelCause(ctx) // stop(ErrStreamMovedBack): stream_reset.go
	defer stop(nil)
	d.resets.stop = stop
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	releases, err := d.st.Listen(ctx)
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	stream, err := d.js.Stream(ctx, d.cfg.Stream)
	if err != nil {
		return fmt.Errorf("dispatch: stream %s: %w", d.cfg.Stream, err)
	}
	layout, err := d.rd.Layout(ctx)
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	d.parts = newPartReads(layout)
	// Learn the other dispatchers first, so that the scan's tenants are
	// parked or not from the start and it scans the partitions owned.
	if err := d.heartbeat(ctx); err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	// Recorded as alive, a dispatcher that stops or fails before its
	// heartbeat loop runs (which leaves when it ends) leaves here, so that
	// the others do not wait for its row to go old.
	beating := false
	defer func() {
		if !beating {
			d.leave(ctx)
		}
	}()
	owned := d.ownedParts()
	sc, err := d.survey(ctx, stream, owned)
	if err != nil {
		return err
	}
	lastSeq, present, scans := sc.lastSeq, sc.present, []*survey{sc}
	if d.parts.partitioned() {
		// Dispatchers started together see each other once each one's
		// first heartbeat has notified the others, often while they
		// scan: beat once more before reading, so that they do not all
		// read every partition first and then hand most of them over,
		// and scan what this one gained meanwhile.
		if err := d.heartbeat(ctx); err != nil {
			return fmt.Errorf("dispatch: %w", err)
		}
		now := d.ownedParts()
		var more []int
		for _, p := range now {
			if !slices.Contains(owned, p) {
				more = append(more, p)
			}
		}
		if len(more) > 0 {
			sc, err := d.survey(ctx, stream, more)
			if err != nil {
				return err
			}
			maps.Copy(present, sc.present)
			scans = append(scans, sc)
		}
		owned = now
	}
	d.before = present
	d.liveFrom.Store(lastSeq + 1)
	// The doorbell starts and the tenants without events up to lastSeq
	// are served while the probes count the others' backlogs, which takes
	// a request per pair; those wait out of the rounds until every count
	// is in (survey.gate, survey.open).
	for _, sc := range scans {
		sc.gate()
	}
	stopReading := func() { d.stopReading(slices.Collect(maps.Keys(d.readersNow()))) }
	defer stopReading()
	rds, err := d.startReaders(ctx, owned, lastSeq+1)
	if err != nil {
		return err
	}
	d.reading.Store(true)
	d.m.partitions.Set(float64(len(owned)))

	d.mu.Lock()
	d.running, d.loopCtx, d.workCtx = true, ctx, workCtx
	for _, x := range d.dests {
		d.startLoop(x)
	}
	d.mu.Unlock()

	var aux sync.WaitGroup
	shutdown := func() {
		stopReading()
		grace := time.AfterFunc(d.cfg.ShutdownGrace, cancelWork)
		defer grace.Stop()
		d.loops.Wait()
		d.feeds.Wait() // their context ended with ctx; no loop starts one now
		aux.Wait()
		d.reloads.Wait()
	}
	// Slot releases free the tenants served during the probes; a reload
	// of a pair waits for the probes (opened), whose seeds were read
	// before it and would overwrite it.
	opened := make(chan struct{})
	aux.Go(func() { d.routeReleases(ctx, releases, opened) })
	aux.Go(func() { d.sightLoop(ctx) })
	wait := waiting{}
	for _, sc := range scans {
		w, err := d.probeAll(ctx, sc)
		if err != nil {
			stop(nil)
			shutdown()
			return err
		}
		wait.merge(w)
	}
	d.backfill(rds, lastSeq+1, wait)
	for _, sc := range scans {
		sc.open()
	}
	close(opened)
	aux.Go(func() { d.recoverLoop(ctx, workCtx) })
	aux.Go(func() { d.pollLoop(ctx, stream) })
	aux.Go(func() { d.heartbeatLoop(ctx) })
	beating = true
	aux.Go(func() { d.readLoop(ctx) })
	if d.cfg.BodyBudget > 0 {
		aux.Go(func() { d.refillLoop(ctx) })
	}
	d.log.Info("dispatcher running", "holder", d.cfg.Holder, "dests", d.destNames(), "from_seq", lastSeq+1, "partitions", layout.Count(), "owned", owned)

	<-ctx.Done()
	shutdown()
	d.log.Info("dispatcher stopped", "holder", d.cfg.Holder)
	if err := context.Cause(ctx); errors.Is(err, ErrStreamMovedBack) {
		return err
	}
	return nil
}

// startLoop runs the loops of x's lanes; d.mu must be held and d.running
// true.
func (d *Dispatcher) startLoop(x *destination) {
	if x.started {
		return
	}
	x.started = true
	for _, l := range x.lanes() {
		d.loops.Go(func() { l.run(d.loopCtx, d.workCtx) })
	}
	if x.win != nil {
		report := x.win.reporter(d.log, x.name, d.m.errors.WithLabelValues(x.name, "work window"))
		d.loops.Go(func() { x.win.run(d.loopCtx, x.kick, report) })
	}
}

// destination returns the destination named name, creating it (and
// starting its loop when running) on first use.
func (d *Dispatcher) destination(name string) (*destination, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.dests[name]; x != nil {
		return x, nil
	}
	if err := tenancy.ValidDest(name); err != nil {
		return nil, err
	}
	sc := scheduler.Config{
		Quantum: d.cfg.quantum(name), MaxBatch: d.cfg.batchSize(name) * d.cfg.GrantBatches, LoneRounds: d.cfg.GrantBatches,
		Dampening: d.cfg.Dampening[name], Clock: d.cfg.Clock,
	}
	live, err := scheduler.New(sc)
	if err != nil {
		return nil, fmt.Errorf("%w: destination %s: %v", ErrInvalidConfig, name, err)
	}
	replay, _ := scheduler.New(sc) // the same configuration: no error
	x := newDestination(d, name, live, replay)
	d.dests[name] = x
	if d.running && d.loopCtx.Err() == nil {
		d.startLoop(x)
	}
	return x, nil
}

func (d *Dispatcher) destNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.dests))
}

// allDests returns every destination's live lane.
func (d *Dispatcher) allDests() []*destination {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Collect(maps.Values(d.dests))
}

// allLanes returns every destination's lanes, live and replay.
func (d *Dispatcher) allLanes() []*destination {
	var out []*destination
	for _, x := range d.allDests() {
		out = append(out, x.lanes()...)
	}
	return out
}

// destsOf returns tenant's destinations: the static ones plus one per
// partner. Partners are looked up once per tenant and again at each poll
// (refresh true).
func (d *Dispatcher) destsOf(ctx context.Context, tenant string, refresh bool) []*destination {
	d.mu.Lock()
	dests, ok := d.tenantDests[tenant]
	d.mu.Unlock()
	if ok && !refresh {
		return dests
	}
	names := d.cfg.Dests
	if d.partners != nil {
		ps, err := d.partners.Partners(ctx, tenant)
		if err != nil {
			d.log.Warn("partners lookup failed; using the static destinations", "tenant", tenant, "err", err)
			d.m.errors.WithLabelValues("", "partners").Inc()
		}
		for _, p := range ps {
			name := tenancy.DestB2BPrefix + p
			if !slices.Contains(names, name) {
				names = append(slices.Clip(names), name)
			}
		}
	}
	dests = make([]*destination, 0, len(names))
	for _, n := range names {
		x, err := d.destination(n)
		if err != nil {
			d.log.Warn("skipping invalid destination", "tenant", tenant, "dest", n, "err", err)
			continue
		}
		dests = append(dests, x)
	}
	d.mu.Lock()
	d.tenantDests[tenant] = dests
	d.mu.Unlock()
	return dests
}

// routeReleases turns slot releases into wake-ups of the blocked tenant.
func (d *Dispatcher) routeReleases(ctx context.Context, ch <-chan tenancy.Released, opened <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-ch:
			if !ok {
				return
			}
			if r.Members {
				d.m.wakeups.WithLabelValues("members").Inc()
				d.beatNow()
				continue
			}
			if r.Tenant == "" {
				d.m.wakeups.WithLabelValues("rescan").Inc()
				for _, x := range d.allLanes() {
					x.unblockAll()
				}
				d.kickRecovery()
				continue
			}
			if r.Partner != "" {
				d.m.wakeups.WithLabelValues("partner").Inc()
				d.reloads.Go(func() {
					if waitOpen(ctx, opened) {
						d.partnerChanged(ctx, r)
					}
				})
				continue
			}
			if r.Cursor || r.Weight {
				d.m.wakeups.WithLabelValues(map[bool]string{true: "cursor", false: "weight"}[r.Cursor]).Inc()
				d.reloads.Go(func() {
					if waitOpen(ctx, opened) {
						d.reloadPair(ctx, r.Tenant, r.Dest)
					}
				})
				continue
			}
			d.mu.Lock()
			x := d.dests[r.Dest]
			d.mu.Unlock()
			if x == nil {
				continue
			}
			d.m.wakeups.WithLabelValues("release").Inc()
			lane := x
			if r.Replay {
				lane = x.replays
			}
			if lane.unblock(r.Tenant, r.Slots) {
				d.kickRecovery()
			}
		}
	}
}

func (d *Dispatcher) kickRecovery() {
	select {
	case d.recoverKick <- struct{}{}:
	default:
	}
}

// publishAttemptTimeout bounds the first publish attempt; each retry gets
// twice as long as the one before (a slow but working server still gets its
// ack through). An ack lost on the way (the connection moved to another
// node, WORK's leader changed) is never answered; without a bound of its own
// one attempt would wait out the whole PublishTimeout (seen in the NATS
// failover test: a 10 s stall, then the batch handed back) instead of being
// retried once the stream answers again.
const publishAttemptTimeout = 2 * time.Second

// publish hands it to WORK, retrying transient failures (same Msg-Id, so a
// retry of a publish that did land is a duplicate) until PublishTimeout,
// and returns the item's stream sequence. msg is it.Msg() when the caller
// has it already, else nil.
func (d *Dispatcher) publish(ctx context.Context, it work.Item, msg *nats.Msg) (seq uint64, size int, err error) {
	if msg == nil {
		if msg, err = it.Msg(); err != nil {
			return 0, 0, err
		}
	}
	if d.traces != nil {
		d.traces.markItem(ctx, it, msg.Header)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for attempt := publishAttemptTimeout; ; attempt *= 2 {
		actx, acancel := context.WithTimeout(ctx, attempt)
		ack, err := d.js.PublishMsg(actx, msg)
		acancel()
		if err == nil {
			return ack.Sequence, len(msg.Data), nil
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("%w %s: %v", ErrPublish, it.MsgID(), err)
		}
		d.log.Warn("publish work item failed; retrying", "item", it.MsgID(), "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, 0, fmt.Errorf("%w %s: %v", ErrPublish, it.MsgID(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// handBack returns unpublished batches so they are re-dispatched now
// rather than after their lease expires. It runs on its own short context:
// it matters most during shutdown.
func (d *Dispatcher) handBack(l tenancy.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := d.st.ReturnBatches(ctx, []tenancy.Lease{l})
	if err != nil {
		d.log.Warn("hand back failed; the batch is re-dispatched when its lease expires", "lease", l.ID, "err", err)
		d.m.errors.WithLabelValues(l.Dest, "return").Inc()
		return
	}
	d.m.returned.WithLabelValues(l.Dest).Add(float64(n))
	d.kickRecovery()
}

func isStale(err error) bool { return errors.Is(err, tenancy.ErrStaleLease) }

// parseSubject splits a stored event's subject,
// products.[<partition>.]<tenant>.<op>[.<priority>] (events.SubjectFor,
// events.Layout), without allocating; p is normal when the subject names
// none. ok is false for anything else, which is no tenant's event and
// must not enter an index; op is "" when it is no known op
// (events.ParseSubject says why).
func parseSubject(subject string) (tenant string, op events.Op, p events.Priority, ok bool) {
	rest, ok := strings.CutPrefix(subject, events.SubjectPrefix+".")
	if !ok {
		return "", "", "", false
	}
	_, rest = events.CutPartition(rest)
	tenant, rest, ok = strings.Cut(rest, ".")
	if !ok || tenant == "" || rest == "" {
		return "", "", "", false
	}
	o, pr, hasP := strings.Cut(rest, ".")
	p = events.PriorityNormal
	if hasP {
		switch events.Priority(pr) {
		case events.PriorityHigh, events.PriorityBulk:
			p = events.Priority(pr)
		default:
			return "", "", "", false
		}
	}
	if op = events.Op(o); !op.Valid() {
		op = ""
	}
	return tenant, op, p, true
}

// waitOpen waits until opened is closed (the start-up scan's backlogs are
// in the rounds) and says whether it was, not ctx's end first.
func waitOpen(ctx context.Context, opened <-chan struct{}) bool {
	select {
	case <-opened:
		return true
	case <-ctx.Done():
		return false
	}
}
