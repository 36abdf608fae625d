package bootstrap_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// DrainNATS returns only when every message already delivered to a
// subscription was handled and the connection is closed.
func TestDrainNATSWaits(t *testing.T) {
	t.Parallel()
	srv, _ := testenv.NATS(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: srv.ClientURL()}, "drain-test", log)
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	got := make(chan struct{}, 1)
	if _, err := nc.Subscribe("slow", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
		time.Sleep(20 * time.Millisecond)
		handled.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for range n {
		if err := nc.Publish("slow", nil); err != nil {
			t.Fatal(err)
		}
	}
	<-got // the messages reached the subscription
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	if !nc.IsClosed() {
		t.Error("connection not closed")
	}
	if h := handled.Load(); h != n {
		t.Errorf("%d of %d delivered messages handled when DrainNATS returned", h, n)
	}
}

// A service with the right CA, client certificate and credentials connects
// to a server that requires TLS and verifies clients; one whose settings
// are wrong is refused at once, with the server's or the TLS library's
// reason and the flags to check, instead of retrying until its start-up
// deadline.
func TestConnectNATSSecure(t *testing.T) {
	t.Parallel()
	for _, auth := range []struct {
		name     string
		kind     testenv.NATSAuth
		stranger func(testing.TB) string
		set      func(c *bootstrap.NATSConfig, file string)
	}{
		{"creds", testenv.NATSAuthJWT, testenv.StrangerCreds, func(c *bootstrap.NATSConfig, f string) { c.Creds = f }},
		{"nkey", testenv.NATSAuthNkey, testenv.StrangerNkey, func(c *bootstrap.NATSConfig, f string) { c.Nkey = f }},
	} {
		t.Run(auth.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.SecureNATS(t, auth.kind)
			good := bootstrap.NATSConfig{URL: srv.ClientURL(), CA: srv.TLS.CA, Cert: srv.TLS.ClientCert, Key: srv.TLS.ClientKey}
			auth.set(&good, cmp.Or(srv.Creds, srv.Nkey))
			log := slog.New(slog.DiscardHandler)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			nc, err := bootstrap.ConnectNATS(ctx, good, "secure-test", log)
			if err != nil {
				t.Fatalf("right CA, client certificate and %s: %v", auth.name, err)
			}
			defer nc.Close()
			if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
				t.Errorf("connection is not TLS: %v", err)
			}
			sub, err := nc.SubscribeSync("secure.echo")
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish("secure.echo", []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
				t.Fatalf("round trip: %v", err)
			}

			otherCA := testenv.NewTLSFiles(t).CA
			for _, tc := range []struct {
				name   string
				change func(c *bootstrap.NATSConfig)
				want   []string
			}{
				{"no CA", func(c *bootstrap.NATSConfig) { c.CA = "" }, []string{"certificate signed by unknown authority", "--nats-ca"}},
				{"another CA", func(c *bootstrap.NATSConfig) { c.CA = otherCA }, []string{"certificate signed by unknown authority", "--nats-ca"}},
				{"no client certificate", func(c *bootstrap.NATSConfig) { c.Cert, c.Key = "", "" }, []string{"--nats-cert"}},
				{"no " + auth.name, func(c *bootstrap.NATSConfig) { c.Creds, c.Nkey = "", "" }, []string{"Authorization Violation", "--nats-creds"}},
				{"stranger's " + auth.name, func(c *bootstrap.NATSConfig) { auth.set(c, auth.stranger(t)) }, []string{"Authorization Violation", "--nats-creds"}},
			} {
				cfg := good
				tc.change(&cfg)
				start := time.Now()
				nc, err := bootstrap.ConnectNATS(ctx, cfg, "secure-test", log)
				if err == nil {
					nc.Close()
					t.Errorf("%s: connected", tc.name)
					continue
				}
				// A refusal ends the first attempt: the retries until
				// NATSConnectWait would wrap the error with that wait. One
				// attempt is bounded by its dial timeout, which a loaded
				// machine has come close to on a first TLS handshake.
				if took := time.Since(start); strings.Contains(err.Error(), "no server answered within") || took > 3*bootstrap.NATSConnectWait {
					t.Errorf("%s: refused after %s (%v); a refusal is not retried", tc.name, took, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", tc.name, err, w)
					}
				}
			}
		})
	}
}

