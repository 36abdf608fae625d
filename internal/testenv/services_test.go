package testenv_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// These tests check that the servers scripts/dev-services.sh provides work
// with the drivers the project uses. They fail, never skip, when a server is
// missing.

func TestNewDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dsn := testenv.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.Redact(dsn), err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", testenv.Redact(dsn), err)
	}
	defer conn.Close(context.Background())

	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if want := strings.TrimPrefix(u.Path, "/"); db != want {
		t.Fatalf("connected to database %q, want %q", db, want)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE products (tenant text, product_id text, version bigint, PRIMARY KEY (tenant, product_id))`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO products SELECT 't' || (i % 3), 'p' || i, i FROM generate_series(1, 100) AS i`); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var n, sum int64
	if err := conn.QueryRow(ctx, `SELECT count(*), sum(version) FROM products WHERE tenant = $1`, "t1").Scan(&n, &sum); err != nil {
		t.Fatalf("query: %v", err)
	}
	// i % 3 == 1 for i in 1..100: 1, 4, ..., 100 (34 rows, sum 1717).
	if n != 34 || sum != 1717 {
		t.Fatalf("tenant t1: got %d rows with version sum %d, want 34 and 1717", n, sum)
	}
}

func TestNewClickHouseDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	addr, db := testenv.NewClickHouseDatabase(t)
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Auth:        clickhouse.Auth{Database: db},
		DialTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatalf("open ClickHouse %s: %v", addr, err)
	}
	defer conn.Close()

	if err := conn.Exec(ctx, `CREATE TABLE product_events (
		tenant String,
		product_id String,
		version UInt64,
		occurred_at DateTime
	) ENGINE = MergeTree ORDER BY (tenant, product_id, version)`); err != nil {
		t.Fatalf("create table: %v", err)
	}

	// ClickHouse 18.16 accepts PrepareBatch only when the INSERT names its
	// columns (see DESIGN.md).
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO product_events (tenant, product_id, version, occurred_at)")
	if err != nil {
		t.Fatalf("prepare batch: %v", err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const rows = 1000
	for i := range rows {
		tenant := fmt.Sprintf("t%d", i%4)
		if err := batch.Append(tenant, fmt.Sprintf("p%d", i), uint64(i+1), base.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("append row %d: %v", i, err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send batch: %v", err)
	}

	var total uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM product_events").Scan(&total); err != nil {
		t.Fatalf("count: %v", err)
	}
	if total != rows {
		t.Fatalf("count() = %d, want %d", total, rows)
	}

	var (
		n      uint64
		maxVer uint64
		last   time.Time
	)
	if err := conn.QueryRow(ctx,
		"SELECT count(), max(version), max(occurred_at) FROM product_events WHERE tenant = ?", "t3",
	).Scan(&n, &maxVer, &last); err != nil {
		t.Fatalf("query tenant t3: %v", err)
	}
	if n != rows/4 || maxVer != rows || !last.Equal(base.Add((rows-1)*time.Second)) {
		t.Fatalf("tenant t3: got count %d, max version %d, last %s; want %d, %d, %s",
			n, maxVer, last.UTC(), rows/4, rows, base.Add((rows-1)*time.Second))
	}
}
