package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// A client that sends its headers slowly (slowloris) is cut off by the
// server's ReadHeaderTimeout instead of holding a connection for ever,
// while a normal request on the same server is answered.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	srv := HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), slog.New(slog.DiscardHandler))
	srv.ErrorLog = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/tenants/acme/events HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	// Trickle a header byte every second and see the server hang up.
	closed := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(conn).ReadByte()
		closed <- err
	}()
	bound := srv.ReadHeaderTimeout + 20*time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(bound)
	for {
		select {
		case err := <-closed:
			if err == nil {
				// An answer (a 408 or 400) followed by a close is also a cut.
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
				var ne net.Error
				if !errors.As(err, &ne) {
					t.Fatalf("read: %v", err)
				}
			}
			resp, err := http.Get("http://" + ln.Addr().String() + "/")
			if err != nil {
				t.Fatalf("a normal request after the slow one: %v", err)
			}
			resp.Body.Close()
			return
		case <-tick.C:
			_, _ = io.WriteString(conn, "X")
		case <-deadline:
			t.Fatalf("a client trickling headers kept its connection for %s (ReadHeaderTimeout %s)", bound, srv.ReadHeaderTimeout)
		}
	}
}

// With a certificate and key, Serve answers HTTPS that a client trusting
// the certificate's CA accepts (HTTP/2 offered), and a plain HTTP request
// gets an error instead of the handler.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	files := testenv.NewTLSFiles(t)
	srv := HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), slog.New(slog.DiscardHandler))
	var err error
	if srv.TLSConfig, err = (ServerTLS{CertFile: files.ServerCert, KeyFile: files.ServerKey}).Config(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// An HTTP/2 connection closes a second after the server's GOAWAY, so
	// the grace is longer than that.
	go func() { done <- Serve(ctx, srv, ln, 10*time.Second) }()

	client := files.HTTPClient(t)
	resp, err := client.Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.TLS == nil || resp.ProtoMajor != 2 {
		t.Errorf("HTTPS: %d %q, TLS %v, %s", resp.StatusCode, body, resp.TLS != nil, resp.Proto)
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) == "ok" {
			t.Error("plain HTTP reached the handler")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// ServerTLS.Config serves plain HTTP when neither file is set and refuses
// half a pair or a pair that does not load, naming the flags.
func TestServerTLSConfig(t *testing.T) {
	t.Parallel()
	files := testenv.NewTLSFiles(t)
	if c, err := (ServerTLS{}).Config(); c != nil || err != nil {
		t.Errorf("neither file: %v %v", c, err)
	}
	for _, s := range []ServerTLS{
		{CertFile: files.ServerCert},
		{KeyFile: files.ServerKey},
		{CertFile: files.ServerCert, KeyFile: files.ClientKey},
		{CertFile: files.ServerCert, KeyFile: files.ServerKey + ".missing"},
	} {
		if _, err := s.Config(); err == nil || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "--tls-key") {
			t.Errorf("%+v: %v", s, err)
		}
	}
}
