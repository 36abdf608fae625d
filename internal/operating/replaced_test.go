package operating

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// A NATS server replaced by one with an empty store, handled as
// docs/operating.md ("Stream resets") says: ingest and the sink heal
// without a restart, each creating its stream again (PRODUCTS, DLQ); the
// dispatcher exits saying the stream went back and, started again as its
// supervisor would, holds the tenant's cursor, which points past the new
// stream's events. `fairway status` says `stream reset`, with the events
// posted since as the backlog; `fairway cursors reset --all --to first`
// releases the cursor, and those events reach PostgreSQL. The dispatcher
// polls every second (--poll-interval), so that it notices the new
// stream at once rather than within the default 30 s.
func TestServerReplaced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := newAcmeStack(ctx, t)
	dispatcherArgs := []string{"--dest", "postgres", "--poll-interval", "1s", "--listen", freeAddr(t)}
	ingest := st.startIngest(t)
	dispatcher := st.start(t, "dispatcher", dispatcherArgs...)
	sinks := st.start(t, "sinks", "--dest", "postgres", "--listen", freeAddr(t))
	st.postChairAndTable(ctx, t)
	waitProduct(ctx, t, st.pool, "acme", "p1")
	waitProduct(ctx, t, st.pool, "acme", "p2")

	began := time.Now()
	st.nats.Stop()
	if err := os.RemoveAll(st.nats.store); err != nil {
		t.Fatal(err)
	}
	st.nats.Restart(t)
	t.Logf("NATS server replaced: same port and users, empty store")

	err, exited := dispatcher.wait(time.Minute)
	if !exited || err == nil || !strings.Contains(dispatcher.out.String(), "stream went back under the dispatcher") {
		t.Fatalf("dispatcher after the replacement: exited %v (%v), want an exit saying the stream went back:\n%s", exited, err, dispatcher.out.String())
	}
	t.Logf("the dispatcher exited %s after the replacement", time.Since(began).Round(time.Millisecond))
	dispatcher = st.start(t, "dispatcher", dispatcherArgs...)

	postAccepted(ctx, t, st.ingestAddr, "acme", st.token, `[{"product_id":"p3","version":1,"op":"upsert","payload":{"name":"Lamp"}},
		{"product_id":"p1","version":2,"op":"upsert","payload":{"name":"Armchair"}}]`)
	fairway := func(args ...string) string {
		return run(t, filepath.Join(st.bin, "fairway"), st.nats.env(st.dsn, "operator"), args...)
	}
	testenv.Eventually(t, 30*time.Second, "fairway status to say stream reset, 2 events waiting", func() error {
		out := fairway("status", "--tenant", "acme", "--json")
		var rows []struct {
			Dest, Reason string
			Backlog      uint64
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("fairway status --json: %v\n%s", err, out)
		}
		if len(rows) != 1 || rows[0].Dest != "postgres" || rows[0].Reason != "stream reset" || rows[0].Backlog != 2 {
			return fmt.Errorf("rows %+v, want postgres: stream reset, backlog 2", rows)
		}
		return nil
	})
	t.Logf("fairway status says stream reset %s after the replacement", time.Since(began).Round(time.Millisecond))

	if out := fairway("cursors", "reset", "--all", "--to", "first"); !strings.Contains(out, "acme postgres: cursor 3 → 1") {
		t.Errorf("fairway cursors reset --all --to first printed %q, want acme's cursor moved from 3 to 1", out)
	}
	waitProduct(ctx, t, st.pool, "acme", "p3")
	testenv.Eventually(t, 30*time.Second, "p1 version 2 in PostgreSQL", func() error {
		var v int64
		if err := st.pool.QueryRow(ctx, "SELECT version FROM catalog.products WHERE tenant_id = 'acme' AND product_id = 'p1'").Scan(&v); err != nil {
			return err
		}
		if v != 2 {
			return fmt.Errorf("version %d", v)
		}
		return nil
	})
	t.Logf("the events posted after the replacement applied %s after it", time.Since(began).Round(time.Millisecond))

	for _, c := range []struct {
		p    *proc
		line string
	}{{ingest, "stream PRODUCTS was gone; created it again"}, {sinks, "stream DLQ was gone; created it again"}} {
		if err, exited := c.p.wait(0); exited {
			t.Errorf("%s exited (%v); it should have healed without a restart", c.p.name, err)
		}
		if !strings.Contains(c.p.out.String(), c.line) {
			t.Errorf("%s does not say %q", c.p.name, c.line)
		}
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.signal()
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.stop(t)
	}
}

// postAccepted posts body (a JSON array of events) for tenant to ingest at
// addr until ingest answers 202, for 30 s at most: after a NATS server was
// replaced, ingest refuses events until it has created PRODUCTS again.
func postAccepted(ctx context.Context, t *testing.T, addr, tenant, token, body string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "ingest to take events", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/tenants/"+tenant+"/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			return errors.New(resp.Status + ": " + string(b))
		}
		return nil
	})
}
