package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/pkg/events"
)

// An upstream program publishes product events and learns, per event,
// whether JetStream stored it.
func Example() {
	// An embedded JetStream server stands in for the real cluster.
	dir, err := os.MkdirTemp("", "fairway-events-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		log.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		log.Fatal(err)
	}

	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	evs := []events.Event{
		{Tenant: "acme", ProductID: "sku-1", Version: 1, Op: events.OpUpsert, OccurredAt: at, Payload: json.RawMessage(`{"name":"Widget"}`)},
		{Tenant: "acme", ProductID: "sku-2", Version: 0, Op: events.OpUpsert, OccurredAt: at, Payload: json.RawMessage(`{}`)},
		{Tenant: "acme", ProductID: "sku-1", Version: 1, Op: events.OpUpsert, OccurredAt: at, Payload: json.RawMessage(`{"name":"Widget"}`)},
	}
	ctx = events.ContextWithRequestID(ctx, "example-1")
	for i, r := range pub.Publish(ctx, evs) {
		switch {
		case r.Err != nil:
			fmt.Printf("%d: rejected: %v\n", i, r.Err)
		case r.Duplicate:
			fmt.Printf("%d: duplicate of seq %d\n", i, r.Seq)
		default:
			fmt.Printf("%d: stored as seq %d\n", i, r.Seq)
		}
	}
	// Output:
	// 0: stored as seq 1
	// 1: rejected: version is required
	// 2: duplicate of seq 1
}

// Ingest decodes a request body one item at a time and reports a result per
// line.
func ExampleDecoder() {
	body := strings.NewReader(`{"product_id":"sku-1","version":3,"op":"delete","occurred_at":"2024-05-01T12:00:00Z"}

{"product_id":"sku-2","version":1,"op":"upsrt","payload":{}}
{"product_id":"sku-3","version":1,"op":"upsert","payload":{"name":"Gadget"},"colour":"red"}
`)
	f, err := events.FormatFromContentType("application/x-ndjson; charset=utf-8")
	if err != nil {
		log.Fatal(err)
	}
	d := events.NewDecoder(body, f, events.DecodeOptions{Tenant: "acme", MaxEvents: 1000})
	for {
		it, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if it.Err != nil {
			fmt.Println(it.Err)
			continue
		}
		fmt.Printf("line %d: ok %s %s\n", it.Line, it.Event.Key(), it.Event.Op)
	}
	// Output:
	// line 1: ok acme:sku-1:3 delete
	// line 3: op "upsrt" is not one of upsert, delete
	// line 4: unknown field "colour" (fields are case-sensitive: tenant, product_id, version, op, occurred_at, payload, idempotency_key, priority)
}
