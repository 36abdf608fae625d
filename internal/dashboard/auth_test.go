package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// threeTenants are rows of acme, globex and initech; globex's and initech's
// ids must never reach acme's view.
var threeTenants = []status.Row{
	{Tenant: "acme", Dest: "postgres", Backlog: 3, InUse: 1, Limit: 1, Weight: 2, DeadLetters: 1, Reason: status.ReasonAtLimit},
	{Tenant: "acme", Dest: "clickhouse", Backlog: 0, Limit: 1, Weight: 2, Reason: status.ReasonIdle},
	{Tenant: "globex", Dest: "postgres", Backlog: 50, InUse: 2, Limit: 4, Weight: 1, DeadLetters: 7, Reason: status.ReasonDispatching},
	{Tenant: "globex", Dest: "b2b:globex-erp", Backlog: 5, Limit: 1, Weight: 1, Reason: status.ReasonDispatching},
	{Tenant: "initech", Dest: "postgres", Backlog: 9, Limit: 1, Weight: 1, Reason: status.ReasonPaused, Paused: true},
}

func TestTenantSnapshotHoldsOnlyTheTenant(t *testing.T) {
	t.Parallel()
	src := &fakeStatus{rows: threeTenants}
	p95 := 0.5
	d, err := New(Deps{Status: src, Dests: fixedDests{{Dest: "postgres", EventsPerSecond: 100, P95Seconds: &p95}}}, &Config{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all, ok := d.Snapshot(ctx, Query{})
	if !ok || all.Tenants != 3 || all.Pages != 3 || all.MaxBacklog != 50 || !all.Throughput || all.Tenant != "" {
		t.Fatalf("admin's snapshot %+v", all)
	}
	snap, ok := d.TenantSnapshot(ctx, "acme", Query{Page: 2})
	if !ok {
		t.Fatalf("acme's snapshot failed: %+v", snap)
	}
	want := Snapshot{GeneratedAt: all.GeneratedAt, RefreshMillis: all.RefreshMillis, Tenant: "acme", Tenants: 1,
		Matched: 1, Page: 1, Pages: 1, PageSize: 1, MaxBacklog: 3,
		Rows: []TenantRow{tenantRow(threeTenants[1]), tenantRow(threeTenants[0])},
		Dests: []DestRow{
			{Dest: "clickhouse", Tenants: 1, Limit: 1},
			{Dest: "postgres", Tenants: 1, Backlog: 3, InUse: 1, Limit: 1, DeadLetters: 1},
		}}
	gotJSON, _ := json.Marshal(snap)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("acme's snapshot\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	for _, other := range []string{"globex", "initech"} {
		if strings.Contains(string(gotJSON), other) {
			t.Errorf("acme's snapshot names %s: %s", other, gotJSON)
		}
	}
	if snap, ok := d.TenantSnapshot(ctx, "nobody", Query{}); !ok || len(snap.Rows) != 0 || len(snap.Dests) != 0 || snap.Tenants != 0 {
		t.Errorf("a tenant without rows: %+v", snap)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d status reads for three views within one refresh, want 1", n)
	}
}

func TestTenantSnapshotHidesTheCauseOfAFailedRead(t *testing.T) {
	t.Parallel()
	src := &fakeStatus{err: errors.New("backlog of globex/postgres: timeout")}
	d, err := New(Deps{Status: src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if all, ok := d.Snapshot(ctx, Query{}); ok || !strings.Contains(all.Error, "globex") {
		t.Errorf("admin's snapshot %+v", all)
	}
	snap, ok := d.TenantSnapshot(ctx, "acme", Query{})
	if ok || snap.Error == "" || strings.Contains(snap.Error, "globex") || snap.Tenant != "acme" {
		t.Errorf("acme's snapshot %+v", snap)
	}
}

// TestStatusAPIAsksForAToken serves the dashboard with Deps.Tokens set to a
// real tenancy.Store: the JSON API answers 401 without a token, all
// rows to an admin token, a tenant's own rows to its token, and 503 when
// tokens cannot be checked. The page's files need no token.
func TestStatusAPIAsksForAToken(t *testing.T) {
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
	_, acme, err := st.CreateTenant(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := st.IssueAdminToken(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	srv := setup(t, Deps{Status: &fakeStatus{rows: threeTenants}, Tokens: st}, nil)

	call := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
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
		var b strings.Builder
		if _, err := io.Copy(&b, res.Body); err != nil {
			t.Fatal(err)
		}
		return res, b.String()
	}
	tenantsOf := func(body string) string {
		var snap Snapshot
		if err := json.Unmarshal([]byte(body), &snap); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		seen := map[string]bool{}
		var out []string
		for _, r := range snap.Rows {
			if !seen[r.Tenant] {
				seen[r.Tenant] = true
				out = append(out, r.Tenant)
			}
		}
		return strings.Join(out, " ")
	}

	// internal/bearer's tests try every kind of bad token.
	if res, body := call("/ui/api/status", ""); res.StatusCode != http.StatusUnauthorized ||
		!strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(body, `"code":"unauthorized"`) ||
		strings.Contains(body, "acme") {
		t.Errorf("no token: %d %q %s", res.StatusCode, res.Header.Get("WWW-Authenticate"), body)
	}
	if res, body := call("/ui/api/status", admin); res.StatusCode != http.StatusOK || tenantsOf(body) != "globex initech acme" {
		t.Errorf("admin: %d %s", res.StatusCode, body)
	}
	res, body := call("/ui/api/status", acme)
	if res.StatusCode != http.StatusOK || tenantsOf(body) != "acme" || strings.Contains(body, "globex") || strings.Contains(body, "initech") {
		t.Errorf("acme: %d %s", res.StatusCode, body)
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		if res, _ := call(path, ""); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %d", path, res.StatusCode)
		}
	}
	pool.Close()
	if res, body := call("/ui/api/status", admin); res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
		t.Errorf("tokens cannot be checked: %d %s", res.StatusCode, body)
	}
}
