package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "FAIRWAY_DISPATCHER_DEST": "postgres, b2b:acme"}
	c, err := parseConfig([]string{"--batch-size", "100", "--lease-ttl", "5s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Dispatch.Dests) != 2 || c.Dispatch.Dests[1] != "b2b:acme" || c.Dispatch.BatchSize != 100 || c.LeaseTTL != 5*time.Second {
		t.Fatalf("config %+v", c)
	}
	if c.Dispatch.BatchLogRetention != 7*24*time.Hour {
		t.Fatalf("--batch-log-retention default %v, want 168h", c.Dispatch.BatchLogRetention)
	}
	for arg, want := range map[string]time.Duration{"36h": 36 * time.Hour, "-1s": -time.Second} {
		c, err := parseConfig([]string{"--batch-log-retention", arg}, func(k string) string { return env[k] }, io.Discard)
		if err != nil || c.Dispatch.BatchLogRetention != want {
			t.Fatalf("--batch-log-retention %s: %v, %v", arg, c.Dispatch.BatchLogRetention, err)
		}
	}
	if _, err := parseConfig(nil, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("missing DATABASE_URL accepted")
	}
	get := func(k string) string { return env[k] }
	c, err = parseConfig([]string{"--dampen", "postgres:100000/1m/4", "--dampen", "b2b:acme:500/30s"}, get, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Dispatch.Dampening["postgres"]; d == nil || d.Threshold != 100000 || d.Window != time.Minute || d.Factor != 4 {
		t.Fatalf("postgres dampening %+v", d)
	}
	if d := c.Dispatch.Dampening["b2b:acme"]; d == nil || d.Threshold != 500 || d.Window != 30*time.Second || d.Factor != 0 {
		t.Fatalf("b2b:acme dampening %+v", d)
	}
	for _, bad := range []string{"postgres", "postgres:10", "postgres:x/1m", "postgres:0/1m", "postgres:10/1ms", "postgres:10/1m/0.5",
		"post gres:10/1m", "postgres:10/1m/2/3"} {
		if _, err := parseConfig([]string{"--dampen", bad}, get, io.Discard); err == nil {
			t.Errorf("--dampen %q accepted", bad)
		}
	}
	if _, err := parseConfig([]string{"--dampen", "postgres:10/1m", "--dampen", "postgres:20/1m"}, get, io.Discard); err == nil {
		t.Error("--dampen twice for one destination accepted")
	}

	c, err = parseConfig([]string{"--dest-batch-size", "clickhouse=8000", "--dest-batch-size", "b2b:acme=50"}, get, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"clickhouse": 8000, "b2b:acme": 50}; !maps.Equal(c.Dispatch.DestBatchSize, want) {
		t.Fatalf("--dest-batch-size: %v, want %v", c.Dispatch.DestBatchSize, want)
	}
	// The variables of repeatable flags hold several values, comma-separated.
	env["FAIRWAY_DISPATCHER_DEST_BATCH_SIZE"] = "clickhouse=8000, b2b:acme=50"
	env["FAIRWAY_DISPATCHER_DAMPEN"] = "postgres:100000/1m/4,b2b:acme:500/30s"
	env["FAIRWAY_DISPATCHER_HOLDER"] = "d1"
	c, err = parseConfig(nil, get, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"clickhouse": 8000, "b2b:acme": 50}; !maps.Equal(c.Dispatch.DestBatchSize, want) || len(c.Dispatch.Dampening) != 2 ||
		c.Dispatch.Holder != "d1" || c.Listen != bootstrap.DispatcherListenDefault {
		t.Fatalf("from the environment: %+v", c)
	}
	delete(env, "FAIRWAY_DISPATCHER_DEST_BATCH_SIZE")
	delete(env, "FAIRWAY_DISPATCHER_DAMPEN")
	for _, bad := range [][]string{{"clickhouse"}, {"clickhouse=x"}, {"=10"}, {"clickhouse=1", "clickhouse=2"}, {"clickhouse=1,clickhouse=2"}} {
		var args []string
		for _, v := range bad {
			args = append(args, "--dest-batch-size", v)
		}
		if _, err := parseConfig(args, get, io.Discard); err == nil {
			t.Errorf("--dest-batch-size %q accepted", bad)
		}
	}
	if c, err := parseConfig(nil, get, io.Discard); err != nil || c.WorkStorage != work.StorageFile {
		t.Errorf("WORK storage by default: %q, %v; want file", c.WorkStorage, err)
	}
	if c, err := parseConfig([]string{"--work-storage", "memory"}, get, io.Discard); err != nil || c.WorkStorage != work.StorageMemory {
		t.Errorf("--work-storage memory: %q, %v", c.WorkStorage, err)
	}
	if _, err := parseConfig([]string{"--work-storage", "disk"}, get, io.Discard); err == nil || !strings.Contains(err.Error(), "want file or memory") {
		t.Errorf("--work-storage disk: %v, want an error naming file and memory", err)
	}
}

// The binary: --help exits 0 and names every variable, never a password
// from the environment; --version names the commit; flags take two
// dashes.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testenv.BuildCommands(t, "dispatcher"), "dispatcher")
	secrets := []string{"NATS_URL=nats://dispatcher:hunter2@n:4222", "DATABASE_URL=postgres://fairway:hunter2@db/fairway"}
	out, errOut, code := testenv.RunCommand(t, bin, secrets, "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"(env FAIRWAY_DISPATCHER_LISTEN)", "(env FAIRWAY_DISPATCHER_DEST)", "(env FAIRWAY_DISPATCHER_DAMPEN)",
		"(env NATS_URL, set)", "(env DATABASE_URL, set)", "(env NATS_CREDS)", "(env FAIRWAY_LOG_LEVEL)", "(env FAIRWAY_LOG_FORMAT)", "--version"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("--help shows a password from the environment:\n%s", out)
	}
	out, errOut, code = testenv.RunCommand(t, bin, nil, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut)
	}
	testenv.CheckVersion(t, "dispatcher", out)
	if _, errOut, code = testenv.RunCommand(t, bin, nil, "-dest", "postgres"); code != 2 || !strings.Contains(errOut, "--dest") {
		t.Errorf("-dest: exit %d, %q; want 2 and the two-dash spelling", code, errOut)
	}
}

