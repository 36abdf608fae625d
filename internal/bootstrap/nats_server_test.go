package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

// fast is how long a refusal at start may take.
const fast = 5 * time.Second

// A server older than NATSVersionMin (Debian's nats-server 2.9.10, a real
// binary with JetStream) is refused at once, by a service's ConnectNATS
// and by a command's Connect, with a message naming its version and the
// minimum.
func TestNATSServerTooOld(t *testing.T) {
	t.Parallel()
	old := testenv.OldNATSServer(t)
	log := slog.New(slog.DiscardHandler)
	cfg := bootstrap.NATSConfig{URL: old.URL}
	for name, connect := range map[string]func() (*nats.Conn, error){
		"ConnectNATS": func() (*nats.Conn, error) { return bootstrap.ConnectNATS(context.Background(), cfg, "old-test", log) },
		"Connect":     func() (*nats.Conn, error) { return cfg.Connect("old-test") },
	} {
		start := time.Now()
		nc, err := connect()
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected to nats-server %s", name, old.Version)
		}
		if took := time.Since(start); took > fast {
			t.Errorf("%s: refused after %s", name, took)
		}
		if !errors.Is(err, bootstrap.ErrNATSTooOld) {
			t.Errorf("%s: %v, want ErrNATSTooOld", name, err)
		}
		for _, w := range []string{"nats-server " + old.Version, "nats-server " + bootstrap.NATSVersionMin + " or newer"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}
}

// A server without JetStream is refused at once.
func TestNATSServerWithoutJetStream(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	start := time.Now()
	nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: srv.ClientURL()}, "nojs-test", slog.New(slog.DiscardHandler))
	if err == nil {
		nc.Close()
		t.Fatal("connected to a server without JetStream")
	}
	if took := time.Since(start); took > fast || !errors.Is(err, bootstrap.ErrNoJetStream) || !strings.Contains(err.Error(), bootstrap.NATSVersionMin) {
		t.Errorf("after %s: %v; want ErrNoJetStream naming %s within %s", took, err, bootstrap.NATSVersionMin, fast)
	}
}

// Users of usersServer: svc may do anything; nojs may not call the
// JetStream API; reader may look at streams but not create them.
func usersServer(t *testing.T, port int, svcPassword string) *server.Server {
	t.Helper()
	inbox := &server.SubjectPermission{Allow: []string{"_INBOX.>"}}
	return startServer(t, &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "svc", Password: svcPassword},
			{Username: "nojs", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"app.>"}}, Subscribe: inbox}},
			{Username: "reader", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.>"}}, Subscribe: inbox}},
		},
	})
}

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready in 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

func userURL(srv *server.Server, user, password string) string {
	return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+password+"@", 1)
}

// At start, a wrong password, a user the server does not let use
// JetStream and an address where nothing listens each end ConnectNATS
// within seconds, with the server's (or the system's) reason.
func TestConnectNATSFailsFast(t *testing.T) {
	t.Parallel()
	srv := usersServer(t, -1, "pw")
	for _, tc := range []struct {
		name string
		url  string
		want []string
	}{
		{"wrong password", userURL(srv, "svc", "wrong"), []string{"Authorization Violation", "user and password in --nats-url"}},
		{"no JetStream permission", userURL(srv, "nojs", "pw"), []string{`Permissions Violation for Publish to "$JS.API.INFO"`, `NATS user "nojs"`}},
		{"nothing listening", fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t)), []string{"connection refused", "--nats-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: tc.url}, "fail-test", slog.New(slog.DiscardHandler))
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if took := time.Since(start); took > fast {
				t.Errorf("failed after %s, want within %s", took, fast)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// A start-up step whose request the server refuses ends at once with the
// server's reason: JetStream answers a refused request with nothing, so
// without UntilRefused creating a stream as a user that may not would wait
// for the step's whole deadline.
func TestUntilRefused(t *testing.T) {
	t.Parallel()
	srv := usersServer(t, -1, "pw")
	nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: userURL(srv, "reader", "pw")}, "refused-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = bootstrap.UntilRefused(ctx, nc, func(ctx context.Context) error {
		_, err := events.EnsureStream(ctx, js, events.StreamConfig{})
		return err
	})
	if took := time.Since(start); took > fast {
		t.Errorf("refused after %s", took)
	}
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"$JS.API.STREAM.`) || !strings.Contains(err.Error(), "PRODUCTS") {
		t.Errorf("%v, want the server's permissions violation on the PRODUCTS stream API", err)
	}
	// A step that succeeds is not affected.
	if err := bootstrap.UntilRefused(ctx, nc, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		t.Errorf("allowed step: %v", err)
	}
}

