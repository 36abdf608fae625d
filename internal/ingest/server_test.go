package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixture struct {
	url    string
	js     jetstream.JetStream
	stream jetstream.Stream
	srv    *ingest.Server
	store  *tenancy.Store
	deps   ingest.Deps       // the server's, for more replicas (serve)
	tokens map[string]string // tenant → token
	admin  string
}

func setup(t testing.TB, cfg ingest.Config) *fixture { return setupDeps(t, cfg, nil) }

// setupDeps is setup with a last say on the server's dependencies.
func setupDeps(t testing.TB, cfg ingest.Config, change func(*ingest.Deps)) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.JetStream(t)
	stream, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ingest.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	cfg.Node = "test-node"
	cfg.Logger = quietLogger()
	deps := ingest.Deps{Publisher: pub, Tenants: store, Pool: pool, Ready: ingest.DefaultChecks(js, pool, events.StreamName),
		Quotas: store, Backlog: work.NewReader(nc, "")}
	if change != nil {
		change(&deps)
	}
	srv, url := serve(t, deps, cfg)
	f := &fixture{url: url, js: js, stream: stream, srv: srv, store: store, deps: deps, tokens: map[string]string{}}
	for _, id := range []string{"acme", "globex"} {
		_, tok, err := store.CreateTenant(ctx, id, id)
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[id] = tok
	}
	if f.admin, err = store.IssueAdminToken(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	return f
}

// serve starts an ingest server on deps and returns it with its URL.
func serve(t testing.TB, deps ingest.Deps, cfg ingest.Config) (*ingest.Server, string) {
	t.Helper()
	srv, err := ingest.New(deps, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func (f *fixture) post(t testing.TB, path, token, contentType string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func (f *fixture) get(t *testing.T, path, token string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (f *fixture) msgs(t testing.TB) uint64 {
	t.Helper()
	info, err := f.stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func ndjson(lines ...string) io.Reader { return strings.NewReader(strings.Join(lines, "\n") + "\n") }

func ev(product string, version int64) string {
	return fmt.Sprintf(`{"product_id":%q,"version":%d,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{"name":"thing %s"}}`, product, version, product)
}

func decode(t *testing.T, b []byte) ingest.EventsResponse {
	t.Helper()
	var r ingest.EventsResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return r
}

func TestAcceptedEventsAreStoredOnTheirSubjectWithHeaders(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	del := `{"product_id":"p3","version":2,"op":"delete","occurred_at":"2026-11-20T10:00:00Z"}`
	resp, body := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev("p1", 1), ev("p2", 7), del))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r := decode(t, body)
	if r.Accepted != 3 || len(r.Results) != 3 || r.RequestID == "" || resp.Header.Get("X-Request-Id") != r.RequestID {
		t.Fatalf("response %+v", r)
	}
	want := []struct {
		subject, key, product, op string
	}{
		{"products.acme.upsert", "acme:p1:1", "p1", "upsert"},
		{"products.acme.upsert", "acme:p2:7", "p2", "upsert"},
		{"products.acme.delete", "acme:p3:2", "p3", "delete"},
	}
	for i, w := range want {
		res := r.Results[i]
		if res.Error != "" || res.Seq == 0 || res.Duplicate || res.Line != i+1 {
			t.Fatalf("result %d = %+v", i, res)
		}
		m, err := f.stream.GetMsg(context.Background(), res.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != events.LayoutDefault.StoredSubject(w.subject) {
			t.Errorf("seq %d subject %q, want %q", res.Seq, m.Subject, w.subject)
		}
		for h, v := range map[string]string{events.HeaderMsgID: w.key, events.HeaderRequestID: r.RequestID} {
			if got := m.Header.Get(h); got != v {
				t.Errorf("seq %d header %s = %q, want %q", res.Seq, h, got, v)
			}
		}
		got, err := events.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if got.Tenant != "acme" || got.ProductID != w.product || string(got.Op) != w.op {
			t.Errorf("stored event %+v", got)
		}
	}
}

func TestJSONArrayBody(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	body := "[" + ev("a", 1) + "," + ev("b", 1) + "]"
	resp, b := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/json; charset=utf-8", strings.NewReader(body))
	if resp.StatusCode != http.StatusAccepted || decode(t, b).Accepted != 2 || f.msgs(t) != 2 {
		t.Fatalf("status %d body %s msgs %d", resp.StatusCode, b, f.msgs(t))
	}
}

func TestDuplicateIdempotencyKeyIsStoredOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	for i, wantDup := range []bool{false, true} {
		resp, b := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev("p1", 1)))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %d: %d %s", i, resp.StatusCode, b)
		}
		r := decode(t, b)
		if r.Results[0].Duplicate != wantDup || r.Duplicates != map[bool]int{false: 0, true: 1}[wantDup] {
			t.Fatalf("post %d: %+v", i, r)
		}
	}
	if n := f.msgs(t); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
}

