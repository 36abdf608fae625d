package tenancy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestValidDest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dest string
		ok   bool
	}{
		{"postgres", true}, {"clickhouse", true}, {"b2b:acme", true}, {"b2b:a-1_b", true},
		{"", false}, {"b2b:", false}, {"b2b:Acme", false}, {"b2b:a.b", false}, {"b2b:a/b", false},
		{"mysql", false}, {"Postgres", false}, {"b2b", false}, {"b2b:" + strings.Repeat("a", 64), false},
	} {
		err := tenancy.ValidDest(tc.dest)
		if (err == nil) != tc.ok {
			t.Errorf("ValidDest(%q) = %v, want ok=%v", tc.dest, err, tc.ok)
		}
		if err != nil && !errors.Is(err, tenancy.ErrInvalidDest) {
			t.Errorf("ValidDest(%q) = %v, want ErrInvalidDest", tc.dest, err)
		}
	}
}

// Every valid tenant id (events.ValidateTenant) round-trips in a lease id.
func FuzzLeaseIDTenant(f *testing.F) {
	for _, s := range []string{"acme", "a-b_c", "", "A", ".", "a>b", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if events.ValidateTenant(id) != nil {
			return
		}
		if _, _, _, _, err := tenancy.ParseLeaseID(id + "/postgres/0/1"); err != nil {
			t.Fatalf("valid id %q does not round-trip in a lease id: %v", id, err)
		}
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := (*tenancy.Config)(nil).WithDefaults()
	if c.LeaseTTL != 30*time.Second || c.DefaultMaxSlots != 1 || c.DefaultWeight != 1 || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	if _, err := tenancy.New(nil, nil); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("New(nil pool) = %v", err)
	}
}

