package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
	st, dsn, natsURL := serveDeps(t, ctx)
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", tenancy.DestPostgres, 3); err != nil {
		t.Fatal(err)
	}

	base, authLine, metricsLine, stop, done := startServeEnv(t, ctx, dsn, natsURL, nil, "--listen", "127.0.0.1:0", "--refresh", "500ms")
	if !strings.Contains(authLine, "open without a token") || !strings.Contains(authLine, "--require-token") {
		t.Errorf("start line on loopback: %q", authLine)
	}
	if !strings.Contains(metricsLine, `no --sink-metrics: events/s and p95 read "no data"`) {
		t.Errorf("start line without sink metrics: %q", metricsLine)
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
		snap.Throughput || snap.RefreshMillis != 500 || !snap.Partners {
		t.Errorf("snapshot %+v", snap)
	}
	// The partners panel reads the B2B delivery log (internal/dashboard's
	// tests fill one).
	res, err = http.Get(base + "/ui/api/partners?tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	var partners dashboard.PartnerList
	err = json.NewDecoder(res.Body).Decode(&partners)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || partners.Tenant != "acme" || partners.Partners == nil {
		t.Errorf("api/partners: %d %v %+v", res.StatusCode, err, partners)
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

// TestServeReadsSinkMetrics runs `fairway serve` with the /metrics address
// of a sinks process in FAIRWAY_SERVE_SINK_METRICS, as an operator running
// the services separately does: the dashboard's destinations get events/s
// and p95 from it, without the demo. A bad --sink-metrics is a usage error
// naming the flag.
func TestServeReadsSinkMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, dsn, natsURL := serveDeps(t, ctx)
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", tenancy.DestPostgres, 1); err != nil {
		t.Fatal(err)
	}
	// A sinks process's metrics: the runner's series, served as cmd/sinks
	// serves them.
	reg := prometheus.NewRegistry()
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{Name: dashboard.AppliedMetric}, []string{"dest"})
	e2e := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: dashboard.EndToEndMetric,
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 14)}, []string{"dest"})
	reg.MustRegister(applied, e2e)
	sinks := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer sinks.Close()
	addr := strings.TrimPrefix(sinks.URL, "http://")

	base, _, metricsLine, _, _ := startServeEnv(t, ctx, dsn, natsURL, map[string]string{"FAIRWAY_SERVE_SINK_METRICS": addr},
		"--listen", "127.0.0.1:0", "--refresh", "200ms")
	if want := "events/s and p95 from the sink metrics at " + sinks.URL + "/metrics"; !strings.Contains(metricsLine, want) {
		t.Errorf("start line %q, want %q", metricsLine, want)
	}
	for {
		applied.WithLabelValues(tenancy.DestPostgres).Add(10)
		e2e.WithLabelValues(tenancy.DestPostgres).Observe(0.2)
		res, err := http.Get(base + "/ui/api/status")
		if err != nil {
			t.Fatal(err)
		}
		var snap dashboard.Snapshot
		err = json.NewDecoder(res.Body).Decode(&snap)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Dests) == 1 && snap.Dests[0].Stats != nil && snap.Dests[0].Stats.EventsPerSecond > 0 && snap.Dests[0].Stats.P95Seconds != nil {
			if !snap.Throughput || len(snap.MetricsSources) != 1 || snap.MetricsSources[0].Error != "" {
				t.Errorf("metrics sources %+v", snap.MetricsSources)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no events/s and p95 for postgres from the sink metrics: %+v", snap.Dests)
		case <-time.After(500 * time.Millisecond):
		}
	}

	for _, bad := range []string{"ftp://x/metrics", "http://"} {
		_, _, err := fairway(t, dsn, "serve", "--sink-metrics", bad)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--sink-metrics") {
			t.Errorf("--sink-metrics %s: %v, want a usage error naming the flag", bad, err)
		}
	}
}

