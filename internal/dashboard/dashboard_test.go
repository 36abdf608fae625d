package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/pkg/events"
)

type fakeStatus struct {
	rows   []status.Row
	err    error
	calls  atomic.Int32
	during func() // called inside every read
}

func (f *fakeStatus) Rows(context.Context, string) ([]status.Row, error) {
	f.calls.Add(1)
	if f.during != nil {
		f.during()
	}
	return f.rows, f.err
}

type fixedDests []DestStats

func (f fixedDests) DestStats() []DestStats { return f }
func (f fixedDests) Sources() []SourceState {
	return []SourceState{{Source: "http://127.0.0.1:9102/metrics", Error: "connection refused"}}
}

func setup(t *testing.T, deps Deps, cfg *Config) *httptest.Server {
	t.Helper()
	d, err := New(deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestServesPageAndFiles(t *testing.T) {
	t.Parallel()
	srv := setup(t, Deps{Status: &fakeStatus{}}, nil)
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/ui", "text/html", `<table id="tenants">`},
		{"/ui/", "text/html", `<script src="app.js">`},
		{"/ui/app.js", "javascript", "api/status"},
		{"/ui/style.css", "text/css", ".bar"},
		{"/ui/api/status", "application/json", `"rows":[]`},
	} {
		res, body := get(t, srv.URL+tc.path)
		if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: %d %q, body %.200q", tc.path, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if res.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: no Content-Security-Policy", tc.path)
		}
	}
	if res, _ := get(t, srv.URL+"/ui/nope.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown file: %d", res.StatusCode)
	}
}

func TestSnapshotPagesAndFilter(t *testing.T) {
	t.Parallel()
	var rows []status.Row
	// t00..t09: backlog 0..9 on postgres; t05 also on clickhouse with 100.
	for i := range 10 {
		rows = append(rows, status.Row{Tenant: fmt.Sprintf("t%02d", i), Dest: "postgres", Backlog: uint64(i),
			OldestAge: time.Duration(i) * time.Second, InUse: 1, Limit: 2, Weight: 1, DeadLetters: 1, Reason: status.ReasonDispatching})
	}
	rows = append(rows, status.Row{Tenant: "t05", Dest: "clickhouse", Backlog: 100, Limit: 1, Reason: status.ReasonDispatching})
	p95 := 0.25
	dests := fixedDests{{Dest: "postgres", EventsPerSecond: 12.5, P95Seconds: &p95}, {Dest: "b2b:acme", EventsPerSecond: 1}}
	srv := setup(t, Deps{Status: &fakeStatus{rows: rows}, Dests: dests}, &Config{PageSize: 3})

	snapshot := func(query string) Snapshot {
		t.Helper()
		res, body := get(t, srv.URL+"/ui/api/status"+query)
		var snap Snapshot
		if err := json.Unmarshal([]byte(body), &snap); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", query, res.StatusCode, err, body)
		}
		return snap
	}
	pairs := func(snap Snapshot) string {
		var got []string
		for _, r := range snap.Rows {
			got = append(got, r.Tenant+"/"+r.Dest)
		}
		return strings.Join(got, " ")
	}
	for _, tc := range []struct {
		query, pairs         string
		matched, page, pages int
	}{
		{"", "t05/clickhouse t05/postgres t09/postgres t08/postgres", 10, 1, 4},
		{"?page=2", "t07/postgres t06/postgres t04/postgres", 10, 2, 4},
		{"?page=4", "t00/postgres", 10, 4, 4},
		{"?page=99", "t00/postgres", 10, 4, 4}, // past the last: the last
		{"?filter=T0", "t05/clickhouse t05/postgres t09/postgres t08/postgres", 10, 1, 4},
		{"?filter=7", "t07/postgres", 1, 1, 1},
		{"?filter=nobody&page=3", "", 0, 1, 1},
	} {
		snap := snapshot(tc.query)
		if got := pairs(snap); got != tc.pairs || snap.Matched != tc.matched || snap.Page != tc.page || snap.Pages != tc.pages ||
			snap.Tenants != 10 || snap.PageSize != 3 || snap.MaxBacklog != 100 {
			t.Errorf("GET %s: rows %q, %d matched, page %d of %d, %d tenants, page size %d, max backlog %d; want %q, %d, %d of %d",
				tc.query, got, snap.Matched, snap.Page, snap.Pages, snap.Tenants, snap.PageSize, snap.MaxBacklog, tc.pairs, tc.matched, tc.page, tc.pages)
		}
	}

	snap := snapshot("?filter=t09")
	if !snap.Throughput || len(snap.Dests) != 3 || len(snap.MetricsSources) != 1 || snap.MetricsSources[0].Error != "connection refused" {
		t.Fatalf("dests %+v, metrics sources %+v", snap.Dests, snap.MetricsSources)
	}
	// Destination totals are every tenant's, whatever the filter and page.
	b2b, ch, pg := snap.Dests[0], snap.Dests[1], snap.Dests[2]
	if b2b.Dest != "b2b:acme" || b2b.Stats == nil || b2b.Tenants != 0 {
		t.Errorf("b2b %+v", b2b)
	}
	if ch.Dest != "clickhouse" || ch.Stats != nil || ch.Backlog != 100 || ch.Limit != 1 {
		t.Errorf("clickhouse (no metrics) %+v", ch)
	}
	if pg.Dest != "postgres" || pg.Tenants != 10 || pg.Backlog != 45 || pg.InUse != 10 || pg.DeadLetters != 10 ||
		pg.Stats == nil || pg.Stats.EventsPerSecond != 12.5 || *pg.Stats.P95Seconds != 0.25 {
		t.Errorf("postgres %+v", pg)
	}
}