func TestTenantsAndWeights(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, &tenancy.Config{DefaultWeight: 2})
	ctx := testCtx(t)

	tn, tok, err := st.CreateTenant(ctx, "acme", "Acme Inc.")
	if err != nil {
		t.Fatal(err)
	}
	if tn.ID != "acme" || tn.DisplayName != "Acme Inc." || tn.Weight != 2 || tn.Paused || tn.CreatedAt.IsZero() {
		t.Fatalf("created %+v", tn)
	}
	if !strings.HasPrefix(tok, "fw_") {
		t.Fatalf("token %q", tok)
	}
	if _, _, err := st.CreateTenant(ctx, "acme", "again"); !errors.Is(err, tenancy.ErrTenantExists) {
		t.Fatalf("second create: %v", err)
	}
	// One tenant id rule (events.ValidateTenant): its sentinel and its
	// reason, whichever package refuses the id.
	_, _, err = st.CreateTenant(ctx, "Bad.Id", "")
	if !errors.Is(err, tenancy.ErrInvalidTenant) || !errors.Is(err, events.ErrInvalidTenant) {
		t.Fatalf("bad id: %v, want tenancy.ErrInvalidTenant and events.ErrInvalidTenant", err)
	}
	if want := events.ValidateTenant("Bad.Id").Error(); err.Error() != want {
		t.Fatalf("bad id: %q, want the events rule's reason %q", err, want)
	}
	if _, err := st.Tenant(ctx, "nobody"); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("unknown: %v", err)
	}
	// EnsureTenant: creates on first sight, then returns the same tenant.
	e1 := must[tenancy.Tenant](t)(st.EnsureTenant(ctx, "newco"))
	e2 := must[tenancy.Tenant](t)(st.EnsureTenant(ctx, "newco"))
	if e1 != e2 || e1.Weight != 2 {
		t.Fatalf("ensure: %+v vs %+v", e1, e2)
	}
	if err := st.SetWeight(ctx, "acme", 5); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWeight(ctx, "acme", 0); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("weight 0: %v", err)
	}
	if err := st.SetWeight(ctx, "nobody", 3); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("weight of unknown: %v", err)
	}
	if got := must[tenancy.Tenant](t)(st.Tenant(ctx, "acme")); got.Weight != 5 {
		t.Fatalf("weight %d", got.Weight)
	}
	if err := st.SetDestWeight(ctx, "acme", "b2b:bigpartner", 7); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDestWeight(ctx, "acme", "b2b:bigpartner", -1); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("dest weight -1: %v", err)
	}
	if err := st.SetDestWeight(ctx, "nobody", "postgres", 1); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("dest weight of unknown: %v", err)
	}
	if err := st.SetLimit(ctx, "acme", "postgres", 3); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "nobody", "postgres", 3); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("limit of unknown: %v", err)
	}
	if err := st.SetLimit(ctx, "acme", "mysql", 3); !errors.Is(err, tenancy.ErrInvalidDest) {
		t.Fatalf("limit on bad dest: %v", err)
	}
	if _, err := st.Acquire(ctx, "acme", "postgres", "h"); err != nil {
		t.Fatal(err)
	}
	lims := must[[]tenancy.Limit](t)(st.Limits(ctx, "acme"))
	want := []tenancy.Limit{
		{Tenant: "acme", Dest: "b2b:bigpartner", MaxSlots: 1, Weight: 7},
		{Tenant: "acme", Dest: "postgres", MaxSlots: 3, InUse: 1},
	}
	if len(lims) != len(want) || lims[0] != want[0] || lims[1] != want[1] {
		t.Fatalf("limits %+v, want %+v", lims, want)
	}
	if err := st.SetDestPaused(ctx, "acme", "postgres", true); err != nil {
		t.Fatal(err)
	}
	if lims := must[[]tenancy.Limit](t)(st.Limits(ctx, "acme")); lims[0].Paused || !lims[1].Paused {
		t.Fatalf("limits after pausing postgres: %+v", lims)
	}
	if l := must[[]tenancy.Limit](t)(st.Limits(ctx, "newco")); len(l) != 0 {
		t.Fatalf("newco limits %+v", l)
	}
	if _, err := st.Limits(ctx, "nobody"); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("limits of unknown: %v", err)
	}
	all := must[[]tenancy.Tenant](t)(st.Tenants(ctx))
	if len(all) != 2 || all[0].ID != "acme" || all[1].ID != "newco" {
		t.Fatalf("tenants %+v", all)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)

	_, tok1, err := st.CreateTenant(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	tok2 := must[string](t)(st.IssueToken(ctx, "acme"))
	admin := must[string](t)(st.IssueAdminToken(ctx, "ops"))
	if tok1 == tok2 || len(tok1) != 46 || len(admin) != 46 {
		t.Fatalf("tokens %q %q %q", tok1, tok2, admin)
	}
	if _, err := st.IssueToken(ctx, "nobody"); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("token for unknown: %v", err)
	}
	for _, tc := range []struct {
		tok  string
		want tenancy.Principal
	}{
		{tok1, tenancy.Principal{Tenant: "acme"}},
		{tok2, tenancy.Principal{Tenant: "acme"}},
		{admin, tenancy.Principal{Admin: true}},
	} {
		if p, err := st.VerifyToken(ctx, tc.tok); err != nil || p != tc.want {
			t.Fatalf("verify %q = %+v, %v; want %+v", tc.tok, p, err, tc.want)
		}
	}
	// Only hashes and prefixes are stored: no column of any token row holds
	// more of a token than its first TokenShownLen characters.
	n := tenancy.TokenShownLen + 1
	var leaked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.api_tokens t
		WHERE position($1 in t::text) > 0 OR position($2 in t::text) > 0 OR position($3 in t::text) > 0
		   OR t.hash NOT IN (sha256(convert_to($4, 'UTF8')), sha256(convert_to($5, 'UTF8')), sha256(convert_to($6, 'UTF8')))`,
		tok1[:n], tok2[:n], admin[:n], tok1, tok2, admin).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Fatalf("%d token rows hold more than a token's prefix or a hash that is not SHA-256 of a token", leaked)
	}
	// Malformed and unknown tokens.
	for _, bad := range []string{"", "fw_", "xx_" + tok1[3:], tok1[:45], tok1 + "A", "fw_" + strings.Repeat("!", 43),
		"fw_" + strings.Repeat("A", 43)} {
		if _, err := st.VerifyToken(ctx, bad); !errors.Is(err, tenancy.ErrUnauthorized) {
			t.Fatalf("verify %q = %v, want ErrUnauthorized", bad, err)
		}
	}
	// Revocation affects only the revoked token.
	if _, err := st.RevokeToken(ctx, tok1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.VerifyToken(ctx, tok1); !errors.Is(err, tenancy.ErrUnauthorized) {
		t.Fatalf("revoked token verified: %v", err)
	}
	if _, err := st.RevokeToken(ctx, tok1); !errors.Is(err, tenancy.ErrTokenRevoked) {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := st.VerifyToken(ctx, tok2); err != nil {
		t.Fatalf("other token: %v", err)
	}
}

func TestDefaultsOnFirstSight(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 2})
	ctx := testCtx(t)

	l1 := must[tenancy.Lease](t)(st.Acquire(ctx, "fresh", "b2b:partner1", "h1"))
	if l1.Tenant != "fresh" || l1.Dest != "b2b:partner1" || l1.Token != 1 || l1.Holder != "h1" {
		t.Fatalf("lease %+v", l1)
	}
	tn := must[tenancy.Tenant](t)(st.Tenant(ctx, "fresh"))
	if tn.Weight != 1 || tn.Paused {
		t.Fatalf("tenant %+v", tn)
	}
	must[tenancy.Lease](t)(st.Acquire(ctx, "fresh", "b2b:partner1", "h2"))
	if _, err := st.Acquire(ctx, "fresh", "b2b:partner1", "h3"); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("third acquire: %v", err)
	}
	if c := must[uint64](t)(st.Cursor(ctx, "fresh", "postgres")); c != 1 {
		t.Fatalf("cursor %d", c)
	}
	lims := must[[]tenancy.Limit](t)(st.Limits(ctx, "fresh"))
	if len(lims) != 2 || lims[0].MaxSlots != 2 || lims[0].InUse != 2 || lims[0].Weight != 0 || lims[1].Dest != "postgres" {
		t.Fatalf("limits %+v", lims)
	}
	// AcquireMany creates unseen pairs too, and merges duplicates.
	got := must[[]tenancy.Lease](t)(st.AcquireMany(ctx, []tenancy.AcquireRequest{
		{Tenant: "other", Dest: "clickhouse", Holder: "m", N: 1},
		{Tenant: "fresh", Dest: "b2b:partner1", Holder: "m"},
		{Tenant: "other", Dest: "clickhouse", Holder: "m2", N: 5},
		{Tenant: "third", Dest: "postgres", Holder: "m", N: 1},
	}))
	if len(got) != 3 || got[0].Tenant != "other" || got[0].Slot != 0 || got[1].Slot != 1 || got[2].Tenant != "third" {
		t.Fatalf("acquire many %+v", got)
	}
	if _, err := st.Acquire(ctx, "Bad", "postgres", "h"); !errors.Is(err, tenancy.ErrInvalidTenant) {
		t.Fatalf("bad tenant: %v", err)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)

	l := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h1"))
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if d := l.ExpiresAt.Sub(dbNow); d < 29*time.Second || d > 31*time.Second {
		t.Fatalf("expires in %s", d)
	}
	l2 := must[tenancy.Lease](t)(st.Extend(ctx, l))
	if !l2.ExpiresAt.After(l.ExpiresAt) || l2.Token != l.Token || l2.ID != l.ID {
		t.Fatalf("extended %+v from %+v", l2, l)
	}
	if err := st.Release(ctx, l.ID, l.Token+1); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("release with wrong token: %v", err)
	}
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatalf("second release of the same lease: %v", err)
	}
	if _, err := st.Extend(ctx, l); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("extend after release: %v", err)
	}
	n := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h2"))
	if n.Slot != l.Slot || n.Token != l.Token+1 {
		t.Fatalf("re-acquired %+v after %+v", n, l)
	}
	// The old lease is fenced out now: release and extend do nothing.
	if err := st.Release(ctx, l.ID, l.Token); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("stale release: %v", err)
	}
	if _, err := st.Extend(ctx, l); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("stale extend: %v", err)
	}
	if in := must[int](t)(st.InUse(ctx, "acme", "postgres")); in != 1 {
		t.Fatalf("in use %d after stale release", in)
	}
	if err := st.Release(ctx, "garbage", 1); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("garbage id: %v", err)
	}
	// ReleaseMany: one stale, one live.
	if err := st.SetLimit(ctx, "acme", "postgres", 2); err != nil {
		t.Fatal(err)
	}
	m := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h3"))
	err := st.ReleaseMany(ctx, []tenancy.Lease{l, n, m})
	if !errors.Is(err, tenancy.ErrStaleLease) || !strings.Contains(err.Error(), "1 fenced out") {
		t.Fatalf("release many: %v", err)
	}
	if in := must[int](t)(st.InUse(ctx, "acme", "postgres")); in != 0 {
		t.Fatalf("in use %d after release many", in)
	}
	if err := st.ReleaseMany(ctx, []tenancy.Lease{n, m}); err != nil {
		t.Fatalf("repeat release many: %v", err)
	}
}

func TestExpiryAndSweep(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, &tenancy.Config{LeaseTTL: time.Second})
	ctx := testCtx(t)

	l := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h1"))
	if _, err := st.Acquire(ctx, "acme", "postgres", "h2"); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("acquire while held: %v", err)
	}
	// Age the lease on the database clock instead of waiting.
	if _, err := pool.Exec(ctx, `UPDATE fairway.slots SET expires_at = now() - interval '1 second' WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	// An expired, untaken lease can still release (nobody else owns it).
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatalf("release of expired untaken lease: %v", err)
	}
	l = must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h1"))
	if _, err := pool.Exec(ctx, `UPDATE fairway.slots SET expires_at = now() - interval '1 second' WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	if in := must[int](t)(st.InUse(ctx, "acme", "postgres")); in != 0 {
		t.Fatalf("expired lease counted in use: %d", in)
	}
	if n := must[int](t)(st.Sweep(ctx)); n != 1 {
		t.Fatalf("swept %d", n)
	}
	if n := must[int](t)(st.Sweep(ctx)); n != 0 {
		t.Fatalf("swept again %d", n)
	}
	// Without a sweep: expired leases are reclaimed by the next acquirer.
	n := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h2"))
	if _, err := pool.Exec(ctx, `UPDATE fairway.slots SET expires_at = now() - interval '1 second' WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	r := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "h3"))
	if r.Token != n.Token+1 {
		t.Fatalf("reclaimed %+v after %+v", r, n)
	}
	if err := st.Release(ctx, n.ID, n.Token); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Fatalf("late release after reclaim: %v", err)
	}
}

