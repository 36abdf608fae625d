package clickhouse

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults and limits for Config.
const (
	AddrDefault            = "127.0.0.1:9000"
	DatabaseDefault        = "fairway"
	MaxPayloadBytesDefault = events.MaxPayloadBytesDefault
	DialTimeoutDefault     = 5 * time.Second
	ReadTimeoutDefault     = 60 * time.Second
	LingerDefault          = 5 * time.Millisecond
	LingerMax              = time.Second
	GroupRowsDefault       = 50_000
	FillRowsDefault        = 10_000
	FillWaitDefault        = 200 * time.Millisecond
	FillWaitMax            = 5 * time.Second
	// ConcurrencyDefault is how many work items the sink runtime applies
	// at once for ClickHouse (cmd/sinks --concurrency, the demo): calls
	// wait together in group commit, each holding an apply slot and
	// nothing else, and the more wait together the fewer the inserts
	// (docs/sinks.md, "ClickHouse: group commit").
	ConcurrencyDefault = 16
)

// DateTime is seconds since 1970 in a UInt32: values outside this range are
// silently wrapped by ClickHouse, so the sink refuses them.
var (
	minDateTime = time.Unix(0, 0)
	maxDateTime = time.Unix(1<<32-1, 0)
)

// Config configures a Sink.
type Config struct {
	// Addr is the native-protocol address, host:port. Default AddrDefault.
	Addr string
	// Database holds the tables; it must exist. Default DatabaseDefault
	// ("fairway").
	Database string
	// Username and Password authenticate; default user "default", no
	// password.
	Username string
	Password string
	// MaxPayloadBytes bounds a payload; a larger one is a permanent record
	// error. Default MaxPayloadBytesDefault (256 KiB).
	MaxPayloadBytes int
	// DialTimeout bounds connecting. Default DialTimeoutDefault (5 s).
	DialTimeout time.Duration
	// ReadTimeout bounds waiting for the server. Default
	// ReadTimeoutDefault (60 s).
	ReadTimeout time.Duration
	// Linger is how long, after a combined insert ends, the next one
	// waits for the items of the last one to come back before it starts
	// (group commit, see GroupRows and the package doc). It waits only
	// while fewer items are queued than the last insert carried, so a lone
	// caller never waits. Default LingerDefault (5 ms); a negative value
	// means no lingering: the next insert starts as soon as the last ends.
	// At most LingerMax (1 s).
	Linger time.Duration
	// GroupRows bounds the rows (events) of one combined insert: concurrent
	// Apply calls are inserted together, one INSERT per table, until their
	// rows would exceed it; an Apply with more rows than GroupRows is
	// inserted alone. Default GroupRowsDefault (50,000); a negative value
	// turns group commit off: every Apply inserts its own rows at once,
	// concurrently with the others.
	GroupRows int
	// FillRows and FillWait hold combined inserts back while only
	// caught-up tenants wait: a round whose queued calls all come from
	// work items marked caught up (sink.CaughtUp: their tenants had
	// nothing more waiting for ClickHouse) waits until FillRows rows are
	// queued or its oldest call has waited FillWait. ClickHouse merges
	// every insert's part again and again in the background, so fewer,
	// larger inserts cost it much less CPU when many tenants send a little
	// at once (docs/sinks.md, "Holding caught-up tenants back"). A call
	// from any other item is never held: holding it would keep its
	// tenant's slot and slow the tenant down. Defaults FillRowsDefault
	// (10,000) and FillWaitDefault (200 ms); a negative FillWait turns it
	// off. FillWait is at most FillWaitMax (5 s).
	FillRows int
	FillWait time.Duration
	// Registerer, when set, gets the sink's metrics (docs/metrics.md):
	// fairway_sink_clickhouse_insert_rows and
	// fairway_sink_clickhouse_held_rounds_total.
	Registerer prometheus.Registerer
	// Now is the clock for applied_at. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with defaults filled in.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Addr = cmp.Or(out.Addr, AddrDefault)
	out.Database = cmp.Or(out.Database, DatabaseDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	out.DialTimeout = cmp.Or(out.DialTimeout, DialTimeoutDefault)
	out.ReadTimeout = cmp.Or(out.ReadTimeout, ReadTimeoutDefault)
	out.Linger = cmp.Or(out.Linger, LingerDefault)
	if out.Linger < 0 {
		out.Linger = 0
	}
	out.GroupRows = cmp.Or(out.GroupRows, GroupRowsDefault)
	out.FillRows = cmp.Or(out.FillRows, FillRowsDefault)
	out.FillWait = cmp.Or(out.FillWait, FillWaitDefault)
	if out.FillWait < 0 {
		out.FillWait = 0
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (c *Config) validate() error {
	if !identRE.MatchString(c.Database) {
		return fmt.Errorf("%w: Database %q is not an identifier", ErrConfig, c.Database)
	}
	if c.MaxPayloadBytes < 2 {
		return fmt.Errorf("%w: MaxPayloadBytes %d is below 2", ErrConfig, c.MaxPayloadBytes)
	}
	if c.Linger > LingerMax {
		return fmt.Errorf("%w: Linger %s is above %s", ErrConfig, c.Linger, LingerMax)
	}
	if c.FillWait > FillWaitMax {
		return fmt.Errorf("%w: FillWait %s is above %s", ErrConfig, c.FillWait, FillWaitMax)
	}
	if c.FillRows < 1 {
		return fmt.Errorf("%w: FillRows %d is below 1", ErrConfig, c.FillRows)
	}
	return nil
}

// Sink inserts events into ClickHouse.
type Sink struct {
	conn       driver.Conn
	sql        statements
	maxPayload int
	now        func() time.Time
	// group combines concurrent Apply calls; nil when group commit is off.
	group  *groupCommit
	closed atomic.Bool
	// inserts counts insert rounds (one INSERT per table), for tests and
	// benchmarks.
	inserts atomic.Int64
	m       metrics
	// insertHook, set by tests only, runs before every insert round with
	// the records it carries; an error fails the round unsent.
	insertHook func(ctx context.Context, recs []sink.Record) error
}

var _ sink.Sink = (*Sink)(nil)

// New validates cfg, connects and creates the database and tables when
// they are missing.
func New(ctx context.Context, cfg *Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := createDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	conn, err := ch.Open(&ch.Options{
		Addr:        []string{cfg.Addr},
		Auth:        ch.Auth{Database: cfg.Database, Username: cfg.Username, Password: cfg.Password},
		DialTimeout: cfg.DialTimeout,
		ReadTimeout: cfg.ReadTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse sink: open %s: %w", cfg.Addr, err)
	}
	s := &Sink{conn: conn, sql: newStatements(cfg.Database), maxPayload: cfg.MaxPayloadBytes, now: cfg.Now, m: newMetrics()}
	if cfg.Registerer != nil {
		if err := s.m.register(cfg.Registerer); err != nil {
			conn.Close()
			return nil, fmt.Errorf("clickhouse sink: metrics: %w", err)
		}
	}
	for _, stmt := range []string{s.sql.createEvents, s.sql.createLatest} {
		if err := conn.Exec(ctx, stmt); err != nil {
			conn.Close()
			return nil, fmt.Errorf("clickhouse sink: create tables in %s: %w", cfg.Database, err)
		}
	}
	if cfg.GroupRows > 0 {
		s.group = newGroupCommit(s, cfg.Linger, cfg.GroupRows, cfg.FillRows, cfg.FillWait)
	}
	return s, nil
}

// createDatabase creates cfg.Database if it is missing, through a
// connection to the server's default database (a connection to a missing
// database fails at the handshake).
func createDatabase(ctx context.Context, cfg *Config) error {
	conn, err := ch.Open(&ch.Options{
		Addr:        []string{cfg.Addr},
		Auth:        ch.Auth{Database: "default", Username: cfg.Username, Password: cfg.Password},
		DialTimeout: cfg.DialTimeout,
		ReadTimeout: cfg.ReadTimeout,
	})
	if err != nil {
		return fmt.Errorf("clickhouse sink: open %s: %w", cfg.Addr, err)
	}
	defer conn.Close()
	// cfg.Database is an identifier (validate), so it is safe to splice.
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+cfg.Database); err != nil {
		return fmt.Errorf("clickhouse sink: create database %s: %w", cfg.Database, err)
	}
	return nil
}

// Close stops group commit (Apply calls still queued return ErrClosed, an
// insert in flight is cancelled) and closes the connection. Call it after
// the last Apply.
func (s *Sink) Close() error {
	s.closed.Store(true)
	if s.group != nil {
		s.group.close()
	}
	return s.conn.Close()
}

// Name returns "clickhouse".
func (s *Sink) Name() string { return "clickhouse" }

// Apply implements sink.Sink: records the sink refuses are reported, the rest
// go into product_events (every event) and products_latest (the newest
// version per key in the batch), one INSERT per table — shared with the
// other Apply calls queued at the same time when group commit is on (see
// the package doc).
func (s *Sink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	it, errs := s.prepare(ctx, batch)
	if it == nil {
		return errs, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if s.group == nil {
		if err := s.insert(ctx, []*item{it}); err != nil {
			return nil, fmt.Errorf("clickhouse sink: %w", err)
		}
		return errs, nil
	}
	members, err := s.group.do(ctx, it)
	switch {
	case err == nil:
		return errs, nil
	case members == 0: // never inserted: ctx ended while queued, or closed
		return nil, err
	case members == 1 || ctx.Err() != nil || sink.Classify(s, err).Class == sink.ClassTransient:
		// Alone already, given up, or the server's trouble rather than
		// the data's: the runtime retries the item with backoff.
		return nil, fmt.Errorf("clickhouse sink: %w", err)
	}
	// A combined insert failed for a reason that may be one member's
	// data: insert this item alone once, so that it gets its own result.
	if err := s.insert(ctx, []*item{it}); err != nil {
		return nil, fmt.Errorf("clickhouse sink: %w", err)
	}
	return errs, nil
}

// prepare validates batch: errs holds the records the sink refuses, and it
// the rows to insert (nil when there are none).
func (s *Sink) prepare(ctx context.Context, batch []sink.Record) (*item, []error) {
	errs := make([]error, len(batch))
	skip := make([]bool, len(batch))
	valid := 0
	for i, r := range batch {
		if errs[i] = s.check(r.Event); errs[i] != nil {
			skip[i] = true
		} else {
			valid++
		}
	}
	if valid == 0 {
		return nil, errs
	}
	return &item{
		ctx:    ctx,
		hold:   sink.CaughtUp(ctx),
		batch:  batch,
		skip:   skip,
		latest: sink.Latest(batch, skip),
		rows:   valid,
		done:   make(chan struct{}),
	}, errs
}

// insert writes the rows of items: one INSERT into product_events and one
// into products_latest, concurrently.
func (s *Sink) insert(ctx context.Context, items []*item) error {
	s.inserts.Add(1)
	rows, latest := 0, 0
	for _, it := range items {
		rows += it.rows
		latest += len(it.latest)
	}
	s.m.insertRows.Observe(float64(rows))
	of := ""
	if len(items) > 1 {
		of = fmt.Sprintf(" of %d items", len(items))
	}
	if s.insertHook != nil {
		if err := s.insertHook(ctx, validRecords(items)); err != nil {
			return fmt.Errorf("insert %d events%s: %w", rows, of, err)
		}
	}
	// The two INSERTs go at once, on two connections: a round then takes
	// about as long as the slower one rather than both, and a small
	// INSERT's time is mostly ClickHouse's fixed cost. Both tables are
	// ReplacingMergeTree, so a round retried after one of them landed
	// changes nothing.
	appliedAt := s.now()
	var errEvents error
	var wg sync.WaitGroup
	wg.Go(func() { errEvents = s.insertEvents(ctx, items, appliedAt) })
	errLatest := s.insertLatest(ctx, items, appliedAt)
	wg.Wait()
	if errEvents != nil {
		return fmt.Errorf("insert %d events%s: %w", rows, of, errEvents)
	}
	if errLatest != nil {
		return fmt.Errorf("insert %d latest rows%s: %w", latest, of, errLatest)
	}
	return nil
}

func validRecords(items []*item) []sink.Record {
	var out []sink.Record
	for _, it := range items {
		for i, r := range it.batch {
			if !it.skip[i] {
				out = append(out, r)
			}
		}
	}
	return out
}

func (s *Sink) insertEvents(ctx context.Context, items []*item, appliedAt time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, s.sql.insertEvents)
	if err != nil {
		return err
	}
	defer b.Abort()
	for _, it := range items {
		for i, r := range it.batch {
			if it.skip[i] {
				continue
			}
			e := &r.Event
			deleted, payload := columns(e)
			if err := b.Append(e.Tenant, e.ProductID, e.Version, deleted, payload,
				e.OccurredAt, e.OccurredAt.UnixNano(), e.IdempotencyKey, r.Seq, clampDateTime(r.PublishedAt), appliedAt); err != nil {
				return err
			}
		}
	}
	return b.Send()
}

func (s *Sink) insertLatest(ctx context.Context, items []*item, appliedAt time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, s.sql.insertLatest)
	if err != nil {
		return err
	}
	defer b.Abort()
	for _, it := range items {
		for _, i := range it.latest {
			e := &it.batch[i].Event
			deleted, payload := columns(e)
			if err := b.Append(e.Tenant, e.ProductID, e.Version, deleted, payload,
				e.OccurredAt, e.OccurredAt.UnixNano(), appliedAt); err != nil {
				return err
			}
		}
	}
	return b.Send()
}

// columns returns the deleted flag and the stored payload of e: a tombstone
// keeps no payload.
func columns(e *events.Event) (uint8, string) {
	if e.Op == events.OpDelete {
		return 1, ""
	}
	return 0, string(e.Payload)
}

// check is the sink's validation of what ClickHouse would take but store
// wrongly.
func (s *Sink) check(e events.Event) error {
	invalid := func(reason string) error { return sink.Permanent(reason, sink.ErrInvalidRecord) }
	switch {
	case !e.Op.Valid():
		return invalid(fmt.Sprintf("unknown op %q", e.Op))
	case e.Tenant == "" || e.ProductID == "":
		return invalid("empty tenant or product id")
	case e.OccurredAt.Before(minDateTime) || e.OccurredAt.After(maxDateTime):
		return invalid(fmt.Sprintf("occurred_at %s outside ClickHouse DateTime range", e.OccurredAt.UTC().Format(time.RFC3339)))
	case e.Op == events.OpDelete:
		return nil
	case len(e.Payload) > s.maxPayload:
		return invalid(fmt.Sprintf("payload of %d bytes exceeds %d", len(e.Payload), s.maxPayload))
	case !utf8.Valid(e.Payload) || !events.Valid(e.Payload):
		return invalid("payload is not valid JSON")
	case !bytes.HasPrefix(bytes.TrimLeft(e.Payload, " \t\r\n"), []byte("{")):
		return invalid("payload is not a JSON object")
	}
	return nil
}

func clampDateTime(t time.Time) time.Time {
	switch {
	case t.Before(minDateTime):
		return minDateTime
	case t.After(maxDateTime):
		return maxDateTime
	}
	return t
}
