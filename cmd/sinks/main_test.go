package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@h/db", "NATS_URL": "nats://n:4222", "CLICKHOUSE_ADDR": "c:9000"}
	getenv := func(k string) string { return env[k] }
	c, err := parseConfig([]string{"--dest", "clickhouse", "--concurrency", "8", "--ack-wait", "1m", "--max-deliver", "5",
		"--backoff-initial", "1s", "--backoff-max", "1m", "--backoff-max-elapsed", "1h", "--backoff-jitter", "0",
		"--clickhouse-linger", "0", "--clickhouse-group-rows", "-1", "--clickhouse-fill-rows", "2000", "--clickhouse-fill-wait", "0"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Runner
	if c.Dest != "clickhouse" || r.Dest != "clickhouse" || c.NATS.URL != "nats://n:4222" || c.ClickHouseAddr != "c:9000" ||
		r.Concurrency != 8 || r.AckWait != time.Minute || r.MaxDeliver != 5 || r.Backoff.Initial != time.Second ||
		r.Backoff.Max != time.Minute || r.Backoff.MaxElapsed != time.Hour || r.Backoff.Randomization >= 0 ||
		c.ClickHouseLinger >= 0 || c.ClickHouseGroupRows != -1 || c.ClickHouseFillRows != 2000 || c.ClickHouseFillWait >= 0 {
		t.Fatalf("parsed %+v", c)
	}
	d, err := parseConfig([]string{"--dest", "clickhouse"}, getenv, io.Discard)
	if err != nil || d.ClickHouseLinger != clickhouse.LingerDefault || d.ClickHouseGroupRows != clickhouse.GroupRowsDefault ||
		d.ClickHouseFillRows != clickhouse.FillRowsDefault || d.ClickHouseFillWait != clickhouse.FillWaitDefault ||
		d.Runner.Concurrency != clickhouse.ConcurrencyDefault {
		t.Fatalf("defaults: linger %s, group rows %d, fill %d/%s, %v", d.ClickHouseLinger, d.ClickHouseGroupRows, d.ClickHouseFillRows, d.ClickHouseFillWait, err)
	}
	if p, err := parseConfig([]string{"--dest", "postgres"}, getenv, io.Discard); err != nil || p.Runner.Concurrency != runner.ConcurrencyDefault {
		t.Fatalf("postgres: concurrency %d, %v; want %d", p.Runner.Concurrency, err, runner.ConcurrencyDefault)
	}
	for _, bad := range [][]string{
		{},                             // no dest
		{"--dest", "s3"},               // unknown dest
		{"--dest", "b2b:Erp"},          // partner name breaks the tenant-id rule
		{"--dest", "b2b"},              // b2b without a partner
		{"--dest", "postgres:x"},       // postgres has no instances
		{"--dest", "postgres", "junk"}, // stray argument
		{"--dest", "postgres", "--ack-wait", "soon"},
	} {
		if _, err := parseConfig(bad, getenv, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) accepted", bad)
		}
	}
	if _, err := parseConfig([]string{"--dest", "postgres"}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("missing DATABASE_URL: %v", err)
	}
	// The default --listen follows --dest, so the sinks of different
	// destinations run on one host without flags; --listen or its
	// variable wins.
	for dest, want := range map[string]string{"postgres": "127.0.0.1:9102", "clickhouse": "127.0.0.1:9103", "b2b:erp": "127.0.0.1:0"} {
		if c, err := parseConfig([]string{"--dest", dest}, getenv, io.Discard); err != nil || c.Listen != want {
			t.Errorf("--dest %s: --listen %q (%v), want %s", dest, c.Listen, err, want)
		}
	}
	env["FAIRWAY_SINKS_LISTEN"] = ":7000"
	env["FAIRWAY_SINKS_DEST"] = "b2b:erp"
	env["FAIRWAY_SINKS_CONCURRENCY"] = "3"
	env["FAIRWAY_SECRET_KEY"] = strings.Repeat("ab", 32)
	if c, err := parseConfig(nil, getenv, io.Discard); err != nil || c.Listen != ":7000" || c.Dest != "b2b:erp" || c.Runner.Concurrency != 3 || len(c.SecretKey) != 32 {
		t.Errorf("from the environment: %+v, %v", c, err)
	}
	if c, err := parseConfig([]string{"--listen", ":7001"}, getenv, io.Discard); err != nil || c.Listen != ":7001" {
		t.Errorf("--listen over FAIRWAY_SINKS_LISTEN: %q, %v", c.Listen, err)
	}
}

