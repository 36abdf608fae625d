package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// fairway runs the CLI in process against dsn and returns stdout, stderr.
func fairway(t *testing.T, dsn string, args ...string) (string, string, error) {
	t.Helper()
	return fairwayEnv(t, map[string]string{"DATABASE_URL": dsn}, args...)
}

// fairwayEnv runs the CLI in process with the environment env.
func fairwayEnv(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(func(k string) string { return env[k] }, &out, &errOut)
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
	if _, _, err := fairway(t, dsn, "tenants", "create", "acme"); err == nil || !strings.Contains(err.Error(), "exists") ||
		!strings.Contains(err.Error(), "fairway tenants token acme") {
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
	if out, _, err := fairway(t, dsn, "tenants", "set-rate", "acme", "--dest", "postgres", "--events-per-sec", "50"); err != nil || !strings.Contains(out, "at most 50 events/s in postgres") {
		t.Fatalf("set-rate: %q %v", out, err)
	}
	if f := strings.Fields(listRow(t, dsn, "acme", "postgres")); len(f) < 8 || f[7] != "50/s" {
		t.Fatalf("list row after set-rate: %q", f)
	}
	// Every flag has an environment variable named for its command.
	if out, _, err := fairwayEnv(t, map[string]string{"DATABASE_URL": dsn, "FAIRWAY_TENANTS_SET_RATE_DEST": "postgres",
		"FAIRWAY_TENANTS_SET_RATE_EVENTS_PER_SEC": "60"}, "tenants", "set-rate", "acme"); err != nil || !strings.Contains(out, "at most 60 events/s in postgres") {
		t.Fatalf("set-rate from the environment: %q %v", out, err)
	}
	for _, bad := range [][]string{{"--events-per-sec", "50"}, {"--dest", "postgres"}, {"--dest", "postgres", "--events-per-sec", "-1"}} {
		if _, _, err := fairway(t, dsn, append([]string{"tenants", "set-rate", "acme"}, bad...)...); err == nil {
			t.Fatalf("set-rate %v accepted", bad)
		}
	}
	// PAUSED says what holds acme's postgres back: its own pause, the
	// tenant's, both or none.
	for _, step := range []struct {
		args   []string
		paused string
	}{
		{[]string{"pause", "acme", "--dest", "postgres"}, "dest"},
		{[]string{"pause", "acme"}, "tenant,dest"},
		{[]string{"resume", "acme", "--dest", "postgres"}, "tenant"},
		{[]string{"resume", "acme"}, "no"},
		{[]string{"pause", "acme"}, "tenant"},
	} {
		if out, _, err := fairway(t, dsn, append([]string{"tenants"}, step.args...)...); err != nil || !strings.Contains(out, step.args[0]+"d") {
			t.Fatalf("tenants %v: %q %v", step.args, out, err)
		}
		if f := strings.Fields(listRow(t, dsn, "acme", "postgres")); len(f) < 3 || f[2] != step.paused {
			t.Fatalf("after tenants %v, PAUSED %q, want %s", step.args, f, step.paused)
		}
	}
	if _, _, err := fairway(t, dsn, "tenants", "pause", "acme", "--dest", "clickhouse"); err == nil {
		t.Fatal("pausing a destination the tenant never used must fail")
	}
	if row := listRow(t, dsn, "acme", "postgres"); len(strings.Fields(row)) < 6 || strings.Fields(row)[1] != "3" || strings.Fields(row)[4] != "4" {
		t.Fatalf("list row %q", row)
	}
	if tok2, _, err := fairway(t, dsn, "tenants", "token", "acme"); err != nil || tok2 == tok || !strings.HasPrefix(tok2, "fw_") {
		t.Fatalf("token: %q %v", tok2, err)
	}
	if adm, _, err := fairway(t, dsn, "admin-token", "create"); err != nil || !strings.HasPrefix(adm, "fw_") {
		t.Fatalf("admin token: %q %v", adm, err)
	}
}

// listRow returns the row of tenants list for tenant and dest.
func listRow(t *testing.T, dsn, tenant, dest string) string {
	t.Helper()
	out, _, err := fairway(t, dsn, "tenants", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == tenant && f[3] == dest {
			return l
		}
	}
	t.Fatalf("no row for %s %s in\n%s", tenant, dest, out)
	return ""
}

func TestMissingDatabaseURLIsAUsageError(t *testing.T) {
	t.Parallel()
	_, _, err := fairway(t, "", "tenants", "list")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("err %v, want a usage error naming DATABASE_URL", err)
	}
}

