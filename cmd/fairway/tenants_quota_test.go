package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestQuotaCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	srv, _, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}
		cmd := newRootCmd(func(k string) string { return env[k] }, &out, &errOut)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	listRow := func(tenant string) string {
		t.Helper()
		out, err := run("tenants", "list")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, tenant+" ") {
				return l
			}
		}
		t.Fatalf("no row of %s in\n%s", tenant, out)
		return ""
	}
	for _, id := range []string{"acme", "globex"} {
		if _, err := run("tenants", "create", id); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run("tenants", "set-quota", "acme", "--events-per-sec", "100"); err != nil || out != "acme: quota 100 events/s (burst 100)\n" {
		t.Fatalf("set-quota: %q %v", out, err)
	}
	// Only the quotas named change.
	if _, err := run("tenants", "set-quota", "acme", "--max-backlog", "5000", "--bytes-per-sec", "1000", "--bytes-burst", "4000"); err != nil {
		t.Fatal(err)
	}
	want := "100 events/s (burst 100), 1000 bytes/s (burst 4000), max backlog 5000"
	if row := listRow("acme"); !strings.HasSuffix(row, want) {
		t.Fatalf("list row %q, want it to end in %q", row, want)
	}
	if row := listRow("globex"); !strings.HasSuffix(row, " -") {
		t.Fatalf("list row %q, want no quota", row)
	}
	// A new rate without --burst gets one second's worth; 0 switches a
	// rate off with its burst.
	if out, err := run("tenants", "set-quota", "acme", "--events-per-sec", "20", "--bytes-per-sec", "0"); err != nil ||
		out != "acme: quota 20 events/s (burst 20), max backlog 5000\n" {
		t.Fatalf("set-quota: %q %v", out, err)
	}
	out, err := run("status")
	if err != nil || !strings.Contains(out, "INGEST QUOTA") || !strings.Contains(out, "acme") || !strings.Contains(out, "20 events/s (burst 20), max backlog 5000") {
		t.Fatalf("status: %q %v", out, err)
	}
	if out, err := run("status", "--tenant", "globex"); err != nil || strings.Contains(out, "QUOTA") {
		t.Fatalf("status of a tenant without quota: %q %v", out, err)
	}

	for _, args := range [][]string{
		{"acme"},                            // nothing named
		{"acme", "--clear", "--burst", "3"}, // both
	} {
		_, err := run(append([]string{"tenants", "set-quota"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("set-quota %v: %v, want a usage error", args, err)
		}
	}
	for _, c := range []struct {
		args []string
		want error
	}{
		{[]string{"acme", "--bytes-burst", "10"}, tenancy.ErrInvalidArgument}, // no bytes rate
		{[]string{"acme", "--max-backlog", "-1"}, tenancy.ErrInvalidArgument},
		{[]string{"ghost", "--max-backlog", "1"}, tenancy.ErrUnknownTenant},
		{[]string{"ghost", "--clear"}, tenancy.ErrUnknownTenant},
	} {
		if _, err := run(append([]string{"tenants", "set-quota"}, c.args...)...); !errors.Is(err, c.want) {
			t.Errorf("set-quota %v: %v, want %v", c.args, err, c.want)
		}
	}
	if row := listRow("acme"); !strings.HasSuffix(row, "20 events/s (burst 20), max backlog 5000") {
		t.Fatalf("a refused change changed the quota: %q", row)
	}
	if out, err := run("tenants", "set-quota", "acme", "--clear"); err != nil || out != "acme: no quota\n" {
		t.Fatalf("clear: %q %v", out, err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := st.Quota(ctx, "acme"); err != nil || !q.Off() {
		t.Fatalf("after --clear: %+v %v", q, err)
	}
}
