package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
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
	db := fmt.Sprintf("fw_test_live_%d", time.Now().UnixNano())
	p, _ := e2ePipeline(t, ctx, db, e2eLoad{Tenants: 1})
	if _, err := p.Store.EnsureTenant(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(p.JS)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		t.Helper()
		r := pub.PublishOne(ctx, events.Event{Tenant: "late", ProductID: id, Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	waitUntil := func(what string, d time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > d {
				t.Fatalf("%s: not within %v", what, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	// The dispatcher knows late's destinations: postgres and clickhouse.
	publish("p1")
	waitUntil("late's first event in postgres", time.Minute, func() bool { return p.Tracker.Applied("late", tenancy.DestPostgres) == 1 })

	pool, err := bootstrap.OpenPostgres(ctx, p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, b2b.Partner{Tenant: "late", Name: pipelinePartner, URL: p.Receiver.URL(), Secret: pipelineSecret, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	took := waitUntil("the event at the new partner", 5*time.Second, func() bool { return p.Receiver.Products("late") == 1 })
	publish("p2")
	waitUntil("a new event at the new partner", 5*time.Second, func() bool { return p.Receiver.Products("late") == 2 })
	t.Logf("a partner added to a running pipeline got the tenant's event %v later", took.Round(time.Millisecond))
}