// JetStream de-duplicates stream-wide; one tenant must not be able to
// claim another's idempotency keys, through ingest or with a NATS user of
// its own that sets Nats-Msg-Id itself.
func TestIdempotencyKeysAreScopedToTheTenant(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	post := func(tenant, line string) ingest.EventResult {
		t.Helper()
		resp, b := f.post(t, "/v1/tenants/"+tenant+"/events", f.tokens[tenant], "application/x-ndjson", ndjson(line))
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: status %d: %s", tenant, resp.StatusCode, b)
		}
		return decode(t, b).Results[0]
	}
	stored := func(res ingest.EventResult) string {
		t.Helper()
		m, err := f.stream.GetMsg(context.Background(), res.Seq)
		if err != nil {
			t.Fatal(err)
		}
		return m.Subject
	}

	// Through ingest: globex picks acme's default key for a decoy.
	decoy := post("globex", `{"product_id":"decoy","version":1,"op":"upsert","payload":{"n":"x"},"idempotency_key":"acme:victim:1"}`)
	victim := post("acme", `{"product_id":"victim","version":1,"op":"upsert","payload":{"n":"x"}}`)
	if victim.Duplicate || victim.Seq == decoy.Seq || stored(victim) != events.LayoutDefault.StoredSubject("products.acme.upsert") {
		t.Fatalf("acme's event after globex's decoy: %+v (decoy %+v)", victim, decoy)
	}
	if again := post("acme", `{"product_id":"victim","version":1,"op":"upsert","payload":{"n":"x"}}`); !again.Duplicate || again.Seq != victim.Seq {
		t.Fatalf("acme's own repeat: %+v, want a duplicate of seq %d", again, victim.Seq)
	}
	if again := post("globex", `{"product_id":"decoy","version":1,"op":"upsert","payload":{"n":"x"},"idempotency_key":"acme:victim:1"}`); !again.Duplicate || again.Seq != decoy.Seq {
		t.Fatalf("globex's own repeat: %+v, want a duplicate of seq %d", again, decoy.Seq)
	}

	// Through NATS: a message on globex's subject with acme's next id.
	forged := &nats.Msg{Subject: "products.globex.upsert", Header: nats.Header{}, Data: []byte(`{"tenant":"globex","product_id":"decoy","version":2,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`)}
	forged.Header.Set(events.HeaderMsgID, "acme:victim:2")
	ack, err := f.js.PublishMsg(context.Background(), forged)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a retry is stored too rather than lost
		victim = post("acme", `{"product_id":"victim","version":2,"op":"upsert","payload":{"n":"x"}}`)
		if victim.Seq == ack.Sequence || stored(victim) != events.LayoutDefault.StoredSubject("products.acme.upsert") {
			t.Fatalf("acme's event after a forged id at seq %d: %+v", ack.Sequence, victim)
		}
	}
}

