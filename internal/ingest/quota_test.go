package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// replica starts another ingest server on f's database and stream with
// cfg and returns f as seen through it. Its Start loads the quotas set so
// far, so a quota set before replica is in force there at once.
func (f *fixture) replica(t *testing.T, cfg ingest.Config) *fixture {
	t.Helper()
	cfg.SpoolDir = t.TempDir()
	cfg.Node = fmt.Sprintf("replica-%d", time.Now().UnixNano())
	cfg.Logger = quietLogger()
	r := *f
	r.srv, r.url = serve(t, f.deps, cfg)
	return &r
}

func (f *fixture) setQuota(t *testing.T, q tenancy.Quota) {
	t.Helper()
	if err := f.store.SetQuota(context.Background(), q); err != nil {
		t.Fatal(err)
	}
}

// postN posts n events of tenant (products prefix-0..n-1, version 1).
func (f *fixture) postN(t *testing.T, tenant, prefix string, n int) (*http.Response, []byte) {
	t.Helper()
	lines := make([]string, n)
	for i := range lines {
		lines[i] = ev(fmt.Sprintf("%s-%d", prefix, i), 1)
	}
	return f.post(t, "/v1/tenants/"+tenant+"/events", f.tokens[tenant], "application/x-ndjson", ndjson(lines...))
}

// refusal checks that resp is a quota refusal with status and code for
// quota and returns its body.
func refusal(t *testing.T, resp *http.Response, body []byte, status int, code string, quota tenancy.QuotaKind) ingest.QuotaRefusal {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	var r ingest.QuotaRefusal
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("refusal %s: %v", body, err)
	}
	if r.Code != code || r.Quota != quota || r.RequestID == "" || !strings.Contains(r.Error, string(quota)) || !strings.Contains(r.Error, "nothing was stored") {
		t.Fatalf("refusal %+v, want code %s naming %s", r, code, quota)
	}
	if status == http.StatusTooManyRequests {
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra != r.RetryAfter {
			t.Fatalf("Retry-After %q, body %d: want whole seconds ≥ 1, the same in both", resp.Header.Get("Retry-After"), r.RetryAfter)
		}
	}
	return r
}

func (f *fixture) metric(t *testing.T, line string) bool {
	t.Helper()
	_, b := f.get(t, "/metrics", "")
	return strings.Contains(string(b), line)
}

