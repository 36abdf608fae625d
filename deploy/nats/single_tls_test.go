package natsconf_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

// TestSingleNodeTLS starts a server from single-tls.conf with certificates
// of a test CA and checks that it takes TLS connections with a client
// certificate only, that the users and permissions of accounts.conf hold
// over TLS, and that the services' NATS settings (bootstrap.NATSConfig)
// connect to it as README.md says.
func TestSingleNodeTLS(t *testing.T) {
	// Not parallel: the config names its files through the environment.
	files := testenv.NewTLSFiles(t)
	t.Setenv("FAIRWAY_NATS_TLS_CERT", files.ServerCert)
	t.Setenv("FAIRWAY_NATS_TLS_KEY", files.ServerKey)
	t.Setenv("FAIRWAY_NATS_TLS_CA", files.CA)
	opts := loadConfig(t, "single-tls.conf")
	if opts.ServerName != "fairway-single" || opts.Host != "0.0.0.0" || opts.HTTPHost != "127.0.0.1" || opts.SystemAccount != "SYS" ||
		opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("single-tls.conf: unexpected options: name=%q host=%q http_host=%q system_account=%q tls=%v",
			opts.ServerName, opts.Host, opts.HTTPHost, opts.SystemAccount, opts.TLSConfig != nil)
	}
	opts.Host = "127.0.0.1" // the test certificate names loopback
	srv := startServer(t, opts)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The server announces that it wants TLS and a client certificate.
	conn, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	var info struct {
		TLSRequired bool `json:"tls_required"`
		TLSVerify   bool `json:"tls_verify"`
	}
	if err != nil || !strings.HasPrefix(line, "INFO ") || json.Unmarshal([]byte(line[5:]), &info) != nil || !info.TLSRequired || !info.TLSVerify {
		t.Fatalf("INFO %q (%v): want tls_required and tls_verify", line, err)
	}

	// A service: the user and password in the URL, CA and certificate
	// from its flags.
	svc := bootstrap.NATSConfig{
		URL: strings.Replace(url, "://", "://ingest:"+password(t, "ingest")+"@", 1),
		CA:  files.CA, Cert: files.ClientCert, Key: files.ClientKey,
	}
	nc, err := bootstrap.ConnectNATS(ctx, svc, "fairway-ingest", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("ingest with CA and client certificate: %v", err)
	}
	nc.Close()
	for _, tc := range []struct {
		name   string
		change func(c *bootstrap.NATSConfig)
		want   string
	}{
		{"no client certificate", func(c *bootstrap.NATSConfig) { c.Cert, c.Key = "", "" }, "the server refused the TLS handshake"},
		{"no CA", func(c *bootstrap.NATSConfig) { c.CA = "" }, "certificate signed by unknown authority"},
		{"wrong password", func(c *bootstrap.NATSConfig) { c.URL = strings.Replace(url, "://", "://ingest:wrong@", 1) }, "Authorization Violation"},
	} {
		cfg := svc
		tc.change(&cfg)
		if nc, err := bootstrap.ConnectNATS(ctx, cfg, "fairway-ingest", slog.New(slog.DiscardHandler)); err == nil {
			nc.Close()
			t.Errorf("%s: connected", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}

	// The users of accounts.conf and their permissions, over TLS.
	tlsOpts, err := bootstrap.NATSConfig{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}.Options()
	if err != nil {
		t.Fatal(err)
	}
	ingest := connect(t, url, "ingest", tlsOpts...)
	if _, err := events.EnsureStream(ctx, ingest.js, events.StreamConfig{}); err != nil {
		t.Fatalf("ingest: ensure PRODUCTS: %v", err)
	}
	ingest.publishEvent(ctx, testEvent("initech", "sku-1", 1))
	ingest.denyPublish("work.postgres.acme")

	acme := connect(t, url, "publisher-acme", tlsOpts...)
	acme.publishEvent(ctx, testEvent("acme", "sku-1", 1))
	acme.denyJSPublish("products.globex.upsert")

	op := connect(t, url, "operator", tlsOpts...)
	if n := op.stream(ctx, events.StreamName).CachedInfo().State.Msgs; n != 2 {
		t.Errorf("PRODUCTS holds %d events, want 2", n)
	}
}