// The CLI reads FAIRWAY_LOG_LEVEL and FAIRWAY_LOG_FORMAT as the services
// do; a flag wins over its variable.
func TestLogSettingsFromEnvironment(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		want string // in the error; "" for none
	}{
		"level":       {map[string]string{"FAIRWAY_LOG_LEVEL": "loud"}, nil, `log level "loud"`},
		"format":      {map[string]string{"FAIRWAY_LOG_FORMAT": "xml"}, nil, `log format "xml"`},
		"flag wins":   {map[string]string{"FAIRWAY_LOG_LEVEL": "loud"}, []string{"--log-level", "error"}, ""},
		"not given":   {nil, nil, ""},
		"flag itself": {nil, []string{"--log-format", "yaml"}, `log format "yaml"`},
	} {
		env := map[string]string{"DATABASE_URL": dsn}
		for k, v := range tc.env {
			env[k] = v
		}
		_, _, err := fairwayEnv(t, env, append([]string{"tenants", "list"}, tc.args...)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %s", name, err, tc.want)
		}
	}
}

// The binary: --help exits 0 and shows on each command the connection
// and log flags it uses, with their variables, and no others; a password
// in the environment never shows; --version names the commit.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testenv.BuildCommands(t, "fairway"), "fairway")
	secrets := []string{"NATS_URL=nats://operator:hunter2@n:4222", "DATABASE_URL=postgres://fairway:hunter2@db/fairway"}
	for _, tc := range []struct {
		args         []string
		want, absent []string
	}{
		{[]string{"--help"}, []string{"status", "tenants", "--version"}, []string{"--database-url", "--nats-url", "--log-level"}},
		{[]string{"status", "--help"}, []string{"(env DATABASE_URL, set)", "(env NATS_URL, set)", "(env NATS_CREDS)", "(env FAIRWAY_LOG_LEVEL)", "(env FAIRWAY_LOG_FORMAT)"}, nil},
		{[]string{"tenants", "list", "--help"}, []string{"(env DATABASE_URL, set)", "(env FAIRWAY_LOG_LEVEL)"}, []string{"--nats-url"}},
		{[]string{"dlq", "list", "--help"}, []string{"(env NATS_URL, set)", "(env FAIRWAY_DLQ_LIST_TENANT)"}, []string{"--database-url"}},
		{[]string{"dlq", "redrive", "--help"}, []string{"(env DATABASE_URL, set)", "(env FAIRWAY_LOG_LEVEL)"}, nil},
		{[]string{"tenants", "set-rate", "--help"}, []string{"(env FAIRWAY_TENANTS_SET_RATE_EVENTS_PER_SEC)", "(env DATABASE_URL, set)"}, nil},
		{[]string{"migrate", "--help"}, []string{"(env DATABASE_URL, set)"}, []string{"--nats-url", "--log-level"}},
		{[]string{"serve", "--help"}, []string{"(env FAIRWAY_SERVE_LISTEN)", "(env FAIRWAY_SERVE_TLS_CERT)", "(env NATS_URL, set)"}, nil},
	} {
		out, errOut, code := testenv.RunCommand(t, bin, secrets, tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d, stderr %q", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q:\n%s", tc.args, w, out)
			}
		}
		for _, a := range append(tc.absent, "hunter2") {
			if strings.Contains(out, a) {
				t.Errorf("%s shows %q:\n%s", tc.args, a, out)
			}
		}
	}
	out, errOut, code := testenv.RunCommand(t, bin, nil, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut)
	}
	testenv.CheckVersion(t, "fairway", out)
	if _, errOut, code := testenv.RunCommand(t, bin, nil, "status", "--no-such-flag"); code != 2 || !strings.Contains(errOut, "--no-such-flag") {
		t.Errorf("an unknown flag: exit %d, %q; want 2", code, errOut)
	}
}
