package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// replicas of every stream in the test: one per node.
const replicas = 3

// createStreams creates PRODUCTS, WORK and DLQ at R3 the way the services
// do with --replicas 3. Right after the meta leader election the leader may
// not know every peer yet ("insufficient resources"): retry.
func createStreams(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the R%d streams created", replicas), func() error {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := events.EnsureStream(sctx, js, events.StreamConfig{Replicas: replicas})
		if err == nil {
			_, err = work.EnsureStream(sctx, js, work.StreamConfig{Replicas: replicas})
		}
		if err == nil {
			_, err = dlq.EnsureStream(sctx, js, dlq.StreamConfig{Replicas: replicas})
		}
		return err
	})
}

// pipeline is ingest (behind a real HTTP server), the dispatcher and a
// PostgreSQL sink runner, each on its own NATS connection to every node of
// the cluster, reconnecting for ever as the services do
// (bootstrap.ConnectNATS).
type pipeline struct {
	base  string
	pool  *pgxpool.Pool
	store *tenancy.Store
	// ingestJS is ingest's JetStream context, to see that publishes nobody
	// answered do not stay pending in it.
	ingestJS jetstream.JetStream
}

func startPipeline(t *testing.T, natsURLs, dsn string, log *slog.Logger) *pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, err := bootstrap.OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	connect := func(name string) *nats.Conn {
		nc, err := bootstrap.ConnectNATS(ctx, bootstrap.NATSConfig{URL: natsURLs}, name, log.With("conn", name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ingestJS, err := ingest.NewJetStream(connect("fairway-ingest"))
	if err != nil {
		t.Fatal(err)
	}
	dispNC := connect("fairway-dispatcher")
	sinkJS, err := jetstream.New(connect("fairway-sinks-postgres"))
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	errs := make(chan error, 2)

	// The dispatcher, as cmd/dispatcher runs it, for the postgres
	// destination. The fallback rescan is pushed out of the test's reach:
	// after every failover the doorbell (an ordered consumer on PRODUCTS)
	// and slot releases alone must keep events flowing.
	d, err := dispatch.New(dispatch.Deps{Store: store, NATS: dispNC, Registry: prometheus.NewRegistry(), Logger: log.With("svc", "dispatcher")},
		&dispatch.Config{Holder: "dispatcher-1", Dests: []string{tenancy.DestPostgres}, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { errs <- d.Run(runCtx) })

	// The PostgreSQL sink runner, as cmd/sinks --dest postgres runs it,
	// with --ack-wait 10s: a work item in flight when its consumer's node
	// stops is lost on the wire and redelivered after AckWait, and its
	// tenant waits that long (30 s with the default).
	pg, err := postgres.New(ctx, &postgres.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(ctx, runner.Deps{JetStream: sinkJS, Sink: pg, Leases: store, Registry: prometheus.NewRegistry()},
		&runner.Config{Logger: log.With("svc", "sinks"), FetchWait: time.Second, AckWait: 10 * time.Second})
	if err != nil {
		stop()
		wg.Wait()
		t.Fatal(err)
	}
	wg.Go(func() { errs <- r.Run(runCtx) })

	// Ingest, as cmd/ingest runs it, behind a real HTTP server.
	pub, err := events.NewPublisher(ingestJS, events.WithValidatedEvents())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv, err := ingest.New(ingest.Deps{Publisher: pub, Tenants: store, Pool: pool, Registry: reg, Gatherer: reg,
		Ready: ingest.DefaultChecks(ingestJS, pool, events.StreamName)},
		&ingest.Config{Logger: log.With("svc", "ingest"), Node: "ingest-1", SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())

	// Cleanups run last-in first-out: HTTP and the services stop before
	// their connections close, and those before the cluster stops.
	t.Cleanup(func() {
		hs.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = srv.Close(cctx)
		stop()
		wg.Wait()
		pg.Close()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("pipeline: %v", err)
			}
		}
	})
	return &pipeline{base: hs.URL, pool: pool, store: store, ingestJS: ingestJS}
}

// newClient creates the tenants and returns an HTTP client holding their
// tokens.
func (p *pipeline) newClient(t *testing.T, tenants []string) *client {
	t.Helper()
	c := &client{base: p.base, http: &http.Client{Timeout: 60 * time.Second}, tokens: map[string]string{}}
	for _, tn := range tenants {
		_, tok, err := p.store.CreateTenant(t.Context(), tn, tn)
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[tn] = tok
	}
	return c
}

// applied counts how many of evs catalog.products holds at exactly their
// version, and returns up to 10 of those it does not.
func (p *pipeline) applied(ctx context.Context, evs []event) (int, []event, error) {
	ts, ps, vs := make([]string, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
	for i, e := range evs {
		ts[i], ps[i], vs[i] = e.tenant, e.product, e.version
	}
	rows, err := p.pool.Query(ctx, `
		SELECT u.t, u.p, u.v, p.version IS NOT NULL AND p.version = u.v
		FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, p, v)
		LEFT JOIN catalog.products p ON p.tenant_id = u.t AND p.product_id = u.p`, ts, ps, vs)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	n := 0
	var missing []event
	for rows.Next() {
		var e event
		var ok bool
		if err := rows.Scan(&e.tenant, &e.product, &e.version, &ok); err != nil {
			return 0, nil, err
		}
		if ok {
			n++
		} else if len(missing) < 10 {
			missing = append(missing, e)
		}
	}
	return n, missing, rows.Err()
}

// waitApplied waits until every event of evs is applied and returns how
// long that took.
func (p *pipeline) waitApplied(t *testing.T, evs []event, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testenv.Eventually(t, within, fmt.Sprintf("%d acknowledged events applied", len(evs)), func() error {
		n, missing, err := p.applied(t.Context(), evs)
		if err == nil && n != len(evs) {
			err = fmt.Errorf("%d applied; not applied, e.g.: %+v", n, missing)
		}
		return err
	})
	return time.Since(start)
}

// heldSlots counts slots with a lease, live or expired but not yet freed,
// and orphaned batches waiting to be re-dispatched.
func (p *pipeline) heldSlots(ctx context.Context) (held, orphans int, err error) {
	err = p.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM fairway.slots WHERE expires_at IS NOT NULL),
		(SELECT count(*) FROM fairway.orphans)`).Scan(&held, &orphans)
	return held, orphans, err
}
