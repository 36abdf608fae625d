package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// An event the partner refused, and PostgreSQL and ClickHouse applied, is
// redriven: the partner gets it, the other two do not apply it again.
func TestRedriveReachesOnlyTheDestinationThatRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, _ := e2ePipeline(t, e2eLoad{Tenants: 1})
	const tenant = "t01"
	partner := tenancy.DestB2BPrefix + pipelinePartner
	publish := func(id string) {
		t.Helper()
		if r := p.Publisher.PublishOne(ctx, events.Event{Tenant: tenant, ProductID: id, Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	applied := func(dest string) int64 { return p.Tracker.Applied(tenant, dest) }
	letters := func() []dlq.Letter {
		t.Helper()
		q, err := dlq.Open(ctx, p.JS, "")
		if err != nil {
			t.Fatal(err)
		}
		ls, err := q.List(ctx, dlq.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}

	p.Receiver.FailNext(1, b2btest.Failure{Status: 422})
	publish("p1")
	testenv.Eventually(t, time.Minute, "p1 applied in postgres and clickhouse, dead-lettered for the partner", func() error {
		if pg, chs, n := applied(tenancy.DestPostgres), applied(tenancy.DestClickHouse), len(letters()); pg != 1 || chs != 1 || n != 1 {
			return fmt.Errorf("postgres applied %d, clickhouse %d, %d dead letters", pg, chs, n)
		}
		return nil
	})
	if l := letters()[0]; l.Dest != partner || l.Tenant != tenant {
		t.Fatalf("letter %+v, want the partner's", l)
	}

	redrive := func() {
		t.Helper()
		var out, errOut bytes.Buffer
		env := map[string]string{"DATABASE_URL": p.DSN, "NATS_URL": p.NATSServer.ClientURL()}
		cmd := newRootCmd(func(k string) string { return env[k] }, &out, &errOut)
		cmd.SetArgs([]string{"dlq", "redrive", "--dest", partner})
		if err := cmd.ExecuteContext(ctx); err != nil || !strings.Contains(out.String(), "→ "+partner) {
			t.Fatalf("redrive: %v\n%s%s", err, out.String(), errOut.String())
		}
	}
	// Refused again: a new letter, not a duplicate of the first (which the
	// DLQ's duplicate window would drop).
	p.Receiver.FailNext(1, b2btest.Failure{Status: 422})
	redrive()
	testenv.Eventually(t, time.Minute, "a new letter for the redriven event", func() error {
		if ls := letters(); len(ls) != 1 || !ls[0].Redriven {
			return fmt.Errorf("letters %+v", ls)
		}
		return nil
	})
	redrive()
	testenv.Eventually(t, time.Minute, "p1 at the partner", func() error {
		if n := p.Receiver.Products(tenant); n != 1 {
			return fmt.Errorf("the partner holds %d products", n)
		}
		return nil
	})
	if n := len(letters()); n != 0 {
		t.Fatalf("%d letters left after the redrive", n)
	}

	// A later event reaches every destination after anything dispatched
	// before it: had the redrive gone to postgres or clickhouse too, they
	// would have applied p1 again by then.
	publish("p2")
	testenv.Eventually(t, time.Minute, "p2 everywhere", func() error {
		if pg, chs, n := applied(tenancy.DestPostgres), applied(tenancy.DestClickHouse), p.Receiver.Products(tenant); pg < 2 || chs < 2 || n != 2 {
			return fmt.Errorf("postgres applied %d, clickhouse %d, the partner holds %d products", pg, chs, n)
		}
		return nil
	})
	if pg, chs := applied(tenancy.DestPostgres), applied(tenancy.DestClickHouse); pg != 2 || chs != 2 {
		t.Fatalf("postgres applied %d events, clickhouse %d; want 2 each (p1 once, p2)", pg, chs)
	}
	if n := applied(partner); n != 2 {
		t.Fatalf("the partner applied %d events, want 2", n)
	}
}
