package operating

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// startFails runs bin with args against natsURL and expects it to exit
// with an error within five seconds, saying each of want.
func startFails(t *testing.T, bin, natsURL, dsn string, want []string, args ...string) {
	t.Helper()
	begin := time.Now()
	p := start(t, bin, []string{"NATS_URL=" + natsURL, "DATABASE_URL=" + dsn}, args...)
	err, ok := p.wait(5 * time.Second)
	switch {
	case !ok:
		t.Errorf("%s still runs after 5s, want it to stop:\n%s", p.name, p.out.String())
		return
	case err == nil:
		t.Errorf("%s exited with status 0, want a failure:\n%s", p.name, p.out.String())
		return
	}
	t.Logf("%s stopped after %s", p.name, time.Since(begin).Round(time.Millisecond))
	for _, w := range want {
		if !strings.Contains(p.out.String(), w) {
			t.Errorf("%s does not say %q:\n%s", p.name, w, p.out.String())
		}
	}
}

// services lists each binary that connects to NATS with the arguments
// that start it.
func services(t *testing.T, bin string) map[string][]string {
	listen := func() string { return freeAddr(t) }
	return map[string][]string{
		filepath.Join(bin, "ingest"):     {"--listen", listen()},
		filepath.Join(bin, "dispatcher"): {"--listen", listen()},
		filepath.Join(bin, "sinks"):      {"--dest", "postgres", "--listen", listen()},
		filepath.Join(bin, "fairway"):    {"status"},
	}
}

// Against a nats-server older than fairway needs (Debian's 2.9.10, which
// accepts the events and then never answers a read), every service and
// fairway status stop within seconds, naming the server's version and the
// minimum.
func TestRefuseOldNATSServer(t *testing.T) {
	t.Parallel()
	bin := binaries(t)
	old := testenv.OldNATSServer(t)
	dsn := testenv.NewDatabase(t)
	run(t, filepath.Join(bin, "fairway"), []string{"DATABASE_URL=" + dsn}, "migrate")
	for b, args := range services(t, bin) {
		startFails(t, b, old.URL, dsn, []string{"nats-server " + old.Version, "nats-server " + bootstrap.NATSVersionMin + " or newer"}, args...)
	}
}

// A wrong password, a user without the permissions a service needs and an
// address where nothing listens each stop a service within seconds, with
// the server's (or the system's) reason, where the services used to wait
// a minute and then say "context deadline exceeded".
func TestFailFastAtStart(t *testing.T) {
	t.Parallel()
	bin := binaries(t)
	nats := startNATS(t)
	dsn := testenv.NewDatabase(t)
	run(t, filepath.Join(bin, "fairway"), []string{"DATABASE_URL=" + dsn}, "migrate")
	listen := func() string { return freeAddr(t) }
	wrong := strings.Replace(nats.URL, "nats://", "nats://ingest:wrong@", 1)
	startFails(t, filepath.Join(bin, "ingest"), wrong, dsn, []string{"Authorization Violation"}, "--listen", listen())
	// The sinks' user may use WORK but not create it.
	startFails(t, filepath.Join(bin, "dispatcher"), nats.url("sinks"), dsn,
		[]string{`Permissions Violation for Publish to \"$JS.API.STREAM.UPDATE.WORK\"`, `NATS user \"sinks\"`}, "--listen", listen())
	// A tenant's publisher has no JetStream API at all.
	startFails(t, filepath.Join(bin, "sinks"), nats.url("publisher-acme"), dsn,
		[]string{`Permissions Violation for Publish to \"$JS.API.INFO\"`}, "--dest", "postgres", "--listen", listen())
	startFails(t, filepath.Join(bin, "fairway"), nats.url("publisher-acme"), dsn,
		[]string{`Permissions Violation for Publish to "$JS.API.INFO"`}, "status")
	nothing := fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t))
	startFails(t, filepath.Join(bin, "sinks"), nothing, dsn, []string{"connection refused"}, "--dest", "postgres", "--listen", listen())
}
