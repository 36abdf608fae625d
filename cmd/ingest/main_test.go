package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@h/db", "NATS_URL": "nats://n:4222", "FAIRWAY_INGEST_LISTEN": ":9000",
		"NATS_CREDS": "/run/ingest.creds", "FAIRWAY_INGEST_TLS_CERT": "/run/cert.pem", "FAIRWAY_INGEST_TLS_KEY": "/run/key.pem"}
	c, err := parseConfig([]string{"--max-events", "50", "--nats-ca", "/run/ca.pem"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != env["DATABASE_URL"] || c.Listen != ":9000" || c.Ingest.MaxEvents != 50 ||
		c.NATS != (bootstrap.NATSConfig{URL: env["NATS_URL"], Creds: "/run/ingest.creds", CA: "/run/ca.pem"}) ||
		c.TLS != (bootstrap.ServerTLS{CertFile: "/run/cert.pem", KeyFile: "/run/key.pem"}) {
		t.Fatalf("config %+v", c)
	}
	if c.Ingest.MaxCSVRecordBytes != ingest.MaxCSVRecordBytesDefault || c.Ingest.UploadMinRate != ingest.UploadMinRateDefault ||
		c.Ingest.UploadGrace != ingest.UploadGraceDefault || c.Ingest.UploadTimeout != ingest.UploadTimeoutDefault {
		t.Fatalf("upload limits %+v, want the defaults", c.Ingest)
	}
	c, err = parseConfig([]string{"--max-csv-record", "4096", "--upload-min-rate", "1000", "--upload-grace", "5s", "--upload-timeout", "1h"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingest.MaxCSVRecordBytes != 4096 || c.Ingest.UploadMinRate != 1000 || c.Ingest.UploadGrace != 5*time.Second || c.Ingest.UploadTimeout != time.Hour {
		t.Fatalf("upload limits %+v", c.Ingest)
	}
	if _, err := parseConfig(nil, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("missing DATABASE_URL: %v", err)
	}
	// Every flag has a variable: these are read when no flag is given.
	env = map[string]string{"DATABASE_URL": "postgres://x@h/db", "FAIRWAY_INGEST_SPOOL_DIR": "/var/lib/fairway/imports",
		"FAIRWAY_INGEST_NODE": "n1", "FAIRWAY_INGEST_MAX_EVENTS": "7", "FAIRWAY_INGEST_SHUTDOWN_GRACE": "3s",
		"FAIRWAY_LOG_LEVEL": "debug", "FAIRWAY_LOG_FORMAT": "json"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingest.SpoolDir != "/var/lib/fairway/imports" || c.Ingest.Node != "n1" || c.Ingest.MaxEvents != 7 || c.ShutdownGrace != 3*time.Second ||
		c.Log != (bootstrap.LogConfig{Format: "json", Level: "debug"}) || c.Listen != bootstrap.IngestListenDefault {
		t.Fatalf("config from the environment %+v", c)
	}
}

// The binary: --help exits 0 and names every variable, never a password
// from the environment; --version names the commit; flags take two
// dashes.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(testenv.BuildCommands(t, "ingest"), "ingest")
	secrets := []string{"NATS_URL=nats://ingest:hunter2@n:4222", "DATABASE_URL=postgres://fairway:hunter2@db/fairway"}
	out, errOut, code := testenv.RunCommand(t, bin, secrets, "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"--listen", "(env FAIRWAY_INGEST_LISTEN)", "(env NATS_URL, set)", "(env DATABASE_URL, set)", "(env NATS_CREDS)",
		"(env FAIRWAY_INGEST_TLS_CERT)", "(env FAIRWAY_INGEST_SPOOL_DIR)", "(env FAIRWAY_LOG_LEVEL)", "(env FAIRWAY_LOG_FORMAT)", "--version"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("--help shows a password from the environment:\n%s", out)
	}
	out, errOut, code = testenv.RunCommand(t, bin, nil, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut)
	}
	testenv.CheckVersion(t, "ingest", out)
	if _, errOut, code = testenv.RunCommand(t, bin, nil, "-listen", ":1"); code != 2 || !strings.Contains(errOut, "--listen") {
		t.Errorf("-listen: exit %d, %q; want 2 and the two-dash spelling", code, errOut)
	}
}

// Ingest in production shape: it reaches a NATS server that requires TLS
// and a client certificate with a credentials file (operator mode), and
// serves HTTPS. An event posted over HTTPS lands in PRODUCTS; a plain HTTP
// request never reaches the API.
func TestRunTLS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := testenv.SecureNATS(t, testenv.NATSAuthJWT)
	web := testenv.NewTLSFiles(t) // the HTTPS certificate has a CA of its own
	dsn := testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := bootstrap.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := store.CreateTenant(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	env := map[string]string{
		"DATABASE_URL": dsn, "FAIRWAY_INGEST_LISTEN": addr,
		"NATS_URL": ns.ClientURL(), "NATS_CREDS": ns.Creds, "NATS_CA": ns.TLS.CA, "NATS_CERT": ns.TLS.ClientCert, "NATS_KEY": ns.TLS.ClientKey,
		"FAIRWAY_INGEST_TLS_CERT": web.ServerCert, "FAIRWAY_INGEST_TLS_KEY": web.ServerKey,
	}
	cfg, err := parseConfig([]string{"--spool-dir", t.TempDir(), "--shutdown-grace", "5s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ingest.Logger = slog.New(slog.DiscardHandler)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, cfg) }()

	client := web.HTTPClient(t)
	base := "https://" + addr
	for {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("ingest stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("ingest not ready over HTTPS: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tenants/acme/events",
		strings.NewReader(`[{"product_id":"sku-1","version":1,"op":"upsert","payload":{"name":"Chair"}}]`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.TLS == nil {
		t.Fatalf("POST events over HTTPS: %d %s", resp.StatusCode, body)
	}

	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP answered %d %q", resp.StatusCode, b)
		}
	}

	// The event is in PRODUCTS, read back as the same NATS user.
	nc, err := cfg.NATS.Connect("ingest-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, events.LayoutDefault.StoredSubject("products.acme.upsert"))
	if err != nil {
		t.Fatalf("event not in PRODUCTS: %v", err)
	}
	var ev struct {
		ProductID string `json:"product_id"`
	}
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.ProductID != "sku-1" {
		t.Fatalf("stored %s (%v)", msg.Data, err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