// AwaitStream waits, saying so, until the stream's owner creates it, and
// ends at once when the user may not look at streams.
func TestAwaitStream(t *testing.T) {
	t.Parallel()
	srv := usersServer(t, -1, "pw")
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader, err := bootstrap.ConnectNATS(ctx, bootstrap.NATSConfig{URL: userURL(srv, "reader", "pw")}, "await-test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, _ := jetstream.New(reader)
	type result struct {
		s   jetstream.Stream
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := bootstrap.AwaitStream(ctx, js, "OWNED", "the owner", log)
		done <- result{s, err}
	}()
	testenv.Eventually(t, 10*time.Second, "a log line saying it waits", func() error {
		if !strings.Contains(logs.String(), "waiting for stream OWNED; the owner creates it") {
			return fmt.Errorf("logs:\n%s", logs.String())
		}
		return nil
	})
	select {
	case r := <-done:
		t.Fatalf("returned before the stream existed: %v", r.err)
	case <-time.After(time.Second):
	}
	owner, err := nats.Connect(userURL(srv, "svc", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	ojs, _ := jetstream.New(owner)
	if _, err := ojs.CreateStream(ctx, jetstream.StreamConfig{Name: "OWNED", Subjects: []string{"owned.>"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.s.CachedInfo().Config.Name != "OWNED" {
			t.Fatalf("AwaitStream: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitStream did not return within 10s of the stream's creation")
	}

	nojs, err := nats.Connect(userURL(srv, "nojs", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nojs.Close()
	njs, _ := jetstream.New(nojs)
	start := time.Now()
	if _, err := bootstrap.AwaitStream(ctx, njs, "OWNED", "the owner", log); !errors.Is(err, nats.ErrPermissionViolation) || time.Since(start) > fast {
		t.Errorf("a user that may not look at streams: %v after %s, want a permissions violation within %s", err, time.Since(start), fast)
	}
}

// Once started, a service keeps reconnecting whatever the server answers:
// a server that refuses its password again and again (nats.go alone gives
// up after the second refusal and closes the connection) is logged with
// the server's reason, once per reason, and the connection comes back
// when the server accepts it again. A clean close logs no disconnect.
func TestConnectNATSKeepsReconnecting(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	srv := usersServer(t, port, "pw")
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	nc, err := bootstrap.ConnectNATS(context.Background(), bootstrap.NATSConfig{URL: userURL(srv, "svc", "pw")}, "reconnect-test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	srv = usersServer(t, port, "changed") // svc's password no longer works
	authLine := func() int { return strings.Count(strings.ToLower(logs.String()), "authorization violation") }
	testenv.Eventually(t, 15*time.Second, "a reconnect failure logged with the server's reason", func() error {
		if authLine() == 0 {
			return fmt.Errorf("logs:\n%s", logs.String())
		}
		return nil
	})
	time.Sleep(3 * time.Second) // several more refused attempts
	if nc.IsClosed() {
		t.Fatalf("the connection was closed after refused reconnects:\n%s", logs.String())
	}
	if n := authLine(); n != 1 {
		t.Errorf("the same refusal logged %d times in 3 s, want once:\n%s", n, logs.String())
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	usersServer(t, port, "pw")
	testenv.Eventually(t, 15*time.Second, "a reconnect once the server accepts the password again, logged", func() error {
		switch {
		case !nc.IsConnected():
			return fmt.Errorf("not connected; logs:\n%s", logs.String())
		case !strings.Contains(logs.String(), "nats reconnected"):
			// The reconnect callback runs asynchronously, after
			// IsConnected already says so.
			return fmt.Errorf("reconnect not logged:\n%s", logs.String())
		}
		return nil
	})
	before := logs.String()
	nc.Close()
	time.Sleep(100 * time.Millisecond) // the disconnect callback runs asynchronously
	if after := strings.TrimPrefix(logs.String(), before); strings.Contains(after, "disconnected") {
		t.Errorf("a clean close logged %q", after)
	}
}

// A stream's owner gets it back when it is gone: deleted by hand, or a
// server replaced by one with an empty store.
func TestKeepStream(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensure := func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}})
		return err
	}
	if err := ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	go bootstrap.KeepStream(ctx, js, "KEPT", 50*time.Millisecond, ensure, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := js.DeleteStream(ctx, "KEPT"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "KEPT created again, and a log line saying so", func() error {
		if _, err := js.Stream(ctx, "KEPT"); err != nil {
			return err
		}
		if !strings.Contains(logs.String(), "stream KEPT was gone; created it again") {
			return fmt.Errorf("logs:\n%s", logs.String())
		}
		return nil
	})
}