// The binary: --help exits 0 and names every variable (FAIRWAY_SECRET_KEY
// too, which has no flag), never a secret from the environment, and the
// default ports by destination; --version names the commit; flags take
// two dashes.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testenv.BuildCommands(t, "sinks"), "sinks")
	secrets := []string{"NATS_URL=nats://sinks:hunter2@n:4222", "DATABASE_URL=postgres://fairway:hunter2@db/fairway",
		"FAIRWAY_SECRET_KEY=" + strings.Repeat("hunter2", 9)}
	out, errOut, code := testenv.RunCommand(t, bin, secrets, "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"(env FAIRWAY_SINKS_DEST)", "(env FAIRWAY_SINKS_LISTEN)", "(env CLICKHOUSE_ADDR", "(env FAIRWAY_SINKS_ACK_WAIT)",
		"(env NATS_URL, set)", "(env DATABASE_URL, set)", "(env NATS_CREDS)", "(env FAIRWAY_LOG_LEVEL)", "(env FAIRWAY_LOG_FORMAT)",
		"FAIRWAY_SECRET_KEY", "(set)", "postgres 127.0.0.1:9102", "clickhouse 127.0.0.1:9103", "needs a --listen of its own", "--version"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("--help shows a secret from the environment:\n%s", out)
	}
	out, errOut, code = testenv.RunCommand(t, bin, nil, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut)
	}
	testenv.CheckVersion(t, "sinks", out)
	if _, errOut, code = testenv.RunCommand(t, bin, nil, "-dest", "postgres"); code != 2 || !strings.Contains(errOut, "--dest") {
		t.Errorf("-dest: exit %d, %q; want 2 and the two-dash spelling", code, errOut)
	}
}

// The command applies a work item end to end, serves /metrics and /healthz,
// and returns nil on shutdown.
func TestRunPostgres(t *testing.T) {
	t.Parallel()
	runOneItem(t, "postgres", nil, nil, func(pool *pgxpool.Pool) error {
		var v int64
		if err := pool.QueryRow(context.Background(), `SELECT version FROM catalog.products WHERE tenant_id = 'acme' AND product_id = 'p1'`).Scan(&v); err != nil {
			return err
		}
		if v != 3 {
			return fmt.Errorf("version %d", v)
		}
		return nil
	})
}

func TestRunB2B(t *testing.T) {
	t.Parallel()
	secret := []byte("a-partner-secret-of-enough-bytes")
	rcv := b2btest.New(t, b2btest.Options{Secret: secret})
	runOneItem(t, "b2b:p1", []string{"--allow-insecure-http"}, func(pool *pgxpool.Pool) {
		reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
		if err != nil {
			t.Fatal(err)
		}
		store, _ := tenancy.New(pool, nil)
		if _, err := store.EnsureTenant(context.Background(), "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Add(context.Background(), b2b.Partner{Tenant: "acme", Name: "p1", URL: rcv.URL(), Secret: secret, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}, func(*pgxpool.Pool) error {
		if st, ok := rcv.Get("acme", "p1"); !ok || st.Version != 3 {
			return fmt.Errorf("partner has %+v (found %v)", st, ok)
		}
		return nil
	})
}

// runOneItem starts `sinks --dest dest` against real servers, hands it one
// work item as the dispatcher would, waits until applied says the event
// landed, checks /healthz and /metrics, and shuts it down.
func runOneItem(t *testing.T, dest string, args []string, prepare func(*pgxpool.Pool), applied func(*pgxpool.Pool) error) {
	t.Helper()
	srv, nc := testenv.NATS(t)
	dsn := testenv.NewDatabase(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg, err := parseConfig(append([]string{"--dest", dest, "--listen", addr, "--backoff-initial", "1ms", "--backoff-max", "10ms"}, args...),
		func(k string) string { return map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Runner.FetchWait = 200 * time.Millisecond
	var logs testenv.Buffer
	cfg.Log.Level = "debug"
	if cfg.Runner.Logger, err = newLogger(cfg, &logs); err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	pool, err := pgxpool.New(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrate.Up(bg, dsn); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(pool)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	t.Cleanup(cancel)

	// Produce a work item as the dispatcher would.
	js, _ := jetstream.New(nc)
	if _, err := events.EnsureStream(bg, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	// The dispatcher creates WORK; the sinks wait for it.
	if _, err := work.EnsureStream(bg, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	r := pub.PublishOne(bg, events.Event{Tenant: "acme", ProductID: "p1", Version: 3, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: json.RawMessage(`{"a":1}`)})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	testenv.Eventually(t, 60*time.Second, "sinks to start (WORK stream and consumer)", func() error {
		s, err := js.Stream(bg, work.StreamName)
		if err != nil {
			return err
		}
		_, err = s.Consumer(bg, cfg.Runner.WithDefaults(dest).Consumer)
		return err
	})
	store, _ := tenancy.New(pool, nil)
	l, err := store.Dispatch(bg, "acme", dest, "test", 1, r.Seq)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := work.Item{Tenant: "acme", Dest: dest, FromSeq: 1, ToSeq: r.Seq, Count: 1, LeaseID: l.ID, Token: l.Token}.Msg()
	if _, err := js.PublishMsg(bg, m); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the event applied", func() error { return applied(pool) })
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": fmt.Sprintf(`fairway_sink_applied_events_total{dest=%q} 1`, dest)} {
		testenv.Eventually(t, 60*time.Second, path, func() error {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
				return fmt.Errorf("%s: %d %q lacks %q", path, resp.StatusCode, b, want)
			}
			return nil
		})
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not return after shutdown")
	}
	// Each line names the destination at most once; the lines of the
	// process itself name it too.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	for _, l := range lines {
		if n := strings.Count(l, " dest="); n > 1 {
			t.Errorf("dest= %d times: %s", n, l)
		}
		if strings.Contains(l, "sinks listening") && !strings.Contains(l, " dest="+dest) {
			t.Errorf("no dest=%s: %s", dest, l)
		}
	}
	if len(lines) < 3 {
		t.Errorf("only %d log lines at debug level:\n%s", len(lines), logs.String())
	}
}
