package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// TestDashboardInBrowser runs a slice of the pipeline (real PostgreSQL,
// embedded JetStream, the real dispatcher and sink runner for clickhouse
// with an in-memory sink), serves the dashboard, loads it in headless
// Chromium and checks the DOM the page's JavaScript rendered.
//
// postgres has no dispatcher or runner here: its slots and cursors are set
// by hand, so its numbers are exact, and its throughput must read "no
// data". Chromium is installed by scripts/chromium.sh when missing; the
// test fails, never skips, when that is impossible.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	// Long leases: the slot held by hand must outlive the test.
	store, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.JetStream(t)
	for _, ensure := range []func() error{
		func() error { _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); return err },
		func() error { _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); return err },
		func() error { _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); return err },
	} {
		if err := ensure(); err != nil {
			t.Fatal(err)
		}
	}

	// acme: 4 events, the first dispatched to postgres by hand with its one
	// slot still held → backlog 3, 1/1, at slot limit, 2 dead letters.
	// globex: 2 events, free slot. initech: 1 event, paused.
	for _, tn := range []string{"acme", "globex", "initech"} {
		if _, err := store.EnsureTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetPaused(ctx, "initech", true); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for i, tn := range []string{"acme", "acme", "acme", "acme", "globex", "globex", "initech"} {
		evs = append(evs, events.Event{Tenant: tn, ProductID: fmt.Sprint("p", i), Version: 1, Op: events.OpUpsert,
			OccurredAt: time.Now(), Payload: []byte(`{"name":"x"}`)})
	}
	for _, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, err := store.Dispatch(ctx, "acme", tenancy.DestPostgres, "by-hand", 1, 1); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"globex", "initech"} {
		if _, err := store.Cursor(ctx, tn, tenancy.DestPostgres); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := js.Publish(ctx, dlq.Subject(tenancy.DestPostgres, "acme"), []byte("dead")); err != nil {
			t.Fatal(err)
		}
	}

	// clickhouse: the real dispatcher and sink runner, metrics on reg,
	// served at /metrics as cmd/sinks serves them and scraped by the
	// sampler as `fairway serve --sink-metrics` does.
	reg := prometheus.NewRegistry()
	metricsSrv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer metricsSrv.Close()
	scrape, err := dashboard.Scrape(metricsSrv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second sinks process that does not answer: the page names it.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	down, err := dashboard.Scrape(gone.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := dashboard.NewSampler(&dashboard.SamplerConfig{Interval: 100 * time.Millisecond, Window: time.Minute, Summary: time.Minute,
		Timeout: time.Second}, scrape, down)
	if err != nil {
		t.Fatal(err)
	}
	mem := &memSink{name: tenancy.DestClickHouse}
	r, err := runner.New(ctx, runner.Deps{JetStream: js, Sink: mem, Leases: store, Registry: reg},
		&runner.Config{FetchWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Deps{Store: store, NATS: nc, Registry: reg},
		&dispatch.Config{Dests: []string{tenancy.DestClickHouse}, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pipeCtx, stopPipe := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{d.Run, r.Run, sampler.Run} {
		wg.Go(func() {
			if err := run(pipeCtx); err != nil && pipeCtx.Err() == nil {
				t.Errorf("pipeline: %v", err)
			}
		})
	}
	defer wg.Wait()
	defer stopPipe()

	// Wait until clickhouse applied acme's and globex's 6 events, released
	// their slots, and the sampler saw it.
	src := &status.Source{Pairs: store, Reader: work.NewReader(nc, ""), JS: js}
	settled := func() (string, bool) {
		applied := 0.0
		for _, s := range sampler.DestStats() {
			if s.Dest == tenancy.DestClickHouse {
				applied = s.Applied
			}
		}
		rows, err := src.Rows(ctx, "")
		if err != nil {
			return err.Error(), false
		}
		idle := 0
		for _, r := range rows {
			if r.Dest == tenancy.DestClickHouse && r.Tenant != "initech" && r.Backlog == 0 && r.InUse == 0 {
				idle++
			}
		}
		return fmt.Sprintf("sampler saw %v of 6 applied, sink %d; status %+v", applied, mem.n(), rows), applied >= 6 && idle == 2
	}
	for {
		state, ok := settled()
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("clickhouse did not apply acme's and globex's events: %s", state)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// B2B partners with a delivery log written by the real sink: acme's
	// erp failed once and then delivered (an old error, drawn calm), its
	// shop delivered twice and then failed (drawn red); globex's crm
	// failed.
	partners, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	dashboard.LogDeliveries(t, ctx, partners, "acme", "erp", false, true)
	dashboard.LogDeliveries(t, ctx, partners, "acme", "shop", true, true, false)
	dashboard.LogDeliveries(t, ctx, partners, "globex", "crm", false)

	dash, err := dashboard.New(dashboard.Deps{Status: src, Dests: sampler, Partners: partners}, &dashboard.Config{Refresh: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dash)
	defer srv.Close()

	dom := dumpDOM(t, ctx, chromium, srv.URL+dashboard.Path+"/")
	if png := os.Getenv("FAIRWAY_UI_SCREENSHOT"); png != "" {
		screenshot(t, ctx, chromium, srv.URL+dashboard.Path+"/", png)
	}
	if strings.Contains(dom, "status unavailable") {
		t.Fatalf("the page shows an error:\n%s", dom)
	}
	for _, c := range []struct {
		row  string
		want []string
	}{
		{`<tr data-tenant="acme" data-dest="postgres">`, []string{`<span class="value">3</span>`, `<span class="value">1/1</span>`,
			`<div class="bar full">`, `<span class="reason reason-at-slot-limit">at slot limit</span>`, `<td class="num dead alarm">2</td>`}},
		{`<tr data-tenant="acme" data-dest="clickhouse">`, []string{`<span class="value">0</span>`, "idle"}},
		{`<tr data-tenant="globex" data-dest="postgres">`, []string{`<span class="value">2</span>`, `<span class="value">0/1</span>`,
			`<div class="bar">`, "dispatching", `<td class="num dead">0</td>`}},
		{`<tr data-tenant="initech" data-dest="postgres">`, []string{`<span class="value">1</span>`, "paused"}},
		{`<tr data-dest="postgres">`, []string{`<td class="num backlog">6</td>`, `<td class="num dead alarm">2</td>`, "no data"}},
	} {
		row := tableRow(dom, c.row)
		if row == "" {
			t.Errorf("no row %s in the rendered page:\n%s", c.row, dom)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(row, w) {
				t.Errorf("row %s lacks %q:\n%s", c.row, w, row)
			}
		}
	}
	// clickhouse throughput and latency are figures, not "no data".
	ch := tableRow(dom, `<tr data-dest="clickhouse">`)
	if !regexp.MustCompile(`<td class="num rate">\d+\.\d</td>`).MatchString(ch) ||
		!regexp.MustCompile(`<td class="num p95">[\d.]+ (ms|s)</td>`).MatchString(ch) ||
		!strings.Contains(ch, "<polyline") {
		t.Errorf("clickhouse destination row without throughput, p95 and series:\n%s", ch)
	}
	if !strings.Contains(dom, "3 in all") {
		t.Errorf("tenant count missing:\n%s", dom)
	}
	// Backlog bars: a log scale up to at least 1,000, so small backlogs
	// are slivers; the number is written next to each.
	widths := map[string]float64{}
	for _, m := range backlogBar.FindAllStringSubmatch(dom, -1) {
		w, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		widths[m[1]] = w
	}
	if w := widths["3"]; w <= 0 || w > 25 || widths["1"] <= 0 || widths["1"] >= w || widths["0"] != 0 {
		t.Errorf("backlog bar widths %v (%% by backlog), want 0 < width(1) < width(3) <= 25", widths)
	}
	// The sinks process that does not answer is named under the
	// destinations; the pager is hidden for one page.
	if note := regexp.MustCompile(`<p id="metrics-note" class="note">([^<]*)</p>`).FindStringSubmatch(dom); note == nil ||
		!strings.Contains(note[1], "1 of 2 not answering: "+gone.URL+"/metrics") {
		t.Errorf("no note naming the sinks process that does not answer:\n%s", dom)
	}
	if !strings.Contains(dom, `<nav id="pager" aria-label="Tenant pages" hidden="">`) {
		t.Errorf("a pager for one page:\n%s", dom)
	}
	// No tenant picked: no partners panel; each tenant's name opens its
	// own.
	if !strings.Contains(dom, `<section id="partners-panel" hidden="">`) ||
		!strings.Contains(dom, `<a class="pick" href="?tenant=acme" data-tenant="acme" title="partners of acme">acme</a>`) {
		t.Errorf("without a tenant picked: a partners panel shown, or no link to acme's:\n%s", dom)
	}
	// acme picked: its partners' attempts, success rates and last errors;
	// red only for the partner whose newest attempt failed.
	picked := dumpDOM(t, ctx, chromium, srv.URL+dashboard.Path+"/?tenant=acme")
	if png := os.Getenv("FAIRWAY_UI_SCREENSHOT"); png != "" {
		screenshot(t, ctx, chromium, srv.URL+dashboard.Path+"/?tenant=acme", strings.TrimSuffix(png, ".png")+"-partners.png")
	}
	checkPartners(t, picked, "acme")

	// One tenant to a page, without sink metrics: the address picks the
	// page and the filter, as the pager and the filter box set it.
	paged, err := dashboard.New(dashboard.Deps{Status: src}, &dashboard.Config{Refresh: 500 * time.Millisecond, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	pagedSrv := httptest.NewServer(paged)
	defer pagedSrv.Close()
	if png := os.Getenv("FAIRWAY_UI_SCREENSHOT"); png != "" {
		screenshot(t, ctx, chromium, pagedSrv.URL+dashboard.Path+"/?page=2", strings.TrimSuffix(png, ".png")+"-paged.png")
	}
	for _, c := range []struct {
		query, tenant string
		texts         []string
	}{
		{"", "acme", []string{"3 in all, 1–1 listed, the most backlog first", "page 1 of 3", `<button id="prev" type="button" disabled="">`, "--sink-metrics"}},
		{"?page=2", "globex", []string{"3 in all, 2–2 listed", "page 2 of 3", `<button id="next" type="button">`}},
		{"?page=9", "initech", []string{"page 3 of 3", `<button id="next" type="button" disabled="">`}},
		{"?filter=GLO", "globex", []string{"1 of 3 match"}},
	} {
		dom := dumpDOM(t, ctx, chromium, pagedSrv.URL+dashboard.Path+"/"+c.query)
		var tenants []string
		for _, m := range regexp.MustCompile(`<tr data-tenant="([a-z]+)"`).FindAllStringSubmatch(dom, -1) {
			tenants = append(tenants, m[1])
		}
		if uniq := slices.Compact(slices.Clone(tenants)); len(uniq) != 1 || uniq[0] != c.tenant {
			t.Errorf("%s: tenants %v, want %s alone:\n%s", c.query, tenants, c.tenant, dom)
		}
		for _, want := range c.texts {
			if !strings.Contains(dom, want) {
				t.Errorf("%s: the page lacks %q:\n%s", c.query, want, dom)
			}
		}
	}
	if !regexp.MustCompile(`<form id="login" hidden`).MatchString(dom) {
		t.Errorf("an open dashboard shows the token form:\n%s", dom)
	}

	// The same dashboard asking for a token: the page shows the form
	// until it has one; a token in the fragment is used at once; a tenant
	// token's view shows that tenant's rows alone; a revoked one is
	// refused.
	acmeTok, err := store.IssueToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	adminTok, err := store.IssueAdminToken(ctx, "browser")
	if err != nil {
		t.Fatal(err)
	}
	revokedTok, err := store.IssueAdminToken(ctx, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.RevokeToken(ctx, revokedTok); err != nil {
		t.Fatal(err)
	}
	locked, err := dashboard.New(dashboard.Deps{Status: src, Dests: sampler, Partners: partners, Tokens: store}, &dashboard.Config{Refresh: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lockedSrv := httptest.NewServer(locked)
	defer lockedSrv.Close()
	page := lockedSrv.URL + dashboard.Path + "/"
	tenantRows := regexp.MustCompile(`<tr data-tenant="([a-z]+)" data-dest`)
	tenantsIn := func(dom string) string {
		seen := map[string]bool{}
		var out []string
		for _, m := range tenantRows.FindAllStringSubmatch(dom, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
		return strings.Join(out, " ")
	}
	formShown := regexp.MustCompile(`<form id="login">`)
	for _, c := range []struct {
		name, fragment, tenants string
		form                    bool
		text                    string
	}{
		{"no token", "", "", true, "a token is needed"},
		{"revoked token", "#token=" + revokedTok, "", true, "the token was refused"},
		{"acme's token", "#token=" + acmeTok, "acme", false, "tenant acme only"},
		{"admin token", "#token=" + adminTok, "acme globex initech", false, "3 in all"},
	} {
		dom := dumpDOM(t, ctx, chromium, page+c.fragment)
		if got := tenantsIn(dom); got != c.tenants {
			t.Errorf("%s: tenants %q, want %q:\n%s", c.name, got, c.tenants, dom)
		}
		if formShown.MatchString(dom) != c.form || !strings.Contains(dom, c.text) {
			t.Errorf("%s: want the token form shown %v and %q:\n%s", c.name, c.form, c.text, dom)
		}
		if c.name == "acme's token" && (strings.Contains(dom, "globex") || strings.Contains(dom, "initech") || strings.Contains(dom, "crm")) {
			t.Errorf("acme's view names another tenant:\n%s", dom)
		}
	}
	// acme's token shows acme's partners, without asking for them, and
	// nothing lets it pick another tenant, even from the address.
	for _, query := range []string{"", "?tenant=globex"} {
		dom := dumpDOM(t, ctx, chromium, page+query+"#token="+acmeTok)
		checkPartners(t, dom, "acme")
		if strings.Contains(dom, "crm") || strings.Contains(dom, `class="pick"`) || !strings.Contains(dom, `<a id="partners-close" href="?" hidden="">`) {
			t.Errorf("acme's token, %q: another tenant's partners, or a way to pick one:\n%s", query, dom)
		}
	}
	// An admin token picks globex.
	dom = dumpDOM(t, ctx, chromium, page+"?tenant=globex#token="+adminTok)
	if row := tableRow(dom, `<tr data-partner="crm" class="failing">`); !strings.Contains(row, `<td class="num success">0%</td>`) ||
		!strings.Contains(dom, `<span id="partners-tenant">globex</span>`) || strings.Contains(dom, `data-partner="erp"`) {
		t.Errorf("admin, globex: no failing crm at 0%%, or acme's partners:\n%s", dom)
	}
}

// checkPartners checks the partners panel of dom shows tenant's erp and
// shop as acme's delivery log holds them.
func checkPartners(t *testing.T, dom, tenant string) {
	t.Helper()
	if !strings.Contains(dom, `<section id="partners-panel">`) || !strings.Contains(dom, `<span id="partners-tenant">`+tenant+`</span>`) {
		t.Errorf("no partners panel of %s:\n%s", tenant, dom)
		return
	}
	for _, c := range []struct {
		row  string
		want []string
	}{
		// erp: 503, then accepted. The error is history: muted, the
		// newest attempt ok.
		{`<tr data-partner="erp" class="">`, []string{`<td class="num attempts">2</td>`, `<td class="num success">50.0%</td>`,
			`<span class="outcome ok">ok</span>`, `<td class="error-text old"`, "503", "busy", " ago</span>"}},
		// shop: accepted twice, then 503: red.
		{`<tr data-partner="shop" class="failing">`, []string{`<td class="num attempts">3</td>`, `<td class="num success">66.7%</td>`,
			`<span class="outcome alarm">failed</span>`, `<td class="error-text alarm"`, "503"}},
	} {
		row := tableRow(dom, c.row)
		if row == "" {
			t.Errorf("no partner row %s:\n%s", c.row, dom)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(row, w) {
				t.Errorf("partner row %s lacks %q:\n%s", c.row, w, row)
			}
		}
	}
}

// backlogBar matches a backlog cell: the number, then its bar's width in %.
var backlogBar = regexp.MustCompile(`<td class="backlog"><div class="cell"><span class="value">([\d,]+)</span><div class="bar"[^>]*><i style="width: ([\d.]+)%;">`)

// tableRow returns the <tr> of dom that opens with openTag, through its
// </tr>, or "".
func tableRow(dom, openTag string) string {
	i := strings.Index(dom, openTag)
	if i < 0 {
		return ""
	}
	end := strings.Index(dom[i:], "</tr>")
	if end < 0 {
		return ""
	}
	return dom[i : i+end+len("</tr>")]
}

// findChromium returns a headless-capable Chromium, installing Debian's
// package through scripts/chromium.sh when there is none.
func findChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "chromium.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("this test needs headless Chromium and could not install it: %s: %v\n%s\n"+
			"install it with `sudo apt-get install -y chromium` (Debian) and run the test again", script, err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if len(lines) == 0 {
		t.Fatalf("%s printed no path:\n%s", script, stderr.String())
	}
	return lines[len(lines)-1]
}

// dumpDOM loads url in headless Chromium and returns the DOM after its
// scripts ran. Chromium gets a private profile and no reason to reach the
// network beyond url.
func dumpDOM(t *testing.T, ctx context.Context, chromium, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(chromiumFlags(t), "--virtual-time-budget=5000", "--dump-dom", url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s --dump-dom %s: %v\n%s", chromium, url, err, stderr.String())
	}
	return stdout.String()
}

// screenshot saves a 1280×900 PNG of url to png, for a person to look at
// (FAIRWAY_UI_SCREENSHOT=/tmp/ui.png go test -run Browser).
func screenshot(t *testing.T, ctx context.Context, chromium, url, png string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	abs, err := filepath.Abs(png)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, chromium, append(chromiumFlags(t), "--virtual-time-budget=5000",
		"--hide-scrollbars", "--window-size=1280,900", "--screenshot="+abs, url)...).CombinedOutput()
	if err != nil {
		t.Fatalf("screenshot: %v\n%s", err, out)
	}
	t.Logf("screenshot of the dashboard: %s", abs)
}

func chromiumFlags(t *testing.T) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--no-default-browser-check", "--mute-audio",
		"--user-data-dir=" + t.TempDir()}
}

// memSink applies everything, in memory.
type memSink struct {
	name    string
	mu      sync.Mutex
	applied int
}

var _ sink.Sink = (*memSink)(nil)

func (s *memSink) Name() string { return s.name }

func (s *memSink) Apply(_ context.Context, batch []sink.Record) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied += len(batch)
	return make([]error, len(batch)), nil
}

func (s *memSink) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}
