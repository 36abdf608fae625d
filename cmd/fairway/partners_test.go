package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

func TestPartnersCmd(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.NewPool(t)
	const (
		secret    = "partner-signing-secret-xyz"
		whsecBody = "c3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0LWtleQ==" // base64("standard-webhooks-secret-key")
		whsec     = "whsec_" + whsecBody
		secretKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	env := map[string]string{
		"FAIRWAY_SECRET_KEY": secretKey,
		"P1_SECRET":          secret,
		"WHSEC":              whsec,
		"NEXT_WHSEC":         "whsec_bmV4dC1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQ=",
	}
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		c := &cli{getenv: func(k string) string { return env[k] }, out: &out, errOut: &errOut}
		cmd := c.partnersCmd()
		cmd.SetArgs(append(args, "--database-url", dsn))
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
	out := mustRun("add", "acme", "shop", "--url", "https://shop.example/hook?token=tok-SECRET", "--signing", "fairway", "--secret-env", "P1_SECRET", "--ops", "upsert", "--timeout", "3s")
	if !strings.Contains(out, "acme b2b:shop") || !strings.Contains(out, "ops upsert") || !strings.Contains(out, "signing fairway") {
		t.Fatalf("add printed %q", out)
	}
	mustRun("add", "acme", "local", "--url", "http://127.0.0.1:9/hook", "--signing", "fairway", "--secret", "another-secret-0123456789", "--allow-insecure-http")
	if out = mustRun("add", "acme", "std", "--url", "https://std.example/hook", "--secret-env", "WHSEC"); !strings.Contains(out, "signing standard") {
		t.Fatalf("add without --signing printed %q, want standard signing", out)
	}
	// A generated secret is printed once, in its whsec_ form, and is the
	// one stored.
	out, _, err := run("add", "acme", "gen", "--url", "https://gen.example/hook", "--generate-secret")
	if err != nil {
		t.Fatal(err)
	}
	generated := generatedSecret(t, out)
	key, _ := b2b.ParseSecretKey(secretKey)
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(name string) b2b.Partner {
		t.Helper()
		p, err := reg.Get(context.Background(), "acme", name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := stored("gen"); b2b.WebhookSecret(p.Secret) != generated || p.Signing != b2b.SigningStandard {
		t.Fatalf("add --generate-secret printed %q; stored %s signing, another secret", generated, p.Signing)
	}
	if p := stored("std"); string(p.Secret) != "standard-webhooks-secret-key" {
		t.Fatalf("add --secret-env WHSEC stored the wrong key: %d bytes", len(p.Secret))
	}
	out = mustRun("list")
	if !strings.Contains(out, "set (encrypted)") || !strings.Contains(out, "shop") || !strings.Contains(out, "local") || !strings.Contains(out, "3s") ||
		!strings.Contains(out, "SIGNING") || !strings.Contains(out, "fairway") || !strings.Contains(out, "standard") {
		t.Fatalf("list printed\n%s", out)
	}
	// Moving shop to standard signing keeps its secret.
	if out = mustRun("set-signing", "acme", "shop", "standard"); !strings.Contains(out, "acme b2b:shop signs with standard") {
		t.Fatalf("set-signing printed %q", out)
	}
	if p := stored("shop"); p.Signing != b2b.SigningStandard || string(p.Secret) != secret {
		t.Fatalf("after set-signing: %s signing, secret kept %v", p.Signing, string(p.Secret) == secret)
	}
	// A rotation: the old secret signs too for the overlap.
	if out = mustRun("rotate-secret", "acme", "std", "--secret-env", "NEXT_WHSEC", "--overlap", "2h"); !strings.Contains(out, "the old one signs too until") {
		t.Fatalf("rotate-secret printed %q", out)
	}
	if p := stored("std"); string(p.Secret) != "next-standard-webhooks-secret" || string(p.PreviousSecret) != "standard-webhooks-secret-key" ||
		p.PreviousSecretUntil.Before(time.Now().Add(time.Hour)) {
		t.Fatalf("after rotate-secret: previous secret kept %v until %s", string(p.PreviousSecret) == "standard-webhooks-secret-key", p.PreviousSecretUntil)
	}
	if out = mustRun("list", "acme"); !strings.Contains(out, "previous signs until") {
		t.Fatalf("list during a rotation:\n%s", out)
	}
	out, _, err = run("rotate-secret", "acme", "gen", "--generate-secret", "--overlap", "0")
	if err != nil || !strings.Contains(out, "the old one no longer signs") {
		t.Fatalf("rotate-secret --overlap 0: %q, %v", out, err)
	}
	if p := stored("gen"); b2b.WebhookSecret(p.Secret) != generatedSecret(t, out) || b2b.WebhookSecret(p.Secret) == generated || p.PreviousSecret != nil {
		t.Fatal("rotate-secret --generate-secret --overlap 0 did not store the printed secret alone")
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
		{"add", "acme", "x", "--url", "https://ok.example", "--secret-env", "P1_SECRET"},                                                                 // standard wants whsec_
		{"add", "acme", "x", "--url", "https://ok.example", "--signing", "fairway", "--generate-secret"},                                                 // whsec_ only
		{"add", "acme", "x", "--url", "https://ok.example", "--signing", "svix", "--secret-env", "WHSEC"},                                                // no such scheme
		{"add", "acme", "x", "--url", "https://ok.example", "--secret-env", "WHSEC", "--generate-secret"},                                                // two secrets
		{"add", "acme", "x", "--url", "https://ok.example", "--secret", "whsec_" + base64.StdEncoding.EncodeToString([]byte("23-bytes-are-too-short!"))}, // < 24 bytes
		{"set-signing", "acme", "shop", "svix"},
		{"set-signing", "acme", "local", "standard"},                  // removed above
		{"rotate-secret", "acme", "std", "--secret-env", "P1_SECRET"}, // standard wants whsec_
		{"rotate-secret", "acme", "std", "--generate-secret", "--overlap", "-1h"},
		{"rotate-secret", "acme", "nope", "--generate-secret"},
	} {
		out, errOut, err := run(bad...)
		if err == nil {
			t.Errorf("partners %v succeeded: %s", bad, out)
		}
		all.WriteString(out + errOut + err.Error())
	}
	// An http URL is refused with the flag that permits it.
	if _, _, err := run("add", "acme", "x", "--url", "http://plain.example/hook", "--secret-env", "WHSEC"); err == nil ||
		!strings.Contains(err.Error(), "is http") || !strings.Contains(err.Error(), "--allow-insecure-http") {
		t.Errorf("an http URL: %v, want an error naming --allow-insecure-http", err)
	}
	var ue usageError
	if _, _, err := run("add", "acme", "x", "--url", "https://ok.example"); !errors.As(err, &ue) {
		t.Errorf("missing secret: %v, want a usage error", err)
	}
	if s := all.String(); strings.Contains(s, secret) || strings.Contains(s, "tok-SECRET") || strings.Contains(s, "another-secret") || strings.Contains(s, whsecBody) {
		t.Fatalf("output shows a secret:\n%s", s)
	}
}

// generatedSecret returns the secret a command printed, failing when
// there is not exactly one.
func generatedSecret(t *testing.T, out string) string {
	t.Helper()
	var found []string
	for line := range strings.Lines(out) {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "secret "); ok {
			found = append(found, s)
		}
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], "whsec_") {
		t.Fatalf("output shows %d secrets, want one whsec_ secret:\n%s", len(found), out)
	}
	return found[0]
}
