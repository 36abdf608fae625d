package operating

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// With deploy/nats's users, ingest, the dispatcher and a sink start in
// every order: each stream has one owner (ingest PRODUCTS, the dispatcher
// WORK, the sinks DLQ) and a service that needs another's stream waits for
// it, saying so, where it used to fail with a permissions violation. Each
// order gets a fresh server and database, and an event posted over HTTP
// must reach PostgreSQL. The orders run at once.
func TestServicesStartInAnyOrder(t *testing.T) {
	t.Parallel()
	bin := binaries(t)
	orders := [][]string{
		{"ingest", "dispatcher", "sinks"},
		{"ingest", "sinks", "dispatcher"},
		{"dispatcher", "ingest", "sinks"},
		{"dispatcher", "sinks", "ingest"},
		{"sinks", "ingest", "dispatcher"},
		{"sinks", "dispatcher", "ingest"},
	}
	// waits says which log line a service prints when it starts before
	// the owner of a stream it needs.
	waits := map[string]struct{ owner, line string }{
		"dispatcher": {"ingest", "waiting for stream PRODUCTS; ingest creates it"},
		"sinks":      {"dispatcher", "waiting for stream WORK; the dispatcher creates it"},
	}
	for _, order := range orders {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			nats := startNATS(t)
			dsn, pool, token := acmeDatabase(ctx, t)
			ingestAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			args := map[string][]string{
				"ingest":     {"--listen", ingestAddr},
				"dispatcher": {"--dest", "postgres", "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))},
				"sinks":      {"--dest", "postgres", "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))},
			}
			procs := map[string]*proc{}
			for i, name := range order {
				procs[name] = start(t, filepath.Join(bin, name), []string{"DATABASE_URL=" + dsn, "NATS_URL=" + nats.url(name)}, args[name]...)
				if i < len(order)-1 {
					time.Sleep(500 * time.Millisecond) // it runs, alone with those before it
				}
			}
			postEvents(ctx, t, ingestAddr, "acme", token, `[{"product_id":"p1","version":1,"op":"upsert","payload":{"name":"Chair"}}]`, nil)
			waitProduct(ctx, t, pool, "acme", "p1")
			for i, name := range order {
				w, ok := waits[name]
				if !ok {
					continue
				}
				before := strings.Join(order[:i], ",")
				if logged := strings.Contains(procs[name].out.String(), w.line); logged != !strings.Contains(before, w.owner) {
					t.Errorf("%s started after [%s] logged %q: %v", name, before, w.line, logged)
				}
			}
			for _, p := range procs {
				p.signal()
			}
			for _, p := range procs {
				p.stop(t)
			}
		})
	}
}
