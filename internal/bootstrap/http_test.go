package bootstrap

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
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
