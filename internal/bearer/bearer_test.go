package bearer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bearer"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header, want string
		ok           bool
	}{
		{"Bearer fw_abc", "fw_abc", true},
		{"bearer fw_abc", "fw_abc", true},
		{"BEARER   fw_abc  ", "fw_abc", true},
		{"", "", false},
		{"Bearer ", "", false},
		{"Bearer    ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearerfw_abc", "", false},
		{"fw_abc", "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		if got, ok := bearer.Token(r); got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAuthenticate checks tokens against a real tenancy.Store, then against
// one whose database is gone.
func TestAuthenticate(t *testing.T) {
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
	revoked, err := st.IssueToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeToken(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	auth := func(v bearer.Verifier, header string) (tenancy.Principal, *bearer.Failure, http.Header) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		p, f := bearer.Authenticate(w, r, v)
		return p, f, w.Header()
	}
	for _, tc := range []struct {
		name, header string
		want         tenancy.Principal
		status       int
		challenge    string
	}{
		{"tenant", "Bearer " + acme, tenancy.Principal{Tenant: "acme"}, 0, ""},
		{"admin", "Bearer " + admin, tenancy.Principal{Admin: true}, 0, ""},
		{"none", "", tenancy.Principal{}, 401, `Bearer realm="fairway"`},
		{"malformed", "Bearer fw_short", tenancy.Principal{}, 401, `Bearer realm="fairway", error="invalid_token"`},
		{"unknown", "Bearer fw_" + strings.Repeat("A", 43), tenancy.Principal{}, 401, `Bearer realm="fairway", error="invalid_token"`},
		{"revoked", "Bearer " + revoked, tenancy.Principal{}, 401, `Bearer realm="fairway", error="invalid_token"`},
	} {
		p, f, h := auth(st, tc.header)
		status := 0
		if f != nil {
			status = f.Status
			if f.Err != nil || f.Code != "unauthorized" || strings.Contains(f.Message, "fw_") {
				t.Errorf("%s: failure %+v", tc.name, f)
			}
		}
		if p != tc.want || status != tc.status || h.Get("WWW-Authenticate") != tc.challenge {
			t.Errorf("%s: %+v %d %q, want %+v %d %q", tc.name, p, status, h.Get("WWW-Authenticate"), tc.want, tc.status, tc.challenge)
		}
	}
	pool.Close()
	p, f, h := auth(st, "Bearer "+acme)
	if f == nil || f.Status != http.StatusServiceUnavailable || f.Code != "unavailable" || f.Err == nil || p != (tenancy.Principal{}) || h.Get("WWW-Authenticate") != "" {
		t.Errorf("database gone: %+v %+v %v", p, f, h)
	}
}
