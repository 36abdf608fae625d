package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// partnerSecret signs the requests of the test partners.
const partnerSecret = "dashboard-test-partner-secret"

// logDeliveries registers partner for tenant (which must exist) at a real
// receiver on loopback, makes one request to it through a real b2b sink
// per outcome (true: the receiver accepts it; false: it answers 503
// "busy"), and closes the sink, which writes the delivery log.
func logDeliveries(t testing.TB, ctx context.Context, reg *b2b.Registry, tenant, partner string, outcomes ...bool) {
	t.Helper()
	rcv := b2btest.New(t, b2btest.Options{Secret: []byte(partnerSecret)})
	if _, err := reg.Add(ctx, b2b.Partner{Tenant: tenant, Name: partner, URL: rcv.URL(), Secret: b2b.Secret(partnerSecret), Enabled: true}); err != nil {
		t.Fatal(err)
	}
	s, err := b2b.New(&b2b.Config{Registry: reg, Partner: partner, FailureThreshold: len(outcomes) + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, ok := range outcomes {
		if !ok {
			rcv.FailNext(1, b2btest.Failure{Status: http.StatusServiceUnavailable, Body: []byte("busy")})
		}
		_, err := s.Apply(ctx, sinktest.Records(sinktest.Upsert(tenant, fmt.Sprint("p", i), 1)))
		if (err == nil) != ok {
			t.Fatalf("request %d to %s/%s: %v, want accepted %v", i, tenant, partner, err, ok)
		}
	}
}

// partnersEnv is a database with tenants acme and globex and their
// partners' delivery logs:
//
//	acme/erp:   503, then accepted (50%, an old error, calm)
//	acme/shop:  accepted twice, then 503 (67%, failing now)
//	globex/crm: 503 (0%), never shown to acme
type partnersEnv struct {
	dsn         string
	store       *tenancy.Store
	reg         *b2b.Registry
	admin, acme string // tokens
}

func setupPartners(t *testing.T, ctx context.Context) *partnersEnv {
	t.Helper()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &partnersEnv{dsn: dsn, store: st}
	if _, e.acme, err = st.CreateTenant(ctx, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err = st.CreateTenant(ctx, "globex", ""); err != nil {
		t.Fatal(err)
	}
	if e.admin, err = st.IssueAdminToken(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if e.reg, err = b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true}); err != nil {
		t.Fatal(err)
	}
	logDeliveries(t, ctx, e.reg, "acme", "erp", false, true)
	logDeliveries(t, ctx, e.reg, "acme", "shop", true, true, false)
	logDeliveries(t, ctx, e.reg, "globex", "crm", false)
	return e
}

// TestPartnersAPI serves GET /ui/api/partners from a real delivery log:
// an admin token sees any tenant's partners, one tenant at a time; a
// tenant token its own alone; a bad query gets 400, a failed read 503.
func TestPartnersAPI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := setupPartners(t, ctx)
	srv := setup(t, Deps{Status: &fakeStatus{rows: threeTenants}, Partners: e.reg, Tokens: e.store}, nil)

	call := func(query, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/ui/api/partners"+query, nil)
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
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q", query, ct)
		}
		return res.StatusCode, string(b)
	}
	list := func(query, token string) PartnerList {
		t.Helper()
		code, body := call(query, token)
		var l PartnerList
		if err := json.Unmarshal([]byte(body), &l); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", query, code, err, body)
		}
		return l
	}
	names := func(l PartnerList) string {
		var out []string
		for _, p := range l.Partners {
			out = append(out, l.Tenant+"/"+p.Partner)
		}
		return strings.Join(out, " ")
	}

	acme := list("?tenant=acme", e.admin)
	if got := names(acme); got != "acme/erp acme/shop" {
		t.Fatalf("admin, acme: %q, want acme/erp acme/shop", got)
	}
	erp, shop := acme.Partners[0], acme.Partners[1]
	if erp.Attempts != 2 || erp.Succeeded != 1 || erp.SuccessRate != 0.5 || erp.LastFailed ||
		!strings.Contains(erp.LastError, "503") || !strings.Contains(erp.LastError, "busy") ||
		erp.LastErrorAt == nil || !erp.LastErrorAt.Before(erp.LastAt) {
		t.Errorf("erp %+v: want 2 attempts, 50%%, the old 503 as last error, the newest accepted", erp)
	}
	if shop.Attempts != 3 || shop.Succeeded != 2 || shop.SuccessRate != 2.0/3 || !shop.LastFailed ||
		!strings.Contains(shop.LastError, "503") || shop.LastErrorAt == nil || !shop.LastErrorAt.Equal(shop.LastAt) {
		t.Errorf("shop %+v: want 3 attempts, 2 accepted, the newest failed with 503", shop)
	}
	if got := names(list("?tenant=globex", e.admin)); got != "globex/crm" {
		t.Errorf("admin, globex: %q", got)
	}
	if l := list("?tenant=initech", e.admin); len(l.Partners) != 0 || l.Tenant != "initech" {
		t.Errorf("a tenant without partners: %+v", l)
	}

	// acme's token: its own partners, with or without naming itself;
	// never globex's.
	for _, q := range []string{"", "?tenant=acme"} {
		if got := names(list(q, e.acme)); got != "acme/erp acme/shop" {
			t.Errorf("acme's token, %q: %q", q, got)
		}
	}
	if code, body := call("?tenant=globex", e.acme); code != http.StatusForbidden || !strings.Contains(body, `"code":"forbidden"`) ||
		strings.Contains(body, "crm") {
		t.Errorf("acme's token asking for globex: %d %s", code, body)
	}
	if code, body := call("?tenant=acme", ""); code != http.StatusUnauthorized || strings.Contains(body, "erp") {
		t.Errorf("no token: %d %s", code, body)
	}

	for query, want := range map[string]string{
		"":                                   "tenant is required",
		"?tenant=Bad.Id":                     `tenant "Bad.Id" is not a tenant id`,
		"?tenant=acme&tenant=globex":         "tenant given 2 times",
		"?tenant=" + strings.Repeat("a", 64): "at most 63",
	} {
		code, body := call(query, e.admin)
		var ae apiError
		_ = json.Unmarshal([]byte(body), &ae)
		if code != http.StatusBadRequest || ae.Code != "invalid_query" || !strings.Contains(ae.Error, want) {
			t.Errorf("GET %q: %d %s, want 400 saying %q", query, code, body, want)
		}
	}
	if code, body := call("?tenant=Bad.Id", e.acme); code != http.StatusBadRequest {
		t.Errorf("acme's token with a bad tenant: %d %s", code, body)
	}

	// A registry whose database is gone: 503, the cause for the admin
	// alone (the tokens still verify).
	gone, err := pgxpool.New(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	goneReg, err := b2b.NewRegistry(gone, nil)
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	broken := setup(t, Deps{Status: &fakeStatus{}, Partners: goneReg, Tokens: e.store}, nil)
	for token, want := range map[string]string{e.admin: "closed pool", e.acme: "the server's log says why"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, broken.URL+"/ui/api/partners?tenant=acme", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), want) {
			t.Errorf("broken registry: %d %s, want 503 saying %q", res.StatusCode, b, want)
		}
		if token == e.acme && strings.Contains(string(b), "closed pool") {
			t.Errorf("acme sees the cause: %s", b)
		}
	}
}

// Without Deps.Partners the status says so and the API answers 404; with
// it the status says the page may ask.
func TestPartnersAPIIsOptional(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := setupPartners(t, ctx)
	for _, c := range []struct {
		deps Deps
		want bool
		code int
	}{
		{Deps{Status: &fakeStatus{rows: threeTenants}}, false, http.StatusNotFound},
		{Deps{Status: &fakeStatus{rows: threeTenants}, Partners: e.reg}, true, http.StatusOK},
	} {
		srv := setup(t, c.deps, nil)
		_, body := get(t, srv.URL+"/ui/api/status")
		var snap Snapshot
		if err := json.Unmarshal([]byte(body), &snap); err != nil || snap.Partners != c.want {
			t.Errorf("status with Deps.Partners %v: partners %v (%v), want %v", c.deps.Partners != nil, snap.Partners, err, c.want)
		}
		if res, body := get(t, srv.URL+"/ui/api/partners?tenant=acme"); res.StatusCode != c.code {
			t.Errorf("partners with Deps.Partners %v: %d %s, want %d", c.deps.Partners != nil, res.StatusCode, body, c.code)
		}
	}
}
