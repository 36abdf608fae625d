package ingest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// Graceful shutdown, as cmd/ingest runs it (bootstrap.Serve): once it
// begins no new connection is accepted, a request already being read is
// read to its end, its events are published, and it is answered after
// JetStream acknowledged every one of them; then Serve returns.
func TestShutdownFinishesRequestsInFlight(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	// reading is signalled once the handler has read part of the body.
	// The connection's StateActive is too early a sign: net/http drops a
	// request whose headers it read if shutdown begins before the handler
	// is called, and the client then sees the connection close.
	reading := make(chan struct{}, 1)
	h := f.srv.Handler()
	hs := bootstrap.HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &signalReader{ReadCloser: r.Body, read: reading}
		h.ServeHTTP(w, r)
	}), quietLogger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- bootstrap.Serve(ctx, hs, ln, 30*time.Second) }()

	// A request whose body arrives in two halves, shutdown in between.
	const n = 100
	lines := make([]string, n)
	for i := range lines {
		lines[i] = ev("p"+string(rune('a'+i%26))+strings.Repeat("x", i), 1)
	}
	body, w := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tenants/acme/events", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens["acme"])
	req.Header.Set("Content-Type", "application/x-ndjson")
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	answered := make(chan answer, 1)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{resp, b, err}
	}()
	if _, err := io.WriteString(w, strings.Join(lines[:n/2], "\n")+"\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reading:
	case <-time.After(30 * time.Second):
		t.Fatal("the request's body was never read")
	}

	cancel() // shutdown begins with the request half read
	testenv.Eventually(t, 10*time.Second, "the server to refuse connections after shutdown began", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil // no longer accepting
		case err == nil:
			c.Close()
			return errors.New("a connection was accepted")
		case errors.Is(err, syscall.ECONNRESET): // queued as the listener closed
			return err
		}
		t.Fatalf("dial during shutdown: %v, want connection refused", err)
		return nil
	})
	select {
	case err := <-served:
		t.Fatalf("Serve returned with a request in flight: %v", err)
	default:
	}

	if _, err := io.WriteString(w, strings.Join(lines[n/2:], "\n")+"\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the request in flight was never answered")
	}
	if a.err != nil {
		t.Fatalf("request in flight: %v", a.err)
	}
	if a.resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", a.resp.StatusCode, a.body)
	}
	r := decode(t, a.body)
	if r.Accepted != n || len(r.Results) != n {
		t.Fatalf("accepted %d with %d results, want %d: %s", r.Accepted, len(r.Results), n, a.body)
	}
	for i, res := range r.Results {
		if res.Error != "" || res.Seq == 0 {
			t.Fatalf("line %d: %+v", i+1, res)
		}
	}
	if got := f.msgs(t); got != n {
		t.Fatalf("stream holds %d events, want %d", got, n)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after the last request was answered")
	}
}

// signalReader sends on read, without blocking, after each Read that
// returns data.
type signalReader struct {
	io.ReadCloser
	read chan<- struct{}
}

func (r *signalReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		select {
		case r.read <- struct{}{}:
		default:
		}
	}
	return n, err
}
