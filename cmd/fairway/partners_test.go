package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
)

func TestPartnersCmd(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	const secret = "partner-signing-secret-xyz"
	env := map[string]string{
		"FAIRWAY_SECRET_KEY": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"P1_SECRET":          secret,
	}
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		c := &cli{getenv: func(k string) string { return env[k] }, out: &out, errOut: &errOut, databaseURL: dsn, logFormat: "text", logLevel: "warn"}
		cmd := c.partnersCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		err := cmd.ExecuteContext(context.Background())
		return out.String(), errOut.String(), err
	}
	var all strings.Builder
	mustRun := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(args...)
		if err != nil {
			t.Fatalf("partners %v: %v\n%s", args, err, errOut)
		}
		all.WriteString(out + errOut)
		return out
	}
	out := mustRun("add", "acme", "shop", "--url", "https://shop.example/hook?token=tok-SECRET", "--secret-env", "P1_SECRET", "--ops", "upsert", "--timeout", "3s")
	if !strings.Contains(out, "acme b2b:shop") || !strings.Contains(out, "ops upsert") {
		t.Fatalf("add printed %q", out)
	}
	mustRun("add", "acme", "local", "--url", "http://127.0.0.1:9/hook", "--secret", "another-secret-0123456789", "--allow-insecure-http")
	out = mustRun("list")
	if !strings.Contains(out, "set (encrypted)") || !strings.Contains(out, "shop") || !strings.Contains(out, "local") || !strings.Contains(out, "3s") {
		t.Fatalf("list printed\n%s", out)
	}
	mustRun("disable", "acme", "shop")
	if out = mustRun("list", "acme"); !strings.Contains(out, "false") {
		t.Fatalf("list after disable:\n%s", out)
	}
	mustRun("enable", "acme", "shop")
	mustRun("remove", "acme", "local")
	if out = mustRun("list"); strings.Contains(out, "local") {
		t.Fatalf("list after remove:\n%s", out)
	}
	for _, bad := range [][]string{
		{"add", "acme", "x", "--url", "http://plain.example/hook", "--secret-env", "P1_SECRET"},
		{"add", "acme", "x", "--url", "https://ok.example", "--secret", "s-0123456789abcdef", "--secret-env", "P1_SECRET"},
		{"add", "acme", "x", "--url", "https://ok.example"},
		{"add", "acme", "x", "--url", "https://ok.example", "--secret-env", "UNSET"},
		{"add", "acme", "x", "--url", "https://ok.example", "--secret-env", "P1_SECRET", "--ops", "merge"},
		{"add", "acme", "shop", "--url", "https://ok.example", "--secret-env", "P1_SECRET"}, // exists
		{"remove", "acme", "nope"},
	} {
		out, errOut, err := run(bad...)
		if err == nil {
			t.Errorf("partners %v succeeded: %s", bad, out)
		}
		all.WriteString(out + errOut + err.Error())
	}
	var ue usageError
	if _, _, err := run("add", "acme", "x", "--url", "https://ok.example"); !errors.As(err, &ue) {
		t.Errorf("missing secret: %v, want a usage error", err)
	}
	if s := all.String(); strings.Contains(s, secret) || strings.Contains(s, "tok-SECRET") || strings.Contains(s, "another-secret") {
		t.Fatalf("output shows a secret:\n%s", s)
	}
}
