package tenancy_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestTokensListAndRevokeByRef(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)

	_, acme1, err := st.CreateTenant(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	acme2 := must[string](t)(st.IssueToken(ctx, "acme"))
	_, globex, err := st.CreateTenant(ctx, "globex", "")
	if err != nil {
		t.Fatal(err)
	}
	admin := must[string](t)(st.IssueAdminToken(ctx, "ops"))

	all := must[[]tenancy.TokenInfo](t)(st.Tokens(ctx, ""))
	if len(all) != 4 {
		t.Fatalf("tokens %+v", all)
	}
	for i, want := range []struct {
		secret, tenant, name string
		admin                bool
	}{{acme1, "acme", "", false}, {acme2, "acme", "", false}, {globex, "globex", "", false}, {admin, "", "ops", true}} {
		got := all[i]
		if got.Prefix != want.secret[:tenancy.TokenShownLen] || got.Tenant != want.tenant || got.Admin != want.admin ||
			got.Name != want.name || got.CreatedAt.IsZero() || !got.RevokedAt.IsZero() || (i > 0 && got.ID <= all[i-1].ID) {
			t.Errorf("token %d: %+v, want %+v", i, got, want)
		}
	}
	if got := must[[]tenancy.TokenInfo](t)(st.Tokens(ctx, "acme")); len(got) != 2 || got[0].ID != all[0].ID || got[1].ID != all[1].ID {
		t.Errorf("acme's tokens %+v", got)
	}
	if got := must[[]tenancy.TokenInfo](t)(st.Tokens(ctx, "nobody")); len(got) != 0 {
		t.Errorf("nobody's tokens %+v", got)
	}
	if _, err := st.Tokens(ctx, "Bad.Id"); !errors.Is(err, tenancy.ErrInvalidTenant) {
		t.Errorf("tokens of an invalid id: %v", err)
	}

	// Each way of naming a token revokes that token and no other.
	for _, tc := range []struct {
		name, ref, secret string
		id                int64
	}{
		{"id", strconv.FormatInt(all[0].ID, 10), acme1, all[0].ID},
		{"prefix", all[2].Prefix, globex, all[2].ID},
		{"token", admin, admin, all[3].ID},
	} {
		before := time.Now()
		got, err := st.RevokeToken(ctx, tc.ref)
		if err != nil || got.ID != tc.id || got.RevokedAt.Before(before.Add(-time.Minute)) {
			t.Fatalf("revoke by %s: %+v, %v", tc.name, got, err)
		}
		if _, err := st.VerifyToken(ctx, tc.secret); !errors.Is(err, tenancy.ErrUnauthorized) {
			t.Fatalf("revoked by %s, still verifies: %v", tc.name, err)
		}
		again, err := st.RevokeToken(ctx, tc.ref)
		if !errors.Is(err, tenancy.ErrTokenRevoked) || !again.RevokedAt.Equal(got.RevokedAt) {
			t.Fatalf("revoke by %s again: %+v, %v", tc.name, again, err)
		}
	}
	if _, err := st.VerifyToken(ctx, acme2); err != nil {
		t.Fatalf("the one token not revoked: %v", err)
	}
	listed := must[[]tenancy.TokenInfo](t)(st.Tokens(ctx, ""))
	for i, tk := range listed {
		if revoked := !tk.RevokedAt.IsZero(); revoked != (i != 1) {
			t.Errorf("token %d revoked %v: %+v", i, revoked, tk)
		}
	}

	// Unknown, malformed and ambiguous references change nothing.
	if _, err := pool.Exec(ctx, `UPDATE fairway.api_tokens SET prefix = $1 WHERE id = $2`, listed[1].Prefix, listed[0].ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref  string
		want error
	}{
		{"999999", tenancy.ErrUnknownToken},
		{"fw_zzzzzzzz", tenancy.ErrUnknownToken},
		{"fw_" + strings.Repeat("A", 43), tenancy.ErrUnknownToken},
		{"", tenancy.ErrInvalidArgument},
		{"fw_abc", tenancy.ErrInvalidArgument},
		{"-1", tenancy.ErrInvalidArgument},
		{"99999999999999999999", tenancy.ErrInvalidArgument},
		{acme2 + "x", tenancy.ErrInvalidArgument},
		{listed[1].Prefix, tenancy.ErrInvalidArgument}, // names two tokens
	} {
		if _, err := st.RevokeToken(ctx, tc.ref); !errors.Is(err, tc.want) {
			t.Errorf("revoke %q: %v, want %v", tc.ref, err, tc.want)
		} else if strings.Contains(err.Error(), acme2[tenancy.TokenShownLen:]) {
			t.Errorf("revoke %q: the error shows the token: %v", tc.ref, err)
		}
	}
	if _, err := st.VerifyToken(ctx, acme2); err != nil {
		t.Fatalf("a failed revoke revoked: %v", err)
	}
	// A row without a prefix is still listed and revoked by its id.
	if _, err := pool.Exec(ctx, `UPDATE fairway.api_tokens SET prefix = '' WHERE id = $1`, listed[1].ID); err != nil {
		t.Fatal(err)
	}
	if got, err := st.RevokeToken(ctx, strconv.FormatInt(listed[1].ID, 10)); err != nil || got.Prefix != "" {
		t.Fatalf("revoke a token without prefix: %+v, %v", got, err)
	}
	if _, err := st.VerifyToken(ctx, acme2); !errors.Is(err, tenancy.ErrUnauthorized) {
		t.Fatalf("revoked by id, still verifies: %v", err)
	}
}