// setupRun starts NATS and a migrated database with tenant acme for run.
func setupRun(t *testing.T) (*server.Server, *nats.Conn, string, *pgxpool.Pool, *tenancy.Store) {
	t.Helper()
	srv, nc := testenv.NATS(t)
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EnsureTenant(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	return srv, nc, dsn, pool, store
}

// run against real servers: an event of a tenant with a partner becomes a
// work item for each static destination and for the partner; /metrics
// counts them; shutdown is clean.
func TestRunDispatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, nc, dsn, pool, _ := setupRun(t)
	reg, _ := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if _, err := reg.Add(ctx, b2b.Partner{Tenant: "acme", Name: "p1", URL: "http://127.0.0.1:9/hook", Secret: []byte("0123456789abcdef0123456789abcdef"), Enabled: true}); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}
	cfg, err := parseConfig([]string{"--listen", addr, "--tenant-metrics-interval", "1s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx, cfg) }()

	js, _ := jetstream.New(nc)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	if r := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: "p", Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)}); r.Err != nil {
		t.Fatal(r.Err)
	}
	testenv.Eventually(t, time.Minute, "work items for postgres, clickhouse and b2b:p1", func() error {
		s, err := js.Stream(ctx, work.StreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("work.>"))
		if err != nil {
			return err
		}
		if len(info.State.Subjects) != 3 {
			return fmt.Errorf("work items on %v", slices.Collect(maps.Keys(info.State.Subjects)))
		}
		return nil
	})
	// No sink runs: acme's batch stays in flight, and the backlog sampler
	// (every second here) shows it.
	var body []byte
	testenv.Eventually(t, time.Minute, "acme's batch in flight in the metrics", func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `fairway_tenant_in_flight{dest="postgres",tenant="acme"} 1`) {
			return fmt.Errorf("metrics lack it:\n%.3000s", body)
		}
		return nil
	})
	for _, want := range []string{`fairway_dispatcher_items_total{dest="b2b:p1"} 1`, `fairway_backlog_events{dest="postgres"} 0`,
		`fairway_tenant_backlog_events{dest="postgres",tenant="other"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %s:\n%.3000s", want, body)
		}
	}
	// Two connections: the doorbell's (its ordered consumer delivered the
	// event to it) and the main one.
	conns := dispatcherConns(t, srv)
	if len(conns) != 2 || conns["fairway-dispatcher"] == nil || conns["fairway-dispatcher-doorbell"] == nil {
		t.Fatalf("dispatcher connections %v, want fairway-dispatcher and fairway-dispatcher-doorbell", slices.Collect(maps.Keys(conns)))
	}
	if bell := conns["fairway-dispatcher-doorbell"]; bell.OutMsgs < 1 || bell.NumSubs < 1 {
		t.Errorf("doorbell connection: %d subscriptions, %d messages delivered to it; want its consumer and the event", bell.NumSubs, bell.OutMsgs)
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
	// The server notices a closed socket a moment later.
	testenv.Eventually(t, 10*time.Second, "the dispatcher's connections closed", func() error {
		if conns := dispatcherConns(t, srv); len(conns) > 0 {
			return fmt.Errorf("still open: %v", slices.Collect(maps.Keys(conns)))
		}
		return nil
	})
}

// A dispatcher whose stream went back under it (PRODUCTS deleted and
// created again) stops dispatching, and the process's run returns the
// cause and lets go of its port, so that its supervisor restarts it.
func TestRunExitsWhenTheStreamGoesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, nc, dsn, _, store := setupRun(t)
	js, _ := jetstream.New(nc)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	for v := range 3 {
		if r := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: "p", Version: int64(v + 1), Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}
	cfg, err := parseConfig([]string{"--listen", addr, "--dest", "postgres", "--poll-interval", "200ms"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	testenv.Eventually(t, time.Minute, "acme's events dispatched", func() error {
		c, err := store.Cursor(ctx, "acme", "postgres")
		if err != nil || c != 4 {
			return fmt.Errorf("cursor %d: %v", c, err)
		}
		return nil
	})

	if err := js.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dispatch.ErrStreamMovedBack) {
			t.Fatalf("run returned %v, want ErrStreamMovedBack", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after the stream went back")
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the dispatcher's port is still taken: %v", err)
	}
	ln.Close()
}

// dispatcherConns returns the server's open client connections whose name
// starts with fairway-dispatcher, by name.
func dispatcherConns(t *testing.T, srv *server.Server) map[string]*server.ConnInfo {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{State: server.ConnOpen, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*server.ConnInfo{}
	for _, c := range cz.Conns {
		if strings.HasPrefix(c.Name, "fairway-dispatcher") {
			out[c.Name] = c
		}
	}
	return out
}

// --memory-limit defaults to MemoryLimitDefault, takes sizes with units,
// and yields to GOMEMLIMIT (which the runtime applied) unless it is given.
func TestMemoryLimitFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want int64
	}{
		{nil, nil, MemoryLimitDefault},
		{[]string{"--memory-limit", "1GiB"}, nil, 1 << 30},
		{nil, map[string]string{"FAIRWAY_DISPATCHER_MEMORY_LIMIT": "256MiB"}, 256 << 20},
		{nil, map[string]string{"GOMEMLIMIT": "300MiB"}, 0},
		{[]string{"--memory-limit", "0"}, nil, 0},
		{[]string{"--memory-limit", "200MiB"}, map[string]string{"GOMEMLIMIT": "300MiB"}, 200 << 20},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x"}
		maps.Copy(env, tc.env)
		c, err := parseConfig(tc.args, func(k string) string { return env[k] }, io.Discard)
		if err != nil || int64(c.MemoryLimit) != tc.want {
			t.Errorf("%v %v: memory limit %d, %v; want %d", tc.args, tc.env, c.MemoryLimit, err, tc.want)
		}
	}
	if _, err := parseConfig([]string{"--memory-limit", "12MB"}, func(k string) string { return map[string]string{"DATABASE_URL": "x"}[k] }, io.Discard); err == nil {
		t.Error("--memory-limit 12MB accepted")
	}
}
