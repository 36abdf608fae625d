package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/pipelinetest"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// A partner added to a tenant whose events a running pipeline already
// dispatches receives them within a moment, not at the dispatcher's next
// poll (30 s): the Registry's change notifies the dispatcher and the sink.
func TestPartnerAddedToARunningPipelineAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, _ := e2ePipeline(t, e2eLoad{Tenants: 1})
	if _, err := p.Store.EnsureTenant(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		t.Helper()
		r := p.Publisher.PublishOne(ctx, events.Event{Tenant: "late", ProductID: id, Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// products waits until the partner holds n of late's products.
	products := func(what string, n int) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, what, func() error {
			if got := p.Receiver.Products("late"); got != n {
				return fmt.Errorf("the partner holds %d products of late", got)
			}
			return nil
		})
	}
	// The dispatcher knows late's destinations: postgres and clickhouse.
	publish("p1")
	testenv.Eventually(t, time.Minute, "late's first event in postgres", func() error {
		if n := p.Tracker.Applied("late", tenancy.DestPostgres); n != 1 {
			return fmt.Errorf("postgres applied %d events of late", n)
		}
		return nil
	})

	pool, err := bootstrap.OpenPostgres(ctx, p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, b2b.Partner{Tenant: "late", Name: pipelinePartner, URL: p.Receiver.URL(), Secret: pipelinetest.PartnerSecret, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	products("the event at the new partner", 1)
	took := time.Since(added)
	publish("p2")
	products("a new event at the new partner", 2)
	t.Logf("a partner added to a running pipeline got the tenant's event %v later", took.Round(time.Millisecond))
}
