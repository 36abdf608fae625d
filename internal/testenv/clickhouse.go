package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// DefaultClickHouseAddr is used when CLICKHOUSE_ADDR is not set: the native
// protocol port of a local server.
const DefaultClickHouseAddr = "127.0.0.1:9000"

const chHint = "start one with `make services` (scripts/dev-services.sh) or point CLICKHOUSE_ADDR at a ClickHouse native port (host:port)"

// ClickHouseAddr returns the native-protocol address tests connect to.
func ClickHouseAddr() string {
	if a := os.Getenv("CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return DefaultClickHouseAddr
}

// NewClickHouseDatabase creates a fresh ClickHouse database for the test and
// returns the server address and the database name. It is dropped when the
// test ends. The test fails, with instructions, when ClickHouse does not
// answer.
func NewClickHouseDatabase(t testing.TB) (addr, database string) {
	t.Helper()
	addr = ClickHouseAddr()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		DialTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatalf("ClickHouse at %s: %v\n%s", addr, err, chHint)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ClickHouse not reachable at %s: %v\n%s", addr, err, chHint)
	}
	database = "fw_test_" + randHex(6)
	if err := conn.Exec(ctx, "CREATE DATABASE "+database); err != nil {
		t.Fatalf("create ClickHouse database %s: %v", database, err)
	}
	t.Cleanup(func() {
		if os.Getenv("FAIRWAY_KEEP_TEST_DB") != "" {
			return
		}
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
		if err != nil {
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+database)
	})
	return addr, database
}
