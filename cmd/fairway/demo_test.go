package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestDemoStopsWhenEverythingIsApplied runs the demo with a small workload
// and a --duration far longer than it needs, against the real servers: it
// stops once every destination applied everything it published, well
// before --duration, and its summary says so.
func TestDemoStopsWhenEverythingIsApplied(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, chAddr := testenv.DatabaseURL(), testenv.ClickHouseAddr()
	db := fmt.Sprintf("fw_test_demo_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if err := dropDatabases(context.Background(), admin, chAddr, db); err != nil {
			t.Logf("drop databases %s: %v", db, err)
		}
	})
	var out testenv.Buffer
	c := &cli{getenv: func(k string) string {
		if k == "CLICKHOUSE_ADDR" {
			return chAddr
		}
		return ""
	}, out: &out, errOut: io.Discard, databaseURL: admin}

	const duration = 2 * time.Minute
	start := time.Now()
	err := c.runDemo(ctx, demo.Config{Duration: duration, NoisyRows: 2_000, SmallTenants: 2, SmallRate: 5}, "127.0.0.1:0", db, bootstrap.LogConfig{Format: "text", Level: "info"})
	elapsed := time.Since(start)
	got := out.String()
	if m := regexp.MustCompile(`logs: (\S+)`).FindStringSubmatch(got); m != nil {
		if t.Failed() || err != nil {
			t.Logf("demo logs: %s", m[1])
		} else {
			defer os.Remove(m[1])
		}
	}
	if err != nil {
		t.Fatalf("demo: %v (PostgreSQL from DATABASE_URL, ClickHouse from CLICKHOUSE_ADDR: start both with `make services`)\n%s", err, got)
	}
	if elapsed > duration/4 {
		t.Errorf("the demo ran %s of its --duration %s with a small workload", elapsed.Round(time.Second), duration)
	}
	for _, want := range []string{
		"(stopped: every destination applied every event stored)",
		"noisy: import succeeded, 2000 of 2000 rows stored",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "not applied yet") {
		t.Errorf("the demo stopped with events not applied:\n%s", got)
	}
}

// dropDatabases drops the PostgreSQL and ClickHouse databases named db.
func dropDatabases(ctx context.Context, adminURL, chAddr, db string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	c, err := ch.Open(&ch.Options{Addr: []string{chAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
}