// While nothing listens, ConnectNATS retries until the server comes up, and
// gives up when its context ends.
func TestConnectNATSWaitsForServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := bootstrap.NATSConfig{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	log := slog.New(slog.DiscardHandler)

	short, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if nc, err := bootstrap.ConnectNATS(short, cfg, "wait-test", log); err == nil {
		nc.Close()
		t.Fatal("connected with no server")
	} else if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nats.ErrNoServers) {
		t.Fatalf("no server: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logged := make(signalWriter, 1)
	done := make(chan error, 1)
	go func() {
		nc, err := bootstrap.ConnectNATS(ctx, cfg, "wait-test", slog.New(slog.NewTextHandler(logged, nil)))
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	select {
	case <-logged: // "nats not reachable yet; retrying"
	case err := <-done:
		t.Fatalf("returned before the server started: %v", err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("server started late: %v", err)
	}
}

// signalWriter gets a value for each write that finds room.
type signalWriter chan struct{}

func (w signalWriter) Write(p []byte) (int, error) {
	select {
	case w <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Options reports a missing or malformed file at once, naming its flag and
// the file.
func TestNATSConfigOptions(t *testing.T) {
	t.Parallel()
	files := testenv.NewTLSFiles(t)
	creds, seed := testenv.StrangerCreds(t), testenv.StrangerNkey(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		cfg  bootstrap.NATSConfig
		want []string // "" : no error
	}{
		{"all set", bootstrap.NATSConfig{Creds: creds, CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}, nil},
		{"nkey", bootstrap.NATSConfig{Nkey: seed}, nil},
		{"creds missing", bootstrap.NATSConfig{Creds: missing}, []string{"--nats-creds", missing, "no such file"}},
		{"creds holds a seed only", bootstrap.NATSConfig{Creds: seed}, []string{"--nats-creds", seed, "no user JWT"}},
		{"nkey missing", bootstrap.NATSConfig{Nkey: missing}, []string{"--nats-nkey", missing}},
		{"creds and nkey", bootstrap.NATSConfig{Creds: creds, Nkey: seed}, []string{"--nats-creds and --nats-nkey"}},
		{"CA missing", bootstrap.NATSConfig{CA: missing}, []string{"--nats-ca", missing}},
		{"CA not PEM", bootstrap.NATSConfig{CA: seed}, []string{"--nats-ca", seed}},
		{"cert without key", bootstrap.NATSConfig{Cert: files.ClientCert}, []string{"--nats-cert and --nats-key"}},
		{"key does not match", bootstrap.NATSConfig{Cert: files.ClientCert, Key: files.ServerKey}, []string{"--nats-cert", files.ClientCert}},
	} {
		_, err := tc.cfg.Options()
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: no error", tc.name)
		}
		for _, w := range tc.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// Each NATS flag is read from its environment variable when not given; a
// flag given wins.
func TestNATSConfigFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NATS_URL": "nats://n:4222", "NATS_CREDS": "u.creds", "NATS_NKEY": "u.nk", "NATS_CA": "ca.pem", "NATS_CERT": "c.pem", "NATS_KEY": "k.pem"}
	getenv := func(k string) string { return env[k] }
	var c bootstrap.NATSConfig
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--nats-ca", "other.pem"}); err != nil {
		t.Fatal(err)
	}
	if err := bootstrap.ApplyEnv(fs, getenv); err != nil {
		t.Fatal(err)
	}
	want := bootstrap.NATSConfig{URL: "nats://n:4222", Creds: "u.creds", Nkey: "u.nk", CA: "other.pem", Cert: "c.pem", Key: "k.pem"}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	var d bootstrap.NATSConfig
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	d.RegisterFlags(fs)
	if err := bootstrap.ApplyEnv(fs, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if d != (bootstrap.NATSConfig{URL: bootstrap.NATSURLDefault}) {
		t.Errorf("defaults %+v", d)
	}
}

// A connection closed on purpose (Drain at shutdown) is logged at INFO
// without an error; a server going away is a WARN with the reason.
func TestDisconnectLogLevels(t *testing.T) {
	t.Parallel()
	srv, _ := testenv.NATS(t)
	var buf testenv.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: srv.ClientURL()}, "closing", log)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	testenv.Eventually(t, 10*time.Second, "the close logged", func() error {
		if !strings.Contains(buf.String(), "closed") {
			return errors.New(buf.String())
		}
		return nil
	})
	out := buf.String()
	if !strings.Contains(out, `level=INFO msg="nats connection closed" name=closing`) || strings.Contains(out, "WARN") || strings.Contains(out, "err=") {
		t.Errorf("clean close logged:\n%s", out)
	}

	other := testenv.NATSServer(t, t.TempDir())
	buf.Reset()
	nc, err = bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: other.ClientURL()}, "dropped", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	other.Shutdown()
	testenv.Eventually(t, 10*time.Second, "the disconnect logged", func() error {
		if !strings.Contains(buf.String(), "disconnected") {
			return errors.New(buf.String())
		}
		return nil
	})
	if out := buf.String(); !strings.Contains(out, `level=WARN msg="nats disconnected" name=dropped err=`) {
		t.Errorf("server gone logged:\n%s", out)
	}
}
