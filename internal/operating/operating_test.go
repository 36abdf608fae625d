package operating

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// TestOperatingIt follows docs/operating.md: the nats-server of `make
// nats` with deploy/nats/single.conf and its users, `fairway migrate`, a
// tenant and its token, a partner, then ingest, the dispatcher and a sink
// per destination (PostgreSQL, ClickHouse, the partner) as separate
// processes started in a random order, each as its own NATS user. Events
// posted over HTTP land in all three; `fairway replay` sends the partner
// the tenant's events again; an event the partner refuses is a dead letter
// that `fairway status` counts, `fairway dlq list` shows and `fairway dlq
// redrive` delivers once the partner takes it. Every service stops cleanly
// on SIGTERM.
func TestOperatingIt(t *testing.T) {
	t.Parallel()
	bin := binaries(t)
	began := time.Now()
	nats := startNATS(t)
	dsn := testenv.NewDatabase(t)
	chAddr, chDB := testenv.NewClickHouseDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	secret := []byte(randHex(16)) // the partner's signing key
	var refuse atomic.Bool        // the partner refuses product "bad" while set
	refuse.Store(true)
	partner := b2btest.New(t, b2btest.Options{Secret: secret,
		Reject: func(e b2b.BodyEvent) bool { return refuse.Load() && e.ProductID == "bad" }})

	env := []string{"DATABASE_URL=" + dsn, "CLICKHOUSE_ADDR=" + chAddr, "FAIRWAY_SECRET_KEY=" + randHex(32)}
	as := func(user string, more ...string) []string {
		return append(append(append([]string(nil), env...), "NATS_URL="+nats.url(user)), more...)
	}
	fairway := func(args ...string) string { return run(t, filepath.Join(bin, "fairway"), as("operator"), args...) }

	fairway("migrate")
	token := regexp.MustCompile(`fw_[A-Za-z0-9_-]{20,}`).FindString(fairway("tenants", "create", "acme"))
	if token == "" {
		t.Fatal("fairway tenants create printed no token")
	}
	run(t, filepath.Join(bin, "fairway"), as("operator", "PARTNER_SECRET="+b2b.WebhookSecret(secret)),
		"partners", "add", "acme", "erp", "--url", partner.URL(), "--secret-env", "PARTNER_SECRET", "--allow-insecure-http")

	listen := func() string { return freeAddr(t) }
	ingestAddr := listen()
	services := []struct {
		bin, user string
		args      []string
	}{
		{"ingest", "ingest", []string{"--listen", ingestAddr}},
		{"dispatcher", "dispatcher", []string{"--dest", "postgres,clickhouse", "--listen", listen()}},
		{"sinks", "sinks", []string{"--dest", "postgres", "--listen", listen()}},
		{"sinks", "sinks", []string{"--dest", "clickhouse", "--clickhouse-database", chDB, "--listen", listen()}},
		{"sinks", "sinks", []string{"--dest", "b2b:erp", "--allow-insecure-http", "--listen", listen()}},
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
	var procs []*proc
	var order []string
	for _, s := range services {
		procs = append(procs, start(t, filepath.Join(bin, s.bin), as(s.user), s.args...))
		order = append(order, s.bin+" "+strings.Join(s.args[:2], " "))
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
	}
	t.Logf("start order (seed %d): %s", seed, strings.Join(order, ", "))

	post := func(body string) { postEvents(ctx, t, ingestAddr, "acme", token, body, nil) }
	post(`[{"product_id":"p1","version":1,"op":"upsert","payload":{"name":"Chair"}},
		{"product_id":"p2","version":1,"op":"upsert","payload":{"name":"Table"}},
		{"product_id":"p1","version":2,"op":"upsert","payload":{"name":"Armchair"}},
		{"product_id":"p2","version":2,"op":"delete"}]`)

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	chConn, err := ch.Open(&ch.Options{Addr: []string{chAddr}, Auth: ch.Auth{Database: chDB}})
	if err != nil {
		t.Fatal(err)
	}
	defer chConn.Close()
	// versions is acme's product → version of a *Versions read; nil while
	// the sink has not created its table yet.
	versions := func(m map[[2]string]int64, err error) map[string]int64 {
		if err != nil {
			return nil
		}
		out := map[string]int64{}
		for k, v := range m {
			out[k[1]] = v
		}
		return out
	}
	partnerHas := func(want map[string]int64) bool {
		for p, v := range want {
			if s, ok := partner.Get("acme", p); !ok || s.Version != v {
				return false
			}
		}
		return true
	}
	applied := func(want map[string]int64, withPartner bool) string {
		pg := versions(testenv.PostgresVersions(ctx, pool, "SELECT tenant_id, product_id, version FROM catalog.products WHERE tenant_id = 'acme'"))
		chv := versions(testenv.ClickHouseVersions(ctx, chConn, "SELECT tenant_id, product_id, version FROM products_latest FINAL WHERE tenant_id = 'acme'"))
		if !equal(pg, want) || !equal(chv, want) || (withPartner && !partnerHas(want)) {
			return fmt.Sprintf("PostgreSQL %v, ClickHouse %v, partner has all: %v; want %v", pg, chv, partnerHas(want), want)
		}
		return ""
	}
	waitFor := func(what string, d time.Duration, cond func() string) {
		t.Helper()
		testenv.Eventually(t, d, what, func() error {
			if left := cond(); left != "" {
				return errors.New(left)
			}
			return nil
		})
		t.Logf("%s: %s after the start", what, time.Since(began).Round(time.Millisecond))
	}
	waitFor("events applied in PostgreSQL, ClickHouse and at the partner", 45*time.Second, func() string {
		return applied(map[string]int64{"p1": 2, "p2": 2}, true)
	})

	before := partner.Accepted()
	fairway("replay", "--tenant", "acme", "--dest", "b2b:erp", "--from-seq", "1", "--rate", "unlimited", "--wait")
	waitFor("the replayed events at the partner", 30*time.Second, func() string {
		// A request carries the newest version of each product in its
		// batch: at least one event for each of p1 and p2.
		if n := partner.Accepted() - before; n < 2 {
			return fmt.Sprintf("the partner got %d events again, want one per product at least (2)", n)
		}
		return ""
	})

	// The partner refuses "bad": a dead letter for b2b:erp only.
	post(`[{"product_id":"bad","version":1,"op":"upsert","payload":{"name":"Stool"}}]`)
	waitFor("the partner's refusal dead-lettered", 30*time.Second, func() string {
		if out := fairway("dlq", "list", "--tenant", "acme"); !strings.Contains(out, "b2b:erp") {
			return "fairway dlq list:\n" + out
		}
		return applied(map[string]int64{"p1": 2, "p2": 2, "bad": 1}, false)
	})
	waitFor("fairway status: nothing waits, one dead letter at the partner", 30*time.Second, func() string {
		out := fairway("status", "--tenant", "acme", "--json")
		var rows []struct {
			Dest                 string
			Backlog, DeadLetters uint64
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("fairway status --json: %v\n%s", err, out)
		}
		got := map[string][2]uint64{}
		for _, r := range rows {
			got[r.Dest] = [2]uint64{r.Backlog, r.DeadLetters}
		}
		want := map[string][2]uint64{"postgres": {0, 0}, "clickhouse": {0, 0}, "b2b:erp": {0, 1}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("backlog and dead letters by destination %v, want %v", got, want)
		}
		return ""
	})

	waitFor("fairway status --partitions: the dispatcher reads every partition", 30*time.Second, func() string {
		out := fairway("status", "--partitions", "--json")
		var parts []struct {
			Partition  int
			Dispatcher string
			Backlog    uint64
		}
		if err := json.Unmarshal([]byte(out), &parts); err != nil {
			t.Fatalf("fairway status --partitions --json: %v\n%s", err, out)
		}
		if len(parts) != events.PartitionsDefault {
			return fmt.Sprintf("%d partitions, want %d:\n%s", len(parts), events.PartitionsDefault, out)
		}
		for i, p := range parts {
			if p.Partition != i || p.Dispatcher == "" || p.Dispatcher != parts[0].Dispatcher || p.Backlog != 0 {
				return "want every partition read by the one dispatcher, nothing waiting:\n" + out
			}
		}
		if table := fairway("status"); !strings.Contains(table, "PARTITION") || !strings.Contains(table, parts[0].Dispatcher) {
			return "fairway status does not list the partitions:\n" + table
		}
		return ""
	})

	refuse.Store(false)
	fairway("dlq", "redrive", "--tenant", "acme")
	waitFor("the redriven event at the partner", 30*time.Second, func() string {
		if !partnerHas(map[string]int64{"bad": 1}) {
			return "partner lacks bad v1"
		}
		return ""
	})

	if n := partner.BadSignatures(); n != 0 {
		t.Errorf("the partner saw %d requests with bad signatures", n)
	}
	for _, p := range procs {
		p.signal()
	}
	for _, p := range procs {
		p.stop(t)
	}
	t.Logf("done %s after the start", time.Since(began).Round(time.Millisecond))
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
