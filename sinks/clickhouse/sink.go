package clickhouse

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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
	return nil
}

// Sink inserts events into ClickHouse.
type Sink struct {
	conn       driver.Conn
	sql        statements
	maxPayload int
	now        func() time.Time
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
	s := &Sink{conn: conn, sql: newStatements(cfg.Database), maxPayload: cfg.MaxPayloadBytes, now: cfg.Now}
	for _, stmt := range []string{s.sql.createEvents, s.sql.createLatest} {
		if err := conn.Exec(ctx, stmt); err != nil {
			conn.Close()
			return nil, fmt.Errorf("clickhouse sink: create tables in %s: %w", cfg.Database, err)
		}
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

// Close closes the connections.
func (s *Sink) Close() error { return s.conn.Close() }

// Name returns "clickhouse".
func (s *Sink) Name() string { return "clickhouse" }

// Apply implements sink.Sink: records the sink refuses are reported, the rest
// go in as one INSERT into product_events (every event) and one into
// products_latest (the newest version per key in the batch).
func (s *Sink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
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
		return errs, nil
	}
	appliedAt := s.now()
	if err := s.insertEvents(ctx, batch, skip, appliedAt); err != nil {
		return nil, fmt.Errorf("clickhouse sink: insert %d events: %w", valid, err)
	}
	latest := sink.Latest(batch, skip)
	if err := s.insertLatest(ctx, batch, latest, appliedAt); err != nil {
		return nil, fmt.Errorf("clickhouse sink: insert %d latest rows: %w", len(latest), err)
	}
	return errs, nil
}

func (s *Sink) insertEvents(ctx context.Context, batch []sink.Record, skip []bool, appliedAt time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, s.sql.insertEvents)
	if err != nil {
		return err
	}
	defer b.Abort()
	for i, r := range batch {
		if skip[i] {
			continue
		}
		e := &r.Event
		deleted, payload := columns(e)
		if err := b.Append(e.Tenant, e.ProductID, e.Version, deleted, payload,
			e.OccurredAt, e.OccurredAt.UnixNano(), e.IdempotencyKey, r.Seq, clampDateTime(r.PublishedAt), appliedAt); err != nil {
			return err
		}
	}
	return b.Send()
}

func (s *Sink) insertLatest(ctx context.Context, batch []sink.Record, idx []int, appliedAt time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, s.sql.insertLatest)
	if err != nil {
		return err
	}
	defer b.Abort()
	for _, i := range idx {
		e := &batch[i].Event
		deleted, payload := columns(e)
		if err := b.Append(e.Tenant, e.ProductID, e.Version, deleted, payload,
			e.OccurredAt, e.OccurredAt.UnixNano(), appliedAt); err != nil {
			return err
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
	case !utf8.Valid(e.Payload) || !json.Valid(e.Payload):
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