// Each bad event sits between two good ones; the good ones must be stored
// and the bad one reported on its own line with a precise message.
func TestBadEventsAreReportedAndNeighboursStored(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{Limits: events.Limits{MaxPayloadBytes: 1024}})
	deep := `{"product_id":"deep","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{"a":` +
		strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`
	big := fmt.Sprintf(`{"product_id":"big","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{"x":"%s"}}`, strings.Repeat("y", 2000))
	cases := []struct {
		name, bad, wantErr string
	}{
		{"malformed json", `{"product_id": "x", "version": 1,`, "line 2"},
		{"unknown op", `{"product_id":"x","version":1,"op":"upsrt","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`, "upsrt"},
		{"missing version", `{"product_id":"x","op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`, "version"},
		{"oversized payload", big, "payload"},
		{"deeply nested payload", deep, "deeper than 64"},
		{"payload not an object", `{"product_id":"x","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":[1]}`, "payload"},
		{"other tenant in body", `{"tenant":"globex","product_id":"x","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`, "tenant"},
		{"bad tenant id in body", `{"tenant":"a.b","product_id":"x","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`, `tenant "a.b"`},
		{"wildcard tenant in body", `{"tenant":">","product_id":"x","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":{}}`, `tenant ">"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.msgs(t)
			p1, p2 := fmt.Sprintf("good-%d-a", i), fmt.Sprintf("good-%d-b", i)
			resp, b := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev(p1, 1), c.bad, ev(p2, 1)))
			if resp.StatusCode != http.StatusMultiStatus {
				t.Fatalf("status %d, want 207: %s", resp.StatusCode, b)
			}
			r := decode(t, b)
			if r.Accepted != 2 || r.Rejected != 1 {
				t.Fatalf("accepted %d rejected %d: %s", r.Accepted, r.Rejected, b)
			}
			if r.Results[1].Error == "" || !strings.Contains(r.Results[1].Error, c.wantErr) || r.Results[1].Line != 2 {
				t.Fatalf("bad line result %+v, want error containing %q", r.Results[1], c.wantErr)
			}
			if r.Results[0].Seq == 0 || r.Results[2].Seq == 0 {
				t.Fatalf("good events not stored: %+v", r.Results)
			}
			if got := f.msgs(t) - before; got != 2 {
				t.Fatalf("stream grew by %d, want 2", got)
			}
		})
	}
}

func TestAllEventsInvalidIs422(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	resp, b := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(`{"product_id":"x"}`))
	if resp.StatusCode != http.StatusUnprocessableEntity || f.msgs(t) != 0 {
		t.Fatalf("status %d body %s", resp.StatusCode, b)
	}
}

// Whole-request problems: nothing of the request is stored.
func TestRejectedRequests(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{MaxBodyBytes: 64 << 10, MaxEvents: 5, Limits: events.Limits{MaxPayloadBytes: 16 << 10}})
	good := ndjson(ev("p", 1))
	var huge bytes.Buffer
	for i := 0; huge.Len() < 70<<10; i++ {
		huge.WriteString(ev(fmt.Sprintf("p%d", i), 1) + "\n")
	}
	many := ndjson(ev("a", 1), ev("b", 1), ev("c", 1), ev("d", 1), ev("e", 1), ev("f", 1))
	cases := []struct {
		name, path, token, ctype string
		body                     io.Reader
		status                   int
		wantErr                  string
	}{
		{"dot in tenant", "/v1/tenants/a.b/events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"star tenant", "/v1/tenants/%2A/events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"gt tenant", "/v1/tenants/%3E/events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"upper-case tenant", "/v1/tenants/A/events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"space in tenant", "/v1/tenants/a%20b/events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"empty tenant", "/v1/tenants//events", f.admin, "application/x-ndjson", good, 400, "tenant"},
		{"empty tenant, import", "/v1/tenants//imports", f.admin, "text/csv", strings.NewReader("product_id,version\np,1\n"), 400, "tenant"},
		{"no token", "/v1/tenants/acme/events", "", "application/x-ndjson", good, 401, "bearer"},
		{"wrong token", "/v1/tenants/acme/events", "fw_not-a-real-token", "application/x-ndjson", good, 401, "token"},
		{"token of another tenant", "/v1/tenants/acme/events", f.tokens["globex"], "application/x-ndjson", good, 403, "acme"},
		{"oversized body", "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", bytes.NewReader(huge.Bytes()), 413, "65536 bytes"},
		{"too many events", "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", many, 413, "more than 5 events"},
		{"broken json array", "/v1/tenants/acme/events", f.tokens["acme"], "application/json", strings.NewReader("[" + ev("a", 1) + ", {"), 400, "cannot read body"},
		{"unsupported content type", "/v1/tenants/acme/events", f.tokens["acme"], "text/plain", good, 415, "ndjson"},
		{"empty body", "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", strings.NewReader(""), 400, "no events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := f.post(t, c.path, c.token, c.ctype, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, b)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(b, &e); err != nil || !strings.Contains(e.Error, c.wantErr) {
				t.Fatalf("error %q (body %s), want it to mention %q", e.Error, b, c.wantErr)
			}
		})
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("stream holds %d messages after rejected requests, want 0", n)
	}
}

func TestAdminTokenMayPublishForAnyTenantAndCreatesIt(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	resp, b := f.post(t, "/v1/tenants/newcomer/events", f.admin, "application/x-ndjson", ndjson(ev("p", 1)))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

func (f *fixture) waitImport(t *testing.T, id, token string) ingest.ImportJob {
	t.Helper()
	return f.waitImportFor(t, id, token, time.Minute)
}

func (f *fixture) waitImportFor(t *testing.T, id, token string, wait time.Duration) ingest.ImportJob {
	t.Helper()
	var j ingest.ImportJob
	testenv.Eventually(t, wait, "import "+id+" to finish", func() error {
		resp, b := f.get(t, "/v1/imports/"+id, token)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("get import: %d %s", resp.StatusCode, b)
		}
		j = ingest.ImportJob{}
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		if !j.Finished() {
			return fmt.Errorf("%+v", j)
		}
		return nil
	})
	return j
}

// importID reads the id from an import's 202 body.
func importID(t *testing.T, body []byte) string {
	t.Helper()
	var acc ingest.ImportAccepted
	if err := json.Unmarshal(body, &acc); err != nil || acc.ID == "" {
		t.Fatalf("accepted body %s: %v", body, err)
	}
	return acc.ID
}

func TestCSVImportWithBadRows(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{ImportChunk: 3})
	csv := strings.Join([]string{
		"product_id,version,op,name,price",
		"p1,1,upsert,Chair,10",                 // line 2 ok
		"p2,abc,upsert,Table,20",               // line 3 bad version
		"p3,2,upsert,\"Lamp, big\",30",         // line 4 ok (quoted comma)
		"p4,1,explode,Bed,40",                  // line 5 bad op
		"p5,1,upsert,Sofa",                     // line 6 short row
		"p6,3,delete,,",                        // line 7 ok
		"p7,1,upsert,\"multi\nline\",50",       // line 8-9 ok
		",1,upsert,Nameless,1",                 // line 10 missing product id
		"p8,1,upsert,\"bad \"quote\" here\",1", // line 11 malformed
		"p9,4,upsert,Rug,60",                   // line 12 ok
	}, "\n") + "\n"
	resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", strings.NewReader(csv))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var acc ingest.ImportAccepted
	if err := json.Unmarshal(b, &acc); err != nil || acc.ID == "" || resp.Header.Get("Location") != acc.URL {
		t.Fatalf("accepted body %s: %v", b, err)
	}
	j := f.waitImport(t, acc.ID, f.tokens["acme"])
	if j.Status != ingest.ImportSucceededWithErrors || j.RowsOK != 5 || j.RowsFailed != 5 || j.RowsTotal != 10 {
		t.Fatalf("job %+v", j)
	}
	wantLines := []int{3, 5, 6, 10, 11}
	if len(j.Errors) != len(wantLines) {
		t.Fatalf("errors %+v, want lines %v", j.Errors, wantLines)
	}
	for i, e := range j.Errors {
		if e.Line != wantLines[i] || !strings.Contains(e.Error, fmt.Sprintf("line %d", wantLines[i])) {
			t.Errorf("error %d = %+v, want line %d", i, e, wantLines[i])
		}
	}
	if n := f.msgs(t); n != 5 {
		t.Fatalf("stream holds %d messages, want 5", n)
	}
	if j.StartedAt == nil || j.FinishedAt == nil {
		t.Fatalf("times not set: %+v", j)
	}
	_, metrics := f.get(t, "/metrics", "")
	for _, want := range []string{`fairway_ingest_import_rows_total{result="accepted"} 5`, `fairway_ingest_import_rows_total{result="rejected"} 5`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Another tenant cannot see the job; the admin can.
	if resp, _ := f.get(t, "/v1/imports/"+acc.ID, f.tokens["globex"]); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("other tenant got %d, want 404", resp.StatusCode)
	}
	if resp, _ := f.get(t, "/v1/imports/"+acc.ID, f.admin); resp.StatusCode != http.StatusOK {
		t.Fatalf("admin got %d, want 200", resp.StatusCode)
	}
}

func TestCSVImportFailures(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{MaxCSVRecordBytes: 4096})
	cases := []struct {
		name, csv, wantFailure string
	}{
		{"missing version column", "product_id,name\np1,x\n", `no "version" column`},
		{"empty file", "", "empty"},
		{"header over the record limit", "product_id,version," + strings.Repeat("z", 10000) + "\np1,1,x\n", "has more than 4096 bytes"},
		{"every row bad", "product_id,version\np1,x\np2,y\n", "no row was accepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", strings.NewReader(c.csv))
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var acc ingest.ImportAccepted
			_ = json.Unmarshal(b, &acc)
			j := f.waitImport(t, acc.ID, f.tokens["acme"])
			if j.Status != ingest.ImportFailed || !strings.Contains(j.Failure, c.wantFailure) {
				t.Fatalf("job %+v, want failed with %q", j, c.wantFailure)
			}
		})
	}
	if resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["globex"], "text/csv", strings.NewReader("product_id,version\n")); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("import with another tenant's token: %d %s", resp.StatusCode, b)
	}
	if resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "application/json", strings.NewReader("{}")); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("import as json: %d %s", resp.StatusCode, b)
	}
}

// A failing readiness check makes /readyz answer 503 naming it, while
// /healthz (the process is alive) stays 200.
func TestNotReady(t *testing.T) {
	t.Parallel()
	f := setupDeps(t, ingest.Config{}, func(d *ingest.Deps) {
		d.Ready["postgres"] = func(context.Context) error { return errors.New("connection refused") }
	})
	resp, b := f.get(t, "/readyz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"postgres":"connection refused"`) ||
		!strings.Contains(string(b), `"jetstream":"ok"`) {
		t.Fatalf("/readyz: %d %s, want 503 naming postgres", resp.StatusCode, b)
	}
	if resp, b := f.get(t, "/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d %s", resp.StatusCode, b)
	}
}