func TestQuotaRatesRefuseWith429AndStoreNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	// acme: one event per second, ten at once. globex: ten payload bytes
	// per second, 300 at once.
	f.setQuota(t, tenancy.Quota{Tenant: "acme", EventsPerSec: 1, EventsBurst: 10})
	f.setQuota(t, tenancy.Quota{Tenant: "globex", BytesPerSec: 10, BytesBurst: 300})
	r := f.replica(t, ingest.Config{})

	if resp, b := r.postN(t, "acme", "a", 10); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the whole burst in one request: %d %s", resp.StatusCode, b)
	}
	if n := f.msgs(t); n != 10 {
		t.Fatalf("stream holds %d, want 10", n)
	}
	resp, b := r.postN(t, "acme", "b", 5)
	ref := refusal(t, resp, b, http.StatusTooManyRequests, ingest.CodeQuotaExceeded, tenancy.QuotaEventsPerSec)
	// Five tokens come back in five seconds.
	if ref.Value != 1 || ref.Burst != 10 || ref.RetryAfter != 5 {
		t.Fatalf("refusal %+v, want value 1, burst 10, retry after 5s", ref)
	}
	resp, b = r.postN(t, "acme", "c", 11)
	if ref := refusal(t, resp, b, http.StatusRequestEntityTooLarge, ingest.CodeOverQuotaBurst, tenancy.QuotaEventsPerSec); ref.Burst != 10 || ref.RetryAfter != 0 {
		t.Fatalf("over the burst: %+v", ref)
	}
	if n := f.msgs(t); n != 10 {
		t.Fatalf("stream holds %d after refused requests, want 10: a refused request stored events", n)
	}

	// Payloads of about 150 bytes: two fit the bytes burst, a third not.
	big := func(p string) string {
		return fmt.Sprintf(`{"product_id":%q,"version":1,"op":"upsert","payload":{"name":%q}}`, p, strings.Repeat("x", 130))
	}
	post := func(lines ...string) (*http.Response, []byte) {
		return r.post(t, "/v1/tenants/globex/events", f.tokens["globex"], "application/x-ndjson", ndjson(lines...))
	}
	if resp, b := post(big("g1"), big("g2")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("within the bytes burst: %d %s", resp.StatusCode, b)
	}
	resp, b = post(big("g3"))
	if ref := refusal(t, resp, b, http.StatusTooManyRequests, ingest.CodeQuotaExceeded, tenancy.QuotaBytesPerSec); ref.Value != 10 || ref.Burst != 300 || ref.RetryAfter < 10 {
		t.Fatalf("bytes refusal %+v", ref)
	}
	resp, b = post(big("g4"), big("g5"), big("g6"))
	refusal(t, resp, b, http.StatusRequestEntityTooLarge, ingest.CodeOverQuotaBurst, tenancy.QuotaBytesPerSec)
	if n := f.msgs(t); n != 12 {
		t.Fatalf("stream holds %d, want 12", n)
	}
	for _, want := range []string{`fairway_ingest_quota_refusals_total{quota="events_per_sec"} 2`, `fairway_ingest_quota_refusals_total{quota="bytes_per_sec"} 2`} {
		if !r.metric(t, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Two ingest replicas take from one bucket: together they never store
// more than burst + rate * elapsed of the tenant's events.
func TestQuotaSharedByTwoReplicasIsNeverExceeded(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	const rate, burst = 100, 20
	f.setQuota(t, tenancy.Quota{Tenant: "acme", EventsPerSec: rate, EventsBurst: burst})
	replicas := []*fixture{f.replica(t, ingest.Config{}), f.replica(t, ingest.Config{})}

	var accepted, refused, seq atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(2 * time.Second)
	for _, r := range replicas {
		for range 3 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					resp, b := r.postN(t, "acme", fmt.Sprint("p", seq.Add(1)), 5)
					switch resp.StatusCode {
					case http.StatusAccepted:
						accepted.Add(5)
					case http.StatusTooManyRequests:
						refused.Add(1)
					default:
						t.Errorf("status %d: %s", resp.StatusCode, b)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := burst + rate*elapsed.Seconds()
	t.Logf("accepted %d events in %s (bound %.0f); %d requests refused", accepted.Load(), elapsed, bound, refused.Load())
	if float64(accepted.Load()) > bound {
		t.Fatalf("two replicas accepted %d events in %s, more than burst + rate * elapsed = %.0f", accepted.Load(), elapsed, bound)
	}
	if accepted.Load() < rate || refused.Load() == 0 {
		t.Fatalf("accepted %d, refused %d requests: the quota let too little through, or refused nothing", accepted.Load(), refused.Load())
	}
	if n := f.msgs(t); int64(n) != accepted.Load() {
		t.Fatalf("stream holds %d events, %d were accepted: refused requests stored events", n, accepted.Load())
	}
}

func TestQuotaCSVImportSlowsDownToTheRateAndCompletes(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	const rate, rows = 40, 160
	f.setQuota(t, tenancy.Quota{Tenant: "acme", EventsPerSec: rate})
	r := f.replica(t, ingest.Config{})
	var csv strings.Builder
	csv.WriteString("product_id,version,name\n")
	for i := range rows {
		fmt.Fprintf(&csv, "p%d,1,thing %d\n", i, i)
	}
	start := time.Now()
	resp, b := r.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", strings.NewReader(csv.String()))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	j := r.waitImport(t, importID(t, b), f.tokens["acme"])
	took := time.Since(start)
	if j.Status != ingest.ImportSucceeded || j.RowsOK != rows {
		t.Fatalf("import %+v, want all %d rows stored", j, rows)
	}
	if n := f.msgs(t); n != rows {
		t.Fatalf("stream holds %d, want %d", n, rows)
	}
	// A full bucket (40) goes at once, the other 120 rows at 40/s.
	if min := time.Duration(rows-rate) * time.Second / rate; took < min-100*time.Millisecond {
		t.Fatalf("import took %s, faster than its quota allows (%s)", took, min)
	}
	if r.metric(t, "fairway_ingest_import_quota_wait_seconds_total 0\n") {
		t.Fatal("the import's wait for its quota is not counted")
	}
}

func TestQuotaMaxBacklogRefusesUntilTheSlowestDestinationDispatches(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	ctx := context.Background()
	const backlogTTL = 50 * time.Millisecond
	for _, d := range []string{"postgres", "clickhouse"} {
		if err := f.store.SetCursor(ctx, "acme", d, 1); err != nil {
			t.Fatal(err)
		}
	}
	f.setQuota(t, tenancy.Quota{Tenant: "acme", MaxBacklog: 10})
	r := f.replica(t, ingest.Config{BacklogTTL: backlogTTL})

	resp, b := r.postN(t, "acme", "a", 10)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("below the backlog cap: %d %s", resp.StatusCode, b)
	}
	last := decode(t, b).Results[9].Seq
	resp, b = r.postN(t, "acme", "b", 1)
	if ref := refusal(t, resp, b, http.StatusTooManyRequests, ingest.CodeQuotaExceeded, tenancy.QuotaMaxBacklog); ref.Value != 10 || ref.Backlog != 10 || ref.RetryAfter != 5 {
		t.Fatalf("backlog refusal %+v", ref)
	}
	// postgres dispatched everything, clickhouse nothing: still refused
	// once the backlog was counted again.
	if err := f.store.SetCursor(ctx, "acme", "postgres", last+1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * backlogTTL)
	resp, b = r.postN(t, "acme", "b", 1)
	refusal(t, resp, b, http.StatusTooManyRequests, ingest.CodeQuotaExceeded, tenancy.QuotaMaxBacklog)
	if n := f.msgs(t); n != 10 {
		t.Fatalf("stream holds %d, want 10", n)
	}
	if err := f.store.SetCursor(ctx, "acme", "clickhouse", last-4); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a post accepted once the slowest destination dispatched half the backlog", func() error {
		if resp, b := r.postN(t, "acme", "b", 1); resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return nil
	})
	if !r.metric(t, `fairway_ingest_quota_refusals_total{quota="max_backlog"}`) {
		t.Fatal("backlog refusals are not counted")
	}
}

func TestQuotaMaxBacklogHoldsACSVImportUntilDispatched(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	ctx := context.Background()
	if err := f.store.SetCursor(ctx, "acme", "postgres", 1); err != nil {
		t.Fatal(err)
	}
	f.setQuota(t, tenancy.Quota{Tenant: "acme", MaxBacklog: 5})
	r := f.replica(t, ingest.Config{ImportChunk: 5, BacklogTTL: 20 * time.Millisecond})
	resp, b := r.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv",
		strings.NewReader("product_id,version\np1,1\np2,1\np3,1\np4,1\np5,1\np6,1\np7,1\np8,1\np9,1\np10,1\np11,1\np12,1\n"))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	id := importID(t, b)
	// The import stores a round of 5, then waits for them to be dispatched.
	for _, want := range []uint64{5, 10, 12} {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d events in the stream", want), func() error {
			if n := f.msgs(t); n != want {
				return fmt.Errorf("it holds %d", n)
			}
			return nil
		})
		time.Sleep(100 * time.Millisecond) // five counts of the backlog
		if n := f.msgs(t); n != want {
			t.Fatalf("stream holds %d with the backlog at its cap, want %d", n, want)
		}
		if err := f.store.SetCursor(ctx, "acme", "postgres", want+1); err != nil {
			t.Fatal(err)
		}
	}
	if j := r.waitImport(t, id, f.tokens["acme"]); j.Status != ingest.ImportSucceeded || j.RowsOK != 12 {
		t.Fatalf("import %+v", j)
	}
}

