package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// dlqCLI runs `fairway dlq args...` against natsURL and the database dsn.
func dlqCLI(t *testing.T, natsURL, dsn string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(func(k string) string { return map[string]string{"NATS_URL": natsURL, "DATABASE_URL": dsn}[k] }, &out, &errOut)
	cmd.SetArgs(append([]string{"dlq"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	srv, nc := testenv.NATS(t)
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	q, err := dlq.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	// The original event sits in PRODUCTS (its key is inside the duplicate
	// window: a redrive with the same key would be dropped).
	orig := events.Event{Tenant: "acme", ProductID: "p1", Version: 4, Op: events.OpUpsert, OccurredAt: time.Unix(1_700_000_000, 0).UTC(), Payload: json.RawMessage(`{"a":1}`)}
	r := pub.PublishOne(ctx, orig)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	body, _ := orig.MarshalJSON()
	failed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	letters := []dlq.Letter{
		{Kind: dlq.KindEvent, Dest: "postgres", Tenant: "acme", Reason: "rejected: payload refused (SQLSTATE 22P05)", Class: "permanent",
			Rule: "permanent record error", Attempts: 1, FirstFailure: failed, LastFailure: failed, SourceStream: "PRODUCTS",
			SourceSeq: r.Seq, SourceSubject: "products.acme.upsert", Lease: "acme/postgres/0/1", Data: body},
		{Kind: dlq.KindEvent, Dest: "clickhouse", Tenant: "globex", Reason: "gave up after 5 attempts: mystery", Class: "unknown",
			Attempts: 5, SourceStream: "PRODUCTS", SourceSeq: 99, Lease: "globex/clickhouse/0/1",
			Data: []byte(`{"tenant":"globex","product_id":"g","version":1,"op":"upsert","occurred_at":"2025-01-01T00:00:00Z","payload":{}}`)},
		{Kind: dlq.KindRange, Dest: "postgres", Tenant: "acme", Reason: "range 1..9 held 2 of 4 dispatched events", Class: "permanent",
			SourceStream: "PRODUCTS", SourceSeq: 1, Lease: "acme/postgres/0/2", Data: []byte(`{"tenant":"acme"}`)},
	}
	if err := q.Publish(ctx, letters); err != nil {
		t.Fatal(err)
	}
	// Publishing the same letters again stores nothing new.
	if err := q.Publish(ctx, letters); err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()

	out, _, err := dlqCLI(t, url, dsn, "list")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 {
		t.Fatalf("list printed %d lines, want header + 3:\n%s", len(lines), out)
	}
	out, _, _ = dlqCLI(t, url, dsn, "list", "--tenant", "acme", "--dest", "postgres")
	if !strings.Contains(out, "SQLSTATE 22P05") || strings.Contains(out, "globex") || !strings.Contains(out, "range") {
		t.Fatalf("filtered list:\n%s", out)
	}

	out, _, err = dlqCLI(t, url, dsn, "show", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"class:", "permanent", "attempts:", "source:", "PRODUCTS seq " + strconv.FormatUint(r.Seq, 10), `"product_id":"p1"`, "2030-01-01T00:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := dlqCLI(t, url, dsn, "show", "42"); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("show of a missing letter: %v", err)
	}
	if _, _, err := dlqCLI(t, url, dsn, "redrive"); !errors.As(err, new(usageError)) {
		t.Errorf("redrive without a selector: %v, want a usage error", err)
	}

	// Redrive acme's letters: the event goes to postgres alone, as a work
	// item that carries it under a slot; its letter is deleted, the range
	// letter stays. PRODUCTS is not written to.
	out, errOut, err := dlqCLI(t, url, dsn, "redrive", "--tenant", "acme")
	if err == nil || !strings.Contains(errOut, "letter 3") || !strings.Contains(errOut, "cannot be redriven") ||
		!strings.Contains(out, "letter 1 (postgres acme) → postgres, work item acme/postgres/0/") {
		t.Fatalf("redrive: err %v\nout %s\nerr %s", err, out, errOut)
	}
	ps, _ := js.Stream(ctx, events.StreamName)
	if info, _ := ps.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("PRODUCTS holds %d events, want the original alone", info.State.Msgs)
	}
	items := func() []work.Item {
		t.Helper()
		ws, _ := js.Stream(ctx, work.StreamName)
		info, _ := ws.Info(ctx)
		var out []work.Item
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := ws.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			it, err := work.Decode(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, it)
		}
		return out
	}
	its := items()
	if len(its) != 1 || its[0].Dest != "postgres" || its[0].Tenant != "acme" || !its[0].Redrive || len(its[0].Bodies) != 1 ||
		its[0].Bodies[0].Seq != r.Seq || !bytes.Equal(its[0].Bodies[0].Data, body) || its[0].Bodies[0].Op != events.OpUpsert {
		t.Fatalf("WORK holds %+v, want one redrive item for postgres carrying the event", its)
	}
	if n, err := store.InUse(ctx, "acme", "postgres"); err != nil || n != 1 {
		t.Fatalf("acme's postgres slots in use: %d %v, want the redrive's", n, err)
	}
	ls, _ := q.List(ctx, dlq.Filter{})
	if len(ls) != 2 || ls[0].ID != 2 || ls[1].ID != 3 {
		t.Fatalf("letters left: %+v", ls)
	}

	// At its slot limit, a redrive waits for --wait, then leaves the letter.
	if _, err := store.EnsureTenant(ctx, "globex"); err != nil {
		t.Fatal(err)
	}
	if err := store.SetLimit(ctx, "globex", "clickhouse", 0); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := dlqCLI(t, url, dsn, "redrive", "2", "--wait", "200ms"); err == nil || !strings.Contains(errOut, "no slot of globex/clickhouse free within 200ms") {
		t.Fatalf("redrive at the limit: %v\n%s", err, errOut)
	}
	if err := store.SetLimit(ctx, "globex", "clickhouse", 1); err != nil {
		t.Fatal(err)
	}
	// Redrive by id, then remove the range letter.
	if _, _, err := dlqCLI(t, url, dsn, "redrive", "2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dlqCLI(t, url, dsn, "rm", "3"); err != nil {
		t.Fatal(err)
	}
	if ls, _ := q.List(ctx, dlq.Filter{}); len(ls) != 0 {
		t.Fatalf("letters left: %+v", ls)
	}
	if its := items(); len(its) != 2 || its[1].Dest != "clickhouse" || its[1].Tenant != "globex" || its[1].FromSeq != 99 {
		t.Fatalf("WORK holds %+v, want a second item for globex's clickhouse", its)
	}
}