// A CSV upload over MaxImportBytes is refused with 413 and starts no job.
func TestImportTooLarge(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{MaxImportBytes: 1 << 10})
	csv := "product_id,version\n" + strings.Repeat("p,1\n", 400) // 1.6 KB
	resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", strings.NewReader(csv))
	var e struct{ Error string }
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "1024") {
		t.Fatalf("status %d %s, want 413 naming the 1024-byte limit", resp.StatusCode, b)
	}
	// The same body without a length (chunked) is cut off while it is read.
	body, w := io.Pipe()
	go func() { _, err := io.WriteString(w, csv); w.CloseWithError(err) }()
	resp, b = f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "1024") {
		t.Fatalf("chunked: status %d %s, want 413 naming the 1024-byte limit", resp.StatusCode, b)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("stream holds %d events after a refused upload", n)
	}
}

func TestHealthReadyAndMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev("p", 1), `{"bad":1}`))
	f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev("p", 1), ev("q", 1))) // p again: a duplicate
	for _, c := range []struct{ path, want string }{
		{"/healthz", `"ok"`},
		{"/readyz", `"jetstream":"ok"`},
		{"/readyz", `"postgres":"ok"`},
		{"/metrics", `fairway_ingest_events_total{result="accepted"} 2`},
		{"/metrics", `fairway_ingest_events_total{result="duplicate"} 1`},
		{"/metrics", `fairway_ingest_events_total{result="rejected"} 1`},
		{"/metrics", `fairway_ingest_publish_seconds_count 2`}, // one per request's publish
	} {
		resp, b := f.get(t, c.path, "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d, want body containing %s; got %.300s", c.path, resp.StatusCode, c.want, b)
		}
	}
}