func TestQuotaWaitOfAnImportIsBoundedByTheUploadTimeout(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	f.setQuota(t, tenancy.Quota{Tenant: "acme", MaxBacklog: 3})
	r := f.replica(t, ingest.Config{ImportChunk: 3, BacklogTTL: 20 * time.Millisecond, UploadTimeout: time.Second})
	resp, b := r.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv",
		strings.NewReader("product_id,version\np1,1\np2,1\np3,1\np4,1\np5,1\n"))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	j := r.waitImport(t, importID(t, b), f.tokens["acme"])
	if j.Status != ingest.ImportFailed || j.RowsOK != 3 || !strings.Contains(j.Failure, "max_backlog") || !strings.Contains(j.Failure, "1s") {
		t.Fatalf("import %+v, want failed after storing the first round, naming the quota and the wait", j)
	}
	if n := f.msgs(t); n != 3 {
		t.Fatalf("stream holds %d, want 3", n)
	}
}

// A quota set while ingest runs is in force within QuotaRefresh (1s),
// and so is its removal.
func TestQuotaChangeAppliesToARunningReplicaWithinASecond(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	ctx := context.Background()
	if resp, b := f.postN(t, "globex", "a", 2); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("no quota yet: %d %s", resp.StatusCode, b)
	}
	within := func(what string, status int) {
		t.Helper()
		start := time.Now()
		var i int
		testenv.Eventually(t, 5*time.Second, what+" in force", func() error {
			i++
			if resp, _ := f.postN(t, "globex", fmt.Sprint("p", i), 2); resp.StatusCode != status {
				return fmt.Errorf("answered %d, want %d", resp.StatusCode, status)
			}
			return nil
		})
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s took %s to be in force, want about 1s", what, took)
		}
	}
	f.setQuota(t, tenancy.Quota{Tenant: "globex", EventsPerSec: 1, EventsBurst: 1})
	within("set-quota", http.StatusRequestEntityTooLarge) // two events never fit a burst of one
	if err := f.store.ClearQuota(ctx, "globex"); err != nil {
		t.Fatal(err)
	}
	within("clear", http.StatusAccepted)
}
