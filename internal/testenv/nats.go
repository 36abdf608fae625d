package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS starts an embedded JetStream server on a free loopback port with its
// store in t.TempDir() and returns it with a connected client. Both are shut
// down when the test ends.
func NATS(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	srv := NATSServer(t, t.TempDir())
	nc, err := nats.Connect(srv.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("connect to embedded nats: %v", err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

// JetStream is NATS with a JetStream context on its connection.
func JetStream(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, nc := NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return srv, nc, js
}

// NATSServer starts an embedded JetStream server storing into dir. It is shut
// down at cleanup. Use it directly when a test restarts a server on the same
// store.
func NATSServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	return startNATS(t, natsOptions(dir))
}

// startNATS starts an embedded server with opts and shuts it down at
// cleanup.
func startNATS(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("embedded nats: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("embedded nats did not become ready in 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// natsOptions are the embedded server's options: loopback, a free port,
// JetStream storing into dir, no logs, no signal handlers.
func natsOptions(dir string) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	}
}
