package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
)

type fakeStatus struct {
	rows  []status.Row
	err   error
	calls atomic.Int32
}

func (f *fakeStatus) Rows(context.Context, string) ([]status.Row, error) {
	f.calls.Add(1)
	return f.rows, f.err
}

type fixedDests []DestStats

func (f fixedDests) DestStats() []DestStats { return f }

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

func TestSnapshotTopKAndOther(t *testing.T) {
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
	srv := setup(t, Deps{Status: &fakeStatus{rows: rows}, Dests: dests}, &Config{TopK: 3})

	_, body := get(t, srv.URL+"/ui/api/status")
	var snap Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range snap.Rows {
		got = append(got, r.Tenant+"/"+r.Dest)
	}
	if want := "t05/clickhouse t05/postgres t09/postgres t08/postgres"; strings.Join(got, " ") != want {
		t.Errorf("rows %v, want %s", got, want)
	}
	want := OtherRow{Tenants: 7, Pairs: 7, Backlog: 0 + 1 + 2 + 3 + 4 + 6 + 7, OldestAgeSeconds: 7, InUse: 7, Limit: 14, DeadLetters: 7}
	if snap.Tenants != 10 || snap.Other == nil || *snap.Other != want {
		t.Errorf("tenants %d, other %+v, want %+v", snap.Tenants, snap.Other, want)
	}
	if !snap.Throughput || len(snap.Dests) != 3 {
		t.Fatalf("dests %+v", snap.Dests)
	}
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
		if snap, ok := d.Snapshot(ctx); !ok || len(snap.Rows) != 1 || snap.Throughput || snap.RefreshMillis != 1000 {
			t.Fatalf("snapshot %+v %v", snap, ok)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d status reads within one refresh, want 1", n)
	}
	clock.advance(time.Second)
	src.err = errors.New("nats: timeout")
	snap, ok := d.Snapshot(ctx)
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

func TestConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Deps{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no status: %v", err)
	}
	for _, c := range []Config{{TopK: -1}, {Refresh: time.Millisecond}, {Timeout: -time.Second}} {
		if _, err := New(Deps{Status: &fakeStatus{}}, &c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
