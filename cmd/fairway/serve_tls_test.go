package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// `fairway serve` with --tls-cert and --tls-key (here from the environment)
// serves the dashboard over HTTPS, and the --nats-* flags take the CLI to a
// NATS server that requires TLS, a client certificate and a credentials
// file; wrong credentials are refused with the server's reason.
func TestServeTLSWithSecureNATS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	ns := testenv.SecureNATS(t, testenv.NATSAuthJWT)
	web := testenv.NewTLSFiles(t)
	env := map[string]string{"DATABASE_URL": dsn, "FAIRWAY_SERVE_TLS_CERT": web.ServerCert, "FAIRWAY_SERVE_TLS_KEY": web.ServerKey}
	natsFlags := []string{"--nats-url", ns.ClientURL(), "--nats-ca", ns.TLS.CA, "--nats-cert", ns.TLS.ClientCert, "--nats-key", ns.TLS.ClientKey}

	var errOut strings.Builder
	bad := newRootCmd(func(k string) string { return env[k] }, io.Discard, &errOut)
	bad.SetArgs(append(natsFlags, "--nats-creds", testenv.StrangerCreds(t), "status"))
	if err := bad.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("status with a stranger's credentials: %v", err)
	}

	out := make(lines, 16)
	cmd := newRootCmd(func(k string) string { return env[k] }, out, io.Discard)
	cmd.SetArgs(append(natsFlags, "--nats-creds", ns.Creds, "serve", "--listen", "127.0.0.1:0"))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(runCtx) }()
	var base string
	select {
	case line := <-out:
		if base = strings.TrimSuffix(regexp.MustCompile(`https://\S+/ui/`).FindString(line), "/ui/"); base == "" {
			t.Fatalf("no https URL in %q", line)
		}
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("serve printed no address")
	}
	client := web.HTTPClient(t)
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || string(body) != "ok\n" {
		t.Errorf("GET /healthz over HTTPS: %d %q", resp.StatusCode, body)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel: %v", err)
	}
}