func TestLiveLimitChange(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	const tn, d = "acme", "clickhouse"

	acquire := func() (tenancy.Lease, error) { return st.Acquire(ctx, tn, d, "h") }
	a := must[tenancy.Lease](t)(acquire())
	if _, err := acquire(); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("over default limit: %v", err)
	}
	// Raise: takes effect for the next acquisition.
	if err := st.SetLimit(ctx, tn, d, 4); err != nil {
		t.Fatal(err)
	}
	held := []tenancy.Lease{a}
	for range 3 {
		held = append(held, must[tenancy.Lease](t)(acquire()))
	}
	if _, err := acquire(); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("over raised limit: %v", err)
	}
	// Lower to 2 with 4 held: nothing new until in-use falls under 2.
	if err := st.SetLimit(ctx, tn, d, 2); err != nil {
		t.Fatal(err)
	}
	for i, l := range held[:3] { // release slots 0, 1, 2; slot 3 stays held
		if err := st.Release(ctx, l.ID, l.Token); err != nil {
			t.Fatal(err)
		}
		if _, err := acquire(); !errors.Is(err, tenancy.ErrAtLimit) {
			t.Fatalf("acquired after %d releases with in-use %d over lowered limit 2: %v", i+1, 3-i, err)
		}
	}
	if err := st.Release(ctx, held[3].ID, held[3].Token); err != nil {
		t.Fatal(err)
	}
	b := must[tenancy.Lease](t)(acquire())
	c := must[tenancy.Lease](t)(acquire())
	if _, err := acquire(); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("over lowered limit: %v", err)
	}
	if b.Slot != 0 || c.Slot != 1 {
		t.Fatalf("slots %d %d, want 0 1", b.Slot, c.Slot)
	}
	// Limit 0 stops acquisition; pausing stops it too, with ErrPaused.
	if err := st.SetLimit(ctx, tn, d, 0); err != nil {
		t.Fatal(err)
	}
	_ = st.Release(ctx, b.ID, b.Token)
	_ = st.Release(ctx, c.ID, c.Token)
	if _, err := acquire(); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("limit 0: %v", err)
	}
	if err := st.SetLimit(ctx, tn, d, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, tn, true); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(); !errors.Is(err, tenancy.ErrPaused) || !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("paused: %v", err)
	}
	if got := must[[]tenancy.Lease](t)(st.AcquireMany(ctx, []tenancy.AcquireRequest{{Tenant: tn, Dest: d}})); len(got) != 0 {
		t.Fatalf("paused acquire many: %+v", got)
	}
	if err := st.SetPaused(ctx, tn, false); err != nil {
		t.Fatal(err)
	}
	must[tenancy.Lease](t)(acquire())
	if err := st.SetPaused(ctx, "nobody", true); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("pause unknown: %v", err)
	}
}

