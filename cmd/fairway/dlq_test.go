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
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

// dlqCLI runs `fairway dlq args...` against natsURL.
func dlqCLI(t *testing.T, natsURL string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(func(k string) string { return map[string]string{"NATS_URL": natsURL}[k] }, &out, &errOut)
	cmd.SetArgs(append([]string{"dlq"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	srv, nc := testenv.NATS(t)
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
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

	out, _, err := dlqCLI(t, url, "list")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 {
		t.Fatalf("list printed %d lines, want header + 3:\n%s", len(lines), out)
	}
	out, _, _ = dlqCLI(t, url, "list", "--tenant", "acme", "--dest", "postgres")
	if !strings.Contains(out, "SQLSTATE 22P05") || strings.Contains(out, "globex") || !strings.Contains(out, "range") {
		t.Fatalf("filtered list:\n%s", out)
	}

	out, _, err = dlqCLI(t, url, "show", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"class:", "permanent", "attempts:", "source:", "PRODUCTS seq " + strconv.FormatUint(r.Seq, 10), `"product_id":"p1"`, "2030-01-01T00:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := dlqCLI(t, url, "show", "42"); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("show of a missing letter: %v", err)
	}
	if _, _, err := dlqCLI(t, url, "redrive"); !errors.As(err, new(usageError)) {
		t.Errorf("redrive without a selector: %v, want a usage error", err)
	}

	// Redrive acme's letters: the event goes back into PRODUCTS with a fresh
	// key and its letter is deleted; the range letter stays.
	out, errOut, err := dlqCLI(t, url, "redrive", "--tenant", "acme")
	if err == nil || !strings.Contains(errOut, "letter 3") || !strings.Contains(errOut, "cannot be redriven") {
		t.Fatalf("redrive: err %v\nout %s\nerr %s", err, out, errOut)
	}
	ps, _ := js.Stream(ctx, events.StreamName)
	info, _ := ps.Info(ctx)
	if info.State.Msgs != 2 {
		t.Fatalf("PRODUCTS holds %d events, want 2 (the original and the redriven one)", info.State.Msgs)
	}
	m, err := ps.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.Decode(m.Data)
	if err != nil || ev.ProductID != "p1" || ev.Version != 4 || !strings.HasPrefix(ev.IdempotencyKey, "redrive:1:") {
		t.Fatalf("redriven event %+v %v", ev, err)
	}
	ls, _ := q.List(ctx, dlq.Filter{})
	if len(ls) != 2 || ls[0].ID != 2 || ls[1].ID != 3 {
		t.Fatalf("letters left: %+v", ls)
	}

	// Redrive by id, then remove the range letter.
	if _, _, err := dlqCLI(t, url, "redrive", "2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dlqCLI(t, url, "rm", "3"); err != nil {
		t.Fatal(err)
	}
	if ls, _ := q.List(ctx, dlq.Filter{}); len(ls) != 0 {
		t.Fatalf("letters left: %+v", ls)
	}
	info, _ = ps.Info(ctx)
	if info.State.Msgs != 3 {
		t.Fatalf("PRODUCTS holds %d events, want 3", info.State.Msgs)
	}
}
