package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// fairway runs the CLI in process against dsn and returns stdout, stderr.
func fairway(t *testing.T, dsn string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return dsn
		}
		return ""
	}
	cmd := newRootCmd(getenv, &out, &errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestTenantCommands(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	out, _, err := fairway(t, dsn, "migrate")
	if err != nil || !strings.Contains(out, "applied") {
		t.Fatalf("migrate: %q %v", out, err)
	}
	if out, _, _ := fairway(t, dsn, "migrate"); !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: %q", out)
	}
	tok, errOut, err := fairway(t, dsn, "tenants", "create", "acme", "--name", "Acme Inc")
	if err != nil || !strings.HasPrefix(tok, "fw_") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("create: %q %q %v", tok, errOut, err)
	}
	if _, _, err := fairway(t, dsn, "tenants", "create", "acme"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("create twice: %v", err)
	}
	if _, _, err := fairway(t, dsn, "tenants", "create", "Bad.Tenant"); err == nil || !strings.Contains(err.Error(), "Bad.Tenant") {
		t.Fatalf("invalid id: %v", err)
	}
	if _, _, err := fairway(t, dsn, "tenants", "set-limit", "acme", "--dest", "postgres", "--max", "4"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fairway(t, dsn, "tenants", "set-limit", "acme", "--dest", "s3", "--max", "4"); err == nil {
		t.Fatal("set-limit accepted an unknown destination")
	}
	if _, _, err := fairway(t, dsn, "tenants", "set-limit", "ghost", "--dest", "postgres", "--max", "2"); err == nil {
		t.Fatal("set-limit on an unknown tenant must fail, not create it")
	}
	if _, _, err := fairway(t, dsn, "tenants", "set-weight", "acme", "--weight", "3"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"pause", "acme", "--dest", "postgres"}, {"resume", "acme", "--dest", "postgres"}, {"pause", "acme"}} {
		if out, _, err := fairway(t, dsn, append([]string{"tenants"}, args...)...); err != nil || !strings.Contains(out, args[0]+"d") {
			t.Fatalf("tenants %v: %q %v", args, out, err)
		}
	}
	if _, _, err := fairway(t, dsn, "tenants", "pause", "acme", "--dest", "clickhouse"); err == nil {
		t.Fatal("pausing a destination the tenant never used must fail")
	}
	out, _, err = fairway(t, dsn, "tenants", "list")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "acme") && strings.Contains(l, "postgres") {
			row = l
		}
	}
	if f := strings.Fields(row); len(f) < 6 || f[1] != "3" || f[2] != "true" || f[4] != "4" {
		t.Fatalf("list row %q in\n%s", row, out)
	}
	if tok2, _, err := fairway(t, dsn, "tenants", "token", "acme"); err != nil || tok2 == tok || !strings.HasPrefix(tok2, "fw_") {
		t.Fatalf("token: %q %v", tok2, err)
	}
	if adm, _, err := fairway(t, dsn, "admin-token", "create"); err != nil || !strings.HasPrefix(adm, "fw_") {
		t.Fatalf("admin token: %q %v", adm, err)
	}
}

func TestMissingDatabaseURLIsAUsageError(t *testing.T) {
	t.Parallel()
	_, _, err := fairway(t, "", "tenants", "list")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("err %v, want a usage error naming DATABASE_URL", err)
	}
}