// TestServeAsksForATokenBeyondLoopback runs `fairway serve` on every
// interface (:0), and on loopback with --require-token: the JSON API
// answers 401 without a valid token, every tenant to an admin token and
// only its own rows to a tenant token; the page itself needs none.
func TestServeAsksForATokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, dsn, natsURL := serveDeps(t, ctx)
	tokens := map[string]string{}
	var err error
	for _, tn := range []string{"acme", "globex"} {
		if _, tokens[tn], err = st.CreateTenant(ctx, tn, ""); err != nil {
			t.Fatal(err)
		}
		if err := st.SetLimit(ctx, tn, tenancy.DestPostgres, 2); err != nil {
			t.Fatal(err)
		}
	}
	if tokens["admin"], err = st.IssueAdminToken(ctx, "ops"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args     []string
		authLine string
	}{
		{[]string{"--listen", ":0"}, "asks for a token, as it listens beyond loopback"},
		{[]string{"--listen", "127.0.0.1:0", "--require-token"}, "asks for a token (--require-token)"},
	} {
		base, authLine, _, _ := startServe(t, ctx, dsn, natsURL, tc.args...)
		if !strings.Contains(authLine, tc.authLine) {
			t.Errorf("%v: start line %q, want %q", tc.args, authLine, tc.authLine)
		}
		status := func(token string) (int, string) {
			t.Helper()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/api/status", nil)
			if err != nil {
				t.Fatal(err)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var snap dashboard.Snapshot
			if err := json.NewDecoder(res.Body).Decode(&snap); err != nil {
				t.Fatal(err)
			}
			var ts []string
			for _, r := range snap.Rows {
				ts = append(ts, r.Tenant)
			}
			return res.StatusCode, strings.Join(ts, " ")
		}
		for who, want := range map[string]string{"": "401 ", "fw_unknown": "401 ", "admin": "200 acme globex", "acme": "200 acme", "globex": "200 globex"} {
			tok := cmp.Or(tokens[who], who)
			if code, ts := status(tok); fmt.Sprint(code, " ", ts) != want {
				t.Errorf("%v, token of %q: %d %q, want %s", tc.args, who, code, ts, want)
			}
		}
		res, err := http.Get(base + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%v: the page without a token: %d", tc.args, res.StatusCode)
		}
	}
}

// serveDeps is what `fairway serve` reads: a migrated database with a
// store on it, and embedded JetStream with the events stream.
func serveDeps(t *testing.T, ctx context.Context) (st *tenancy.Store, dsn, natsURL string) {
	t.Helper()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, _, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return st, dsn, ns.ClientURL()
}

// startServe runs `fairway serve args...` and returns the base URL it
// serves on (on 127.0.0.1 when it listens on every interface), the start
// line about tokens, a function that stops it and the channel its result
// arrives on.
func startServe(t *testing.T, ctx context.Context, dsn, natsURL string, args ...string) (base, authLine string, stop func(), done <-chan error) {
	t.Helper()
	base, authLine, _, stop, done = startServeEnv(t, ctx, dsn, natsURL, nil, args...)
	return base, authLine, stop, done
}

// startServeEnv is startServe with env as the environment; it also returns
// the start line about sink metrics.
func startServeEnv(t *testing.T, ctx context.Context, dsn, natsURL string, env map[string]string, args ...string) (base, authLine, metricsLine string, stop func(), done <-chan error) {
	t.Helper()
	out := make(lines, 16)
	cmd := newRootCmd(func(k string) string { return env[k] }, out, io.Discard)
	cmd.SetArgs(append([]string{"serve", "--database-url", dsn, "--nats-url", natsURL}, args...))
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	result := make(chan error, 1)
	go func() { result <- cmd.ExecuteContext(runCtx) }()
	next := func() string {
		t.Helper()
		select {
		case line := <-out:
			return line
		case err := <-result:
			t.Fatalf("serve stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("serve printed no start line")
		}
		return ""
	}
	line := next()
	m := regexp.MustCompile(`http://(\S+)/ui/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no URL in %q", line)
	}
	host, port, err := net.SplitHostPort(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	authLine = next()
	return "http://" + net.JoinHostPort(host, port), authLine, next(), cancel, result
}
