package status_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// TestRowsSayRetryingAndCircuitOpen runs the dispatcher and two real B2B
// sink runners against a partner receiver answering 503: partner "slow"
// has a breaker that does not open (the runner retries), partner "down"
// one that opens after two failures. Status must say "retrying" and
// "partner circuit open", "paused" when the destination is paused, and
// "idle" once the partner heals and the batch lands.
func TestRowsSayRetryingAndCircuitOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	secret := []byte("status-partner-secret-0123456789")
	recv := b2btest.New(t, b2btest.Options{Secret: secret})
	recv.FailAlways(b2btest.Failure{Status: http.StatusServiceUnavailable})
	partners, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	// Two endpoints: a breaker guards scheme://host:port, and the partners
	// must not share one.
	urlDown := strings.Replace(recv.URL(), "127.0.0.1", "localhost", 1)
	for name, url := range map[string]string{"slow": recv.URL(), "down": urlDown} {
		if _, err := partners.Add(ctx, b2b.Partner{Tenant: "acme", Name: name, URL: url, Secret: secret, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	reg := prometheus.NewRegistry()
	d, err := dispatch.New(dispatch.Deps{Store: st, NATS: nc, Registry: reg},
		&dispatch.Config{Dests: []string{"b2b:slow", "b2b:down"}, PollInterval: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = d.Run(runCtx) })
	for partner, threshold := range map[string]int{"slow": 1000, "down": 2} {
		s, err := b2b.New(&b2b.Config{Registry: partners, Partner: partner, FailureThreshold: threshold, CoolDown: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		r, err := runner.New(ctx, runner.Deps{JetStream: js, Sink: s, Leases: st, Registry: reg}, &runner.Config{
			FetchWait: 100 * time.Millisecond,
			Backoff:   runner.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, MaxElapsed: time.Hour},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(runCtx) })
	}

	pub, _ := events.NewPublisher(js)
	if r := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: "p1", Version: 1, Op: events.OpUpsert,
		OccurredAt: time.Now(), Payload: []byte(`{"name":"x"}`)}); r.Err != nil {
		t.Fatal(r.Err)
	}

	src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js}
	waitReason := func(dest, reason string, detail string) {
		t.Helper()
		testenv.Eventually(t, time.Minute, fmt.Sprintf("%s to say %q (detail %q)", dest, reason, detail), func() error {
			rows, err := src.Rows(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Dest == dest && r.Reason == reason && strings.Contains(r.WaitDetail, detail) {
					return nil
				}
			}
			return fmt.Errorf("rows %+v", rows)
		})
	}
	waitReason("b2b:slow", status.ReasonRetrying, "503")
	waitReason("b2b:down", status.ReasonCircuitOpen, "circuit open")

	// Paused outranks what the held batch is doing.
	if err := st.SetDestPaused(ctx, "acme", "b2b:down", true); err != nil {
		t.Fatal(err)
	}
	waitReason("b2b:down", status.ReasonPaused, "")
	if err := st.SetDestPaused(ctx, "acme", "b2b:down", false); err != nil {
		t.Fatal(err)
	}
	waitReason("b2b:down", status.ReasonCircuitOpen, "")

	// The partner heals: slow's next retry lands and its slot is released.
	// (down's breaker stays open for its hour-long cool-down.)
	recv.Heal()
	waitReason("b2b:slow", status.ReasonIdle, "")
	if got := recv.Products("acme"); got != 1 {
		t.Fatalf("receiver holds %d products of acme, want 1", got)
	}
}
