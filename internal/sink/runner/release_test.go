package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// flakyLeases is the real store whose first failReleases releases fail as
// they do while PostgreSQL restarts (connection refused).
type flakyLeases struct {
	*tenancy.Store
	failReleases int64
	releases     atomic.Int64
}

func (f *flakyLeases) Release(ctx context.Context, leaseID string, token int64) error {
	if f.releases.Add(1) <= f.failReleases {
		return fmt.Errorf("release %s: %w", leaseID, syscall.ECONNREFUSED)
	}
	return f.Store.Release(ctx, leaseID, token)
}

// A release that fails for a moment (the database restarting) is retried
// until it lands, well inside the lease time: the slot is free as soon as
// the item is acked, not after the lease expired, and the batch is not
// re-dispatched as an orphan.
func TestReleaseRetriedThroughABriefOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	leases := &flakyLeases{Store: e.store, failReleases: 3}
	cfg := e.fastConfig() // ExtendEvery 1s bounds the release retries
	r, err := runner.New(context.Background(), runner.Deps{JetStream: e.js, Sink: e.pg, Leases: leases, Registry: prometheus.NewRegistry()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	e.drained(r.Config().Consumer)
	if e.rows("acme") != 1 {
		t.Fatal("event not applied")
	}
	if got := leases.releases.Load(); got != 4 {
		t.Errorf("Release called %d times, want 4 (3 failures, then success)", got)
	}
	if n := e.inUse("acme", "postgres"); n != 0 {
		t.Errorf("%d slots in use after the item was acked, want 0: the release was given up; logs:\n%s", n, e.logs)
	}
	if strings.Contains(e.logs.String(), "it expires by itself") {
		t.Errorf("release reported as failed; logs:\n%s", e.logs)
	}
}
