package clickhouse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// reader reads the tables back with FINAL, so that the counts are after
// deduplication.
type reader struct {
	conn driver.Conn
}

func (r reader) Get(ctx context.Context, tenant, productID string) (sinktest.State, bool, error) {
	rows, err := r.conn.Query(ctx, "SELECT version, deleted, payload FROM products_latest FINAL WHERE tenant_id = ? AND product_id = ?", tenant, productID)
	if err != nil {
		return sinktest.State{}, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return sinktest.State{}, false, rows.Err()
	}
	var st sinktest.State
	var deleted uint8
	var payload string
	if err := rows.Scan(&st.Version, &deleted, &payload); err != nil {
		return st, false, err
	}
	st.Deleted = deleted == 1
	if payload != "" {
		st.Payload = json.RawMessage(payload)
	}
	if rows.Next() {
		return st, false, fmt.Errorf("products_latest FINAL holds %s/%s more than once", tenant, productID)
	}
	return st, true, rows.Err()
}

func (r reader) CountEvents(ctx context.Context, tenant string) (int, error) {
	var n uint64
	err := r.conn.QueryRow(ctx, "SELECT count() FROM product_events FINAL WHERE tenant_id = ?", tenant).Scan(&n)
	return int(n), err
}

func setup(t testing.TB, cfg clickhouse.Config) (*clickhouse.Sink, reader) {
	t.Helper()
	addr, db := testenv.NewClickHouseDatabase(t)
	cfg.Addr, cfg.Database = addr, db
	s, err := clickhouse.New(context.Background(), &cfg)
	if err != nil {
		t.Fatalf("clickhouse.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}, Auth: ch.Auth{Database: db}})
	if err != nil {
		t.Fatalf("open reader: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s, reader{conn: conn}
}

// poison is an upsert whose payload is valid JSON but not an object.
func poison(tenant string) events.Event {
	e := sinktest.Upsert(tenant, "poison", 1)
	e.Payload = json.RawMessage(`["not", "an", "object"]`)
	return e
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) (sink.Sink, sinktest.Reader) {
			s, r := setup(t, clickhouse.Config{})
			return s, r
		},
		Poison: poison,
	})
}

func TestPermanentRecordErrors(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{MaxPayloadBytes: 128})
	mod := func(id string, f func(*events.Event)) events.Event {
		e := sinktest.Upsert("acme", id, 1)
		f(&e)
		return e
	}
	bad := map[string]events.Event{
		"too big":        mod("big", func(e *events.Event) { e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", 128) + `"}`) }),
		"not json":       mod("notjson", func(e *events.Event) { e.Payload = json.RawMessage(`{"a":`) }),
		"invalid utf-8":  mod("utf8", func(e *events.Event) { e.Payload = json.RawMessage("{\"a\":\"\xff\"}") }),
		"not an object":  poison("acme"),
		"no payload":     mod("nopayload", func(e *events.Event) { e.Payload = nil }),
		"unknown op":     mod("op", func(e *events.Event) { e.Op = "merge" }),
		"before 1970":    mod("early", func(e *events.Event) { e.OccurredAt = time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC) }),
		"after 2106":     mod("late", func(e *events.Event) { e.OccurredAt = time.Date(2106, 3, 1, 0, 0, 0, 0, time.UTC) }),
		"zero time":      mod("zero", func(e *events.Event) { e.OccurredAt = time.Time{} }),
		"empty product":  mod("", func(e *events.Event) {}),
		"delete in 1960": func() events.Event { e := sinktest.Delete("acme", "d", 1); e.OccurredAt = time.Unix(-1, 0); return e }(),
	}
	var evs []events.Event
	var names []string
	for name, e := range bad {
		evs = append(evs, sinktest.Upsert("acme", "good-"+name, 1), e)
		names = append(names, "", name)
	}
	// A delete with no payload and a payload with a leading space are fine.
	spaced := sinktest.Upsert("acme", "spaced", 1)
	spaced.Payload = json.RawMessage(` {"name":"product spaced","version":1,"tags":["a","b"]}`)
	evs = append(evs, sinktest.Delete("acme", "deleted", 1), spaced)
	names = append(names, "", "")

	errs, err := s.Apply(t.Context(), sinktest.Records(evs...))
	if err != nil {
		t.Fatalf("Apply: batch error %v", err)
	}
	for i, e := range errs {
		switch {
		case names[i] == "" && e != nil:
			t.Errorf("record %d (%s): %v, want applied", i, evs[i].ProductID, e)
		case names[i] != "" && (!sink.IsPermanent(e) || !errors.Is(e, sink.ErrInvalidRecord)):
			t.Errorf("%s: error %v, want a permanent ErrInvalidRecord", names[i], e)
		}
	}
	if n, err := r.CountEvents(t.Context(), "acme"); err != nil || n != len(bad)+2 {
		t.Errorf("CountEvents = %d, %v; want %d", n, err, len(bad)+2)
	}
	for _, id := range []string{"big", "notjson", "utf8", "early", "late", "zero", "d"} {
		if st, ok, err := r.Get(t.Context(), "acme", id); err != nil || ok {
			t.Errorf("Get(%s) = %+v, %v, %v; want not stored", id, st, ok, err)
		}
	}
	if st, ok, err := r.Get(t.Context(), "acme", "deleted"); err != nil || !ok || !st.Deleted {
		t.Errorf("Get(deleted) = %+v, %v, %v; want a tombstone", st, ok, err)
	}
}

// A server error that is not about the records (the table is gone) is the
// batch error, not permanent and not transient.
func TestBatchError(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{})
	if err := r.conn.Exec(t.Context(), "DROP TABLE products_latest"); err != nil {
		t.Fatal(err)
	}
	errs, err := s.Apply(t.Context(), sinktest.Records(sinktest.Upsert("acme", "a", 1)))
	var ex *ch.Exception
	if !errors.As(err, &ex) || ex.Code != 60 { // UNKNOWN_TABLE
		t.Fatalf("Apply = %v, %v; want a batch error wrapping exception 60", errs, err)
	}
	if got := sink.Classify(s, err); errs != nil || got.Class != sink.ClassUnknown {
		t.Fatalf("Apply = %v, %v (%s by %q); want no record errors, unclassified", errs, err, got.Class, got.Rule)
	}
}

// A server that is not there is a transient failure.
func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = clickhouse.New(t.Context(), &clickhouse.Config{Addr: addr, DialTimeout: time.Second})
	if got := sink.Classify((*clickhouse.Sink)(nil), err); err == nil || got.Class != sink.ClassTransient {
		t.Fatalf("New on a closed port = %v (%s by %q), want a transient error", err, got.Class, got.Rule)
	}
}

// TestClassifyRules checks every row of the sink's classification with an
// example error, and what the generic rows make of the sink's other
// errors.
func TestClassifyRules(t *testing.T) {
	t.Parallel()
	var s *clickhouse.Sink // the rows do not need a connection
	wrap := func(err error) error { return fmt.Errorf("clickhouse sink: insert 3 events: %w", err) }
	ex := func(code int32) error { return wrap(&ch.Exception{Code: code, Name: "DB::Exception"}) }
	rows := map[string]error{
		"clickhouse 159 TIMEOUT_EXCEEDED":              ex(159),
		"clickhouse 164 READONLY":                      ex(164),
		"clickhouse 202 TOO_MANY_SIMULTANEOUS_QUERIES": ex(202),
		"clickhouse 203 NO_FREE_CONNECTION":            ex(203),
		"clickhouse 209 SOCKET_TIMEOUT":                ex(209),
		"clickhouse 210 NETWORK_ERROR":                 ex(210),
		"clickhouse 241 MEMORY_LIMIT_EXCEEDED":         ex(241),
		"clickhouse 242 TABLE_IS_READ_ONLY":            ex(242),
		"clickhouse 252 TOO_MANY_PARTS":                ex(252),
		"clickhouse 319 UNKNOWN_STATUS_OF_INSERT":      ex(319),
		"clickhouse 999 KEEPER_EXCEPTION":              ex(999),
		"clickhouse connection pool exhausted":         wrap(ch.ErrAcquireConnTimeout),
	}
	for _, r := range s.ClassifyRules() {
		err, ok := rows[r.Name]
		if !ok {
			t.Errorf("row %q has no example", r.Name)
			continue
		}
		delete(rows, r.Name)
		if got := sink.Classify(s, err); got.Class != sink.ClassTransient || got.Rule != r.Name {
			t.Errorf("Classify(%v) = %s by %q, want transient by %q", err, got.Class, got.Rule, r.Name)
		}
	}
	for name := range rows {
		t.Errorf("example %q has no row", name)
	}
	for _, c := range []struct {
		name  string
		err   error
		class sink.Class
		rule  string
	}{
		{"unknown table", ex(60), sink.ClassUnknown, "unclassified"},
		{"syntax error", ex(62), sink.ClassUnknown, "unclassified"},
		{"auth failed", ex(516), sink.ClassUnknown, "unclassified"},
		{"connection reset", wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), sink.ClassTransient, "connection reset"},
		{"refused", wrap(syscall.ECONNREFUSED), sink.ClassTransient, "connection refused"},
		{"eof", wrap(io.EOF), sink.ClassTransient, "connection closed"},
		{"deadline", wrap(context.DeadlineExceeded), sink.ClassTransient, "deadline exceeded"},
		{"record refused", sink.Permanent("x", sink.ErrInvalidRecord), sink.ClassPermanent, "permanent record error"},
		{"closed", clickhouse.ErrClosed, sink.ClassUnknown, "unclassified"},
	} {
		if got := sink.Classify(s, c.err); got.Class != c.class || got.Rule != c.rule {
			t.Errorf("%s: Classify(%v) = %s by %q, want %s by %q", c.name, c.err, got.Class, got.Rule, c.class, c.rule)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]clickhouse.Config{
		"bad database": {Database: "x; DROP"},
		"tiny payload": {MaxPayloadBytes: 1},
		"long linger":  {Linger: 2 * clickhouse.LingerMax},
	} {
		if _, err := clickhouse.New(t.Context(), &cfg); !errors.Is(err, clickhouse.ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}

// A sink pointed at a database that does not exist yet creates it.
func TestNewCreatesTheDatabase(t *testing.T) {
	t.Parallel()
	addr, _ := testenv.NewClickHouseDatabase(t)
	db := fmt.Sprintf("fw_test_new_%d", time.Now().UnixNano())
	s, err := clickhouse.New(context.Background(), &clickhouse.Config{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Cleanup(func() {
		conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
		if err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			conn.Close()
		}
	})
	if _, err := s.Apply(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}
