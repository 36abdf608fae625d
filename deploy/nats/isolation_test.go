package natsconf_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A tenant's own NATS user (publisher-acme) may publish on products.acme.>
// only, but it writes the body: the tenant and op it names are not
// trusted over the subject. The real dispatcher and postgres sink, each as
// its deploy/nats user, apply acme's good events, dead-letter the forged
// ones with the reason, and never write another tenant's product; a
// subject of no known op is refused at publish.
func TestTenantComesFromTheSubject(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startServer(t, loadConfig(t, "single.conf"))
	url := srv.ClientURL()
	dsn := testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "globex"} {
		if _, _, err := store.CreateTenant(ctx, id, id); err != nil {
			t.Fatal(err)
		}
	}
	ingest := connect(t, url, "ingest")
	if _, err := events.EnsureStream(ctx, ingest.js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}

	bin := testenv.BuildServices(t)
	natsURL := func(user string) string {
		return strings.Replace(url, "nats://", "nats://"+user+":"+password(t, user)+"@", 1)
	}
	startService(t, ctx, filepath.Join(bin, "dispatcher"), natsURL("dispatcher"), dsn, "--dest", "postgres", "--listen", "127.0.0.1:0")
	// The dispatcher creates WORK, which the sinks user may only use.
	operator := connect(t, url, "operator")
	testenv.Eventually(t, time.Minute, "the dispatcher to create WORK", func() error {
		_, err := operator.js.Stream(ctx, "WORK")
		return err
	})
	startService(t, ctx, filepath.Join(bin, "sinks"), natsURL("sinks"), dsn, "--dest", "postgres", "--listen", "127.0.0.1:0")

	pub := connect(t, url, "publisher-acme")
	publish := func(subject string, ev events.Event) error {
		m, err := ev.Msg()
		if err != nil {
			t.Fatal(err)
		}
		m.Subject = subject
		_, err = pub.js.PublishMsg(ctx, m)
		return err
	}
	good := testEvent("acme", "p1", 1)
	forged := testEvent("globex", "p", 99)
	flipped := testEvent("acme", "p3", 1) // an upsert body on the delete subject
	last := testEvent("acme", "p2", 1)
	for _, p := range []struct {
		subject string
		ev      events.Event
	}{
		{"products.acme.upsert", good},
		{"products.acme.upsert", forged},
		{"products.acme.delete", flipped},
		{"products.acme.upsert", last},
	} {
		if err := publish(p.subject, p.ev); err != nil {
			t.Fatalf("publish on %s: %v", p.subject, err)
		}
	}
	if err := publish("products.acme.bogus", testEvent("acme", "p4", 1)); err == nil {
		t.Error("an event on products.acme.bogus was stored")
	}

	var letters []dlq.Letter
	applied := func() []string {
		rows, err := pool.Query(ctx, "SELECT tenant_id || '/' || product_id FROM catalog.products ORDER BY 1")
		if err != nil {
			return nil // the sink has not created the table yet
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	testenv.Eventually(t, 2*time.Minute, "acme/p1 and acme/p2 applied, 2 events dead-lettered", func() error {
		q, err := dlq.Open(ctx, operator.js, "")
		if err != nil {
			return err
		}
		if letters, err = q.List(ctx, dlq.Filter{}); err != nil {
			t.Fatal(err)
		}
		if got := applied(); len(letters) != 2 || len(got) != 2 {
			return fmt.Errorf("applied %v, dead-lettered %d letters (%+v)", got, len(letters), letters)
		}
		return nil
	})
	if got := applied(); !slices.Equal(got, []string{"acme/p1", "acme/p2"}) {
		t.Errorf("catalog.products holds %v, want acme/p1 and acme/p2 only", got)
	}
	rules := map[string]string{}
	for _, l := range letters {
		if l.Tenant != "acme" || l.Class != "permanent" {
			t.Errorf("letter %d: tenant %q class %q, want acme's, permanent", l.ID, l.Tenant, l.Class)
		}
		rules[l.Rule] = l.SourceSubject
	}
	want := map[string]string{string(events.MismatchTenant): stored("products.acme.upsert"), string(events.MismatchOp): stored("products.acme.delete")}
	if len(rules) != 2 || rules[string(events.MismatchTenant)] != want[string(events.MismatchTenant)] || rules[string(events.MismatchOp)] != want[string(events.MismatchOp)] {
		t.Errorf("letters' rules and subjects %v, want %v", rules, want)
	}

	// A redrive must not send the forged event on as globex's.
	q, err := dlq.Open(ctx, operator.js, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Redrive(ctx, dlq.Filter{}, dlq.RedriveConfig{Slots: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err == nil || r.Item != "" {
			t.Errorf("letter %d (%s) redriven in work item %q, err %v", r.Letter.ID, r.Letter.Rule, r.Item, r.Err)
		}
	}
}

// startService runs a service binary until the test ends; its output is
// shown when the test fails.
func startService(t *testing.T, ctx context.Context, bin, natsURL, dsn string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+natsURL, "DATABASE_URL="+dsn, "FAIRWAY_LOG_LEVEL=debug")
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(b)
	})
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out.String())
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