func TestListen(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()

	ch, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) tenancy.Released {
		t.Helper()
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed", what)
			}
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no notification in 30s", what)
		}
		return tenancy.Released{}
	}
	l := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "b2b:p1", "h"))
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	if r := next("release"); r != (tenancy.Released{Tenant: "acme", Dest: "b2b:p1", Slots: 1}) {
		t.Fatalf("got %+v", r)
	}
	// A stale or repeated release notifies nothing; the next event seen is
	// from the limit change below.
	_ = st.Release(ctx, l.ID, l.Token)
	if err := st.SetLimit(ctx, "acme", "postgres", 3); err != nil {
		t.Fatal(err)
	}
	if r := next("set limit"); r != (tenancy.Released{Tenant: "acme", Dest: "postgres", Slots: 1}) {
		t.Fatalf("got %+v", r)
	}
	// Kill the listener's connection: it reconnects, says "rescan", and
	// keeps delivering.
	var killed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()) k`, tenancy.ListenerAppName).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d listener connections", killed)
	}
	if r := next("reconnect"); r != (tenancy.Released{}) {
		t.Fatalf("after reconnect got %+v, want rescan", r)
	}
	l = must[tenancy.Lease](t)(st.Acquire(ctx, "beta", "clickhouse", "h"))
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	if r := next("release after reconnect"); r != (tenancy.Released{Tenant: "beta", Dest: "clickhouse", Slots: 1}) {
		t.Fatalf("got %+v", r)
	}
	cancel()
	for range ch { //nolint:revive // drain until closed
	}
}
