package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/pipeline"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/pipelinetest"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
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

// pipe is ingest (behind a real HTTP server), the dispatcher and a
// PostgreSQL sink runner (pipelinetest), each on its own NATS connection
// to every node of the cluster, reconnecting for ever as the services do
// (bootstrap.ConnectNATS).
type pipe struct {
	*pipelinetest.Pipeline
	base string // the ingest API's base URL
}

func startPipeline(t *testing.T, natsURLs string, log *slog.Logger, tenants []string) *pipe {
	t.Helper()
	p := pipelinetest.Start(t, pipelinetest.Config{
		NATSURL: natsURLs,
		Pipeline: pipeline.Config{
			Logger:   log,
			Replicas: replicas,
			Tenants:  tenants,
			Dests:    []string{tenancy.DestPostgres},
			// The dispatcher, as cmd/dispatcher runs it, for the postgres
			// destination. The fallback rescan is pushed out of the test's
			// reach: after every failover the doorbell (an ordered
			// consumer on PRODUCTS) and slot releases alone must keep
			// events flowing.
			Dispatcher: dispatch.Config{Holder: "dispatcher-1", PollInterval: time.Hour},
			// The PostgreSQL sink runner, as cmd/sinks --dest postgres
			// runs it, with --ack-wait 10s: a work item in flight when its
			// consumer's node stops is lost on the wire and redelivered
			// after AckWait, and its tenant waits that long (30 s with the
			// default).
			Runner: runner.Config{FetchWait: time.Second, AckWait: 10 * time.Second},
			// Ingest, as cmd/ingest runs it, behind a real HTTP server.
			Ingest: &ingest.Config{Node: "ingest-1", SpoolDir: t.TempDir()},
		},
	})
	return &pipe{Pipeline: p, base: p.IngestURL()}
}

// newClient returns an HTTP client holding the tenants' tokens.
func (p *pipe) newClient() *client {
	return &client{base: p.base, http: &http.Client{Timeout: 60 * time.Second}, tokens: p.Tokens}
}

// applied counts how many of evs catalog.products holds at exactly their
// version, and returns up to 10 of those it does not.
func (p *pipe) applied(ctx context.Context, evs []event) (int, []event, error) {
	ts, ps, vs := make([]string, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
	for i, e := range evs {
		ts[i], ps[i], vs[i] = e.tenant, e.product, e.version
	}
	rows, err := p.Pool.Query(ctx, `
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
func (p *pipe) waitApplied(t *testing.T, evs []event, within time.Duration) time.Duration {
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
func (p *pipe) heldSlots(ctx context.Context) (held, orphans int, err error) {
	err = p.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM fairway.slots WHERE expires_at IS NOT NULL),
		(SELECT count(*) FROM fairway.orphans)`).Scan(&held, &orphans)
	return held, orphans, err
}
