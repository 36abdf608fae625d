package main

import (
	"bytes"
	"context"
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

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// fairwayIn is fairway with stdin.
func fairwayIn(t *testing.T, dsn, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(func(k string) string {
		if k == "DATABASE_URL" {
			return dsn
		}
		return ""
	}, &out, &errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestTokensCmd(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := fairway(t, dsn, args...)
		if err != nil {
			t.Fatalf("fairway %v: %v\n%s", args, err, errOut)
		}
		return out
	}
	acme := strings.TrimSpace(run("tenants", "create", "acme"))
	acme2 := strings.TrimSpace(run("tenants", "token", "acme"))
	globex := strings.TrimSpace(run("tenants", "create", "globex"))
	admin := strings.TrimSpace(run("admin-token", "create", "--name", "ops"))
	secrets := []string{acme, acme2, globex, admin}

	var printed strings.Builder
	list := func(args ...string) map[string][]string {
		t.Helper()
		out := run(append([]string{"tokens", "list"}, args...)...)
		printed.WriteString(out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if f := strings.Fields(lines[0]); strings.Join(f, " ") != "ID PREFIX KIND TENANT NAME CREATED REVOKED" {
			t.Fatalf("header %q", lines[0])
		}
		rows := map[string][]string{} // by prefix
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) != 7 {
				t.Fatalf("row %q", l)
			}
			rows[f[1]] = f
		}
		return rows
	}
	rows := list()
	if len(rows) != 4 {
		t.Fatalf("%d rows:\n%s", len(rows), printed.String())
	}
	for _, c := range []struct{ secret, kind, tenant, name string }{
		{acme, "tenant", "acme", "-"}, {acme2, "tenant", "acme", "-"}, {globex, "tenant", "globex", "-"}, {admin, "admin", "-", "ops"},
	} {
		r := rows[c.secret[:tenancy.TokenShownLen]]
		if r == nil || r[2] != c.kind || r[3] != c.tenant || r[4] != c.name || r[6] != "-" {
			t.Errorf("row of %s: %q", c.secret[:tenancy.TokenShownLen], r)
			continue
		}
		if _, err := time.Parse(time.RFC3339, r[5]); err != nil {
			t.Errorf("created %q: %v", r[5], err)
		}
	}
	if acmeRows := list("--tenant", "acme"); len(acmeRows) != 2 || acmeRows[acme[:tenancy.TokenShownLen]] == nil || acmeRows[acme2[:tenancy.TokenShownLen]] == nil {
		t.Errorf("--tenant acme: %v", acmeRows)
	}

	// By id, by prefix, by the whole token on stdin.
	acmeID := rows[acme[:tenancy.TokenShownLen]][0]
	if out := run("tokens", "revoke", acmeID); !strings.Contains(out, "revoked token "+acmeID+" ("+acme[:tenancy.TokenShownLen]+", tenant acme)") {
		t.Errorf("revoke by id printed %q", out)
	}
	if out := run("tokens", "revoke", globex[:tenancy.TokenShownLen]); !strings.Contains(out, "revoked token") || !strings.Contains(out, "tenant globex") {
		t.Errorf("revoke by prefix printed %q", out)
	}
	out, errOut, err := fairwayIn(t, dsn, admin+"\n", "tokens", "revoke", "-")
	if err != nil || !strings.Contains(out, `admin "ops"`) {
		t.Fatalf("revoke from stdin: %q %q %v", out, errOut, err)
	}
	printed.WriteString(out + errOut)
	if out := run("tokens", "revoke", acmeID); !strings.Contains(out, "revoked already") {
		t.Errorf("second revoke printed %q", out)
	}
	rows = list()
	for _, s := range secrets {
		r := rows[s[:tenancy.TokenShownLen]]
		if revoked := r[6] != "-"; revoked != (s != acme2) {
			t.Errorf("row %q revoked %v", r, revoked)
		}
	}
	for _, bad := range []struct {
		args  []string
		usage bool
	}{
		{[]string{"tokens", "revoke", "fw_nope"}, true},
		{[]string{"tokens", "revoke", "123456"}, false},
		{[]string{"tokens", "revoke", acme2 + "x"}, true},
		{[]string{"tokens", "revoke"}, false},
		{[]string{"tokens", "list", "--tenant", "Bad.Id"}, false},
	} {
		out, errOut, err := fairway(t, dsn, bad.args...)
		var ue usageError
		if err == nil || bad.usage && !errors.As(err, &ue) {
			t.Errorf("fairway %v: %v, want an error (usage %v)", bad.args, err, bad.usage)
		}
		printed.WriteString(out + errOut)
		if err != nil {
			printed.WriteString(err.Error())
		}
	}
	if _, _, err := fairwayIn(t, dsn, "", "tokens", "revoke", "-"); err == nil {
		t.Error("revoke - with nothing on stdin succeeded")
	}
	for _, s := range secrets {
		if strings.Contains(printed.String(), s[tenancy.TokenShownLen:]) {
			t.Fatalf("the output shows more of a token than its prefix:\n%s", printed.String())
		}
	}
}

// TestRevokedTokenRefusedOnEveryReplica runs two ingest servers, each with
// its own PostgreSQL pool and NATS connection as two processes would have,
// on one database. Tokens work on both; after `fairway tokens revoke`
// returns, the very next request with a revoked token answers 401 on both,
// and the other tokens still work.
func TestRevokedTokenRefusedOnEveryReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testenv.NewDatabase(t)
	ns, _ := testenv.NATS(t)
	replicas := []string{ingestReplica(t, ctx, dsn, ns.ClientURL(), "a"), ingestReplica(t, ctx, dsn, ns.ClientURL(), "b")}

	mint := func(args ...string) string {
		t.Helper()
		out, errOut, err := fairway(t, dsn, args...)
		if err != nil {
			t.Fatalf("fairway %v: %v\n%s", args, err, errOut)
		}
		return strings.TrimSpace(out)
	}
	acme := mint("tenants", "create", "acme")
	acme2 := mint("tenants", "token", "acme")
	admin := mint("admin-token", "create")

	post := func(base, token string) int {
		t.Helper()
		body := `[{"product_id":"p","version":1,"op":"upsert","payload":{"n":1}}]`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tenants/acme/events", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	expect := func(when string, want map[string]int) {
		t.Helper()
		for i, base := range replicas {
			for name, tok := range map[string]string{"acme": acme, "acme2": acme2, "admin": admin} {
				if got := post(base, tok); got != want[name] {
					t.Errorf("%s: replica %d, %s's token: %d, want %d", when, i, name, got, want[name])
				}
			}
		}
	}
	expect("before revoking", map[string]int{"acme": 202, "acme2": 202, "admin": 202})
	mint("tokens", "revoke", acme[:tenancy.TokenShownLen])
	if _, _, err := fairwayIn(t, dsn, admin, "tokens", "revoke", "-"); err != nil {
		t.Fatal(err)
	}
	expect("after revoking", map[string]int{"acme": 401, "acme2": 202, "admin": 401})
}

// ingestReplica starts an ingest server as cmd/ingest wires it, with its
// own pool, store and NATS connection, and returns its base URL.
func ingestReplica(t *testing.T, ctx context.Context, dsn, natsURL, node string) string {
	t.Helper()
	pool, err := bootstrap.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, events.WithValidatedEvents())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ingest.New(ingest.Deps{Publisher: pub, Tenants: store, Pool: pool},
		&ingest.Config{Node: fmt.Sprint("replica-", node), SpoolDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}
