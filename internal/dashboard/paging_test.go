package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// TestTenThousandTenantsComeAPageAtATime reads the status of 10,000
// tenants from real PostgreSQL and JetStream: every answer of the JSON
// API holds one page of them (a few kilobytes, not ten thousand rows),
// the tenants with backlog first, and a filter finds any tenant by a part
// of its id.
func TestTenThousandTenantsComeAPageAtATime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	for _, sql := range []string{
		`INSERT INTO fairway.tenants (id) SELECT format('tenant-%s', lpad(i::text, 5, '0')) FROM generate_series(1, $1) i`,
		`INSERT INTO fairway.limits (tenant, dest, max_slots) SELECT id, 'postgres', 1 FROM fairway.tenants WHERE $1 > 0`,
	} {
		if _, err := pool.Exec(ctx, sql, n); err != nil {
			t.Fatal(err)
		}
	}
	_, nc, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	// Backlog: tenant-07777 has 3 events, tenant-00042 has 1.
	var evs []events.Event
	for i, tn := range []string{"tenant-07777", "tenant-07777", "tenant-07777", "tenant-00042"} {
		evs = append(evs, events.Event{Tenant: tn, ProductID: fmt.Sprint("p", i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{}`)})
	}
	for _, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	src := &status.Source{Pairs: store, Reader: work.NewReader(nc, ""), JS: js}
	dash, err := dashboard.New(dashboard.Deps{Status: src}, &dashboard.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dash)
	defer srv.Close()
	get := func(query string) (dashboard.Snapshot, int) {
		t.Helper()
		res, err := http.Get(srv.URL + dashboard.Path + "/api/status" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		var snap dashboard.Snapshot
		if err := json.Unmarshal(body, &snap); err != nil || res.StatusCode != http.StatusOK || snap.Error != "" {
			t.Fatalf("GET %s: %d %v %.300s", query, res.StatusCode, err, body)
		}
		return snap, len(body)
	}
	tenants := func(snap dashboard.Snapshot) string {
		var out []string
		for _, r := range snap.Rows {
			out = append(out, r.Tenant)
		}
		return strings.Join(out, " ")
	}

	start := time.Now()
	first, size := get("")
	t.Logf("status of %d tenants read in %s; a page is %d bytes", n, time.Since(start).Round(time.Millisecond), size)
	if first.Tenants != n || first.Pages != n/dashboard.PageSizeDefault || len(first.Rows) != dashboard.PageSizeDefault || size > 32<<10 {
		t.Fatalf("first page: %d tenants, %d pages, %d rows, %d bytes", first.Tenants, first.Pages, len(first.Rows), size)
	}
	if got := tenants(first); !strings.HasPrefix(got, "tenant-07777 tenant-00042 tenant-00001 tenant-00002 ") ||
		first.Rows[0].Backlog != 3 || first.MaxBacklog != 3 {
		t.Errorf("first page starts %.80q (backlog %d, max %d), want the tenants with backlog first", got, first.Rows[0].Backlog, first.MaxBacklog)
	}
	last, _ := get("?page=200")
	if got := tenants(last); last.Page != 200 || len(last.Rows) != 50 || !strings.HasSuffix(got, " tenant-09999 tenant-10000") {
		t.Errorf("page 200 (%d rows) ends %q", len(last.Rows), got[max(0, len(got)-40):])
	}
	for filter, want := range map[string]string{
		"07777":        "tenant-07777",
		"TENANT-0004":  "tenant-00042 tenant-00040 tenant-00041 tenant-00043 tenant-00044 tenant-00045 tenant-00046 tenant-00047 tenant-00048 tenant-00049",
		"no-such-name": "",
	} {
		snap, _ := get("?filter=" + filter)
		if got := tenants(snap); got != want || snap.Matched != len(snap.Rows) || snap.Tenants != n {
			t.Errorf("filter %s: %d of %d matched: %q, want %q", filter, snap.Matched, snap.Tenants, got, want)
		}
	}
	// The pages of a filter: every matching tenant once, the last page
	// holding the rest.
	matching := 0
	for i := 1; i <= n; i++ {
		if strings.Contains(fmt.Sprintf("%05d", i), "1") {
			matching++
		}
	}
	pages := (matching + dashboard.PageSizeDefault - 1) / dashboard.PageSizeDefault
	snap, _ := get(fmt.Sprintf("?filter=1&page=%d", pages))
	if snap.Matched != matching || snap.Pages != pages || snap.Page != pages || len(snap.Rows) != matching-(pages-1)*dashboard.PageSizeDefault {
		t.Errorf("filter 1, last page: %d matched, page %d of %d, %d rows; want %d matched, %d pages",
			snap.Matched, snap.Page, snap.Pages, len(snap.Rows), matching, pages)
	}
}