func TestStatusAPIRefusesABadQuery(t *testing.T) {
	t.Parallel()
	src := &fakeStatus{rows: []status.Row{{Tenant: "acme", Dest: "postgres"}}}
	srv := setup(t, Deps{Status: src}, nil)
	for query, want := range map[string]string{
		"?page=0":                            "page \"0\": want a number from 1",
		"?page=two":                          "page \"two\"",
		"?filter=a%20b":                      "tenant ids hold only a-z, 0-9, - and _",
		"?filter=" + strings.Repeat("a", 64): "at most 63",
	} {
		res, body := get(t, srv.URL+"/ui/api/status"+query)
		var e apiError
		_ = json.Unmarshal([]byte(body), &e)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, want) || e.Code != "invalid_query" {
			t.Errorf("GET %s: %d %s, want 400 saying %q", query, res.StatusCode, body, want)
		}
	}
	if n := src.calls.Load(); n != 0 {
		t.Errorf("a refused query read the status %d times", n)
	}
}

func TestSnapshotIsSharedAndErrorsAreServed(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	src := &fakeStatus{rows: []status.Row{{Tenant: "acme", Dest: "postgres", Backlog: 3}}}
	d, err := New(Deps{Status: src}, &Config{Refresh: time.Second, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if snap, ok := d.Snapshot(ctx, Query{}); !ok || len(snap.Rows) != 1 || snap.Throughput || snap.RefreshMillis != 1000 {
			t.Fatalf("snapshot %+v %v", snap, ok)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d status reads within one refresh, want 1", n)
	}
	clock.advance(time.Second)
	src.err = errors.New("nats: timeout")
	snap, ok := d.Snapshot(ctx, Query{})
	if ok || !strings.Contains(snap.Error, "nats: timeout") || src.calls.Load() != 2 {
		t.Errorf("failed read: %+v %v after %d reads", snap, ok, src.calls.Load())
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	res, body := get(t, srv.URL+"/ui/api/status")
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "nats: timeout") {
		t.Errorf("GET after a failed read: %d %s", res.StatusCode, body)
	}
}

// TestSlowReadsAreShared: a read of many tenants' status takes a while;
// Refresh counts from its end, so the pages and filters asked for right
// after it use it instead of each starting a read of their own.
func TestSlowReadsAreShared(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	src := &fakeStatus{rows: []status.Row{{Tenant: "acme", Dest: "postgres"}, {Tenant: "globex", Dest: "postgres"}},
		during: func() { clock.advance(3 * time.Second) }}
	d, err := New(Deps{Status: src}, &Config{Refresh: 2 * time.Second, PageSize: 1, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []Query{{}, {Page: 2}, {Filter: "glo"}} {
		if _, ok := d.Snapshot(ctx, q); !ok {
			t.Fatal("read failed")
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d reads taking 3 s each for three pages within the 2 s refresh after the first, want 1", n)
	}
	clock.advance(2 * time.Second)
	d.Snapshot(ctx, Query{})
	if n := src.calls.Load(); n != 2 {
		t.Errorf("%d reads after a refresh, want 2", n)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Deps{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no status: %v", err)
	}
	for _, c := range []Config{{PageSize: -1}, {PageSize: PageSizeMax + 1}, {Refresh: time.Millisecond}, {Timeout: -time.Second}} {
		if _, err := New(Deps{Status: &fakeStatus{}}, &c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// partitionedStatus is a status source that also tells the partitions.
type partitionedStatus struct {
	fakeStatus
	parts []status.Partition
}

func (p *partitionedStatus) Partitions(context.Context, []status.Row) (events.Layout, []status.Partition, error) {
	return events.Layout{Partitions: len(p.parts)}, p.parts, nil
}

// An admin's snapshot lists the partitions of PRODUCTS and who reads them
// when the status source tells them; a tenant's view does not.
func TestSnapshotListsPartitionsToAdmins(t *testing.T) {
	t.Parallel()
	parts := []status.Partition{{Partition: 0, Dispatcher: "disp-a", Backlog: 7, Tenants: 1}, {Partition: 1, Dispatcher: "disp-b"}}
	src := &partitionedStatus{fakeStatus: fakeStatus{rows: []status.Row{{Tenant: "acme", Dest: "postgres", Backlog: 7}}}, parts: parts}
	d, err := New(Deps{Status: src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, ok := d.Snapshot(context.Background(), Query{})
	if !ok || !reflect.DeepEqual(snap.Partitions, parts) {
		t.Errorf("admin snapshot partitions %+v, want %+v", snap.Partitions, parts)
	}
	if snap, _ := d.TenantSnapshot(context.Background(), "acme", Query{}); snap.Partitions != nil {
		t.Errorf("a tenant's view lists the partitions: %+v", snap.Partitions)
	}
}
