package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// lines hands what a command prints to the test, a write at a time.
type lines chan string

func (l lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

func TestServeDashboard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", tenancy.DestPostgres, 3); err != nil {
		t.Fatal(err)
	}
	ns, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}

	out := make(lines, 16)
	c := &cli{getenv: func(string) string { return "" }, out: out, errOut: io.Discard,
		databaseURL: dsn, nats: bootstrap.NATSConfig{URL: ns.ClientURL()}, logFormat: "text", logLevel: "warn"}
	cmd := c.serveCmd()
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--refresh", "500ms"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(runCtx) }()

	var base string
	select {
	case line := <-out:
		m := regexp.MustCompile(`http://\S+/ui/`).FindString(line)
		if m == "" {
			t.Fatalf("no URL in %q", line)
		}
		base = strings.TrimSuffix(m, "/ui/")
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("serve printed no address")
	}

	for path, want := range map[string]string{"/": `id="tenants"`, "/ui/": `id="tenants"`, "/healthz": "ok"} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %.200q", path, res.StatusCode, body)
		}
	}
	res, err := http.Get(base + "/ui/api/status")
	if err != nil {
		t.Fatal(err)
	}
	var snap dashboard.Snapshot
	err = json.NewDecoder(res.Body).Decode(&snap)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("api/status: %d %v %s", res.StatusCode, err, snap.Error)
	}
	if len(snap.Rows) != 1 || snap.Rows[0].Tenant != "acme" || snap.Rows[0].Limit != 3 || snap.Rows[0].Reason != "idle" ||
		snap.Throughput || snap.RefreshMillis != 500 {
		t.Errorf("snapshot %+v", snap)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after cancel: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("serve did not stop")
	}
}
