package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

	base, authLine, stop, done := startServe(t, ctx, dsn, natsURL, "--listen", "127.0.0.1:0", "--refresh", "500ms")
	if !strings.Contains(authLine, "open without a token") || !strings.Contains(authLine, "--require-token") {
		t.Errorf("start line on loopback: %q", authLine)
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
	ns, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
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
	out := make(lines, 16)
	c := &cli{getenv: func(string) string { return "" }, out: out, errOut: io.Discard}
	cmd := c.serveCmd()
	cmd.SetArgs(append(args, "--database-url", dsn, "--nats-url", natsURL))
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
	return "http://" + net.JoinHostPort(host, port), next(), cancel, result
}
