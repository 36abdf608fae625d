package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/testenv/pipelinetest"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// This file drives a whole pipeline (internal/pipeline, configured as the
// demo configures it) the way an upstream system would: NDJSON batches
// POSTed to the ingest API by a few concurrent clients with tenant
// tokens. BenchmarkEndToEnd measures it; TestPipelineEndToEnd checks, with
// a small load, that the same run delivers every event to every
// destination.

// e2eLoad is what the upstream system sends: Events events spread over
// Tenants tenants, POSTed as NDJSON batches of Batch events by Clients
// concurrent HTTP clients. Every event is a new product (version 1) with
// a payload of about 256 bytes; batch k goes to tenant k mod Tenants.
type e2eLoad struct {
	Events, Tenants, Batch, Clients int
	// ClickHouseBatch is the dispatcher's batch size for clickhouse; 0
	// keeps its default.
	ClickHouseBatch int
}

func (l e2eLoad) tenants() []string {
	out := make([]string, l.Tenants)
	for i := range out {
		out[i] = fmt.Sprintf("t%02d", i+1)
	}
	return out
}

// e2ePayload is a JSON object of 256 bytes, as in internal/ingest's
// BenchmarkIngest.
var e2ePayload = `{"name":"` + strings.Repeat("x", 256-11) + `"}`

// e2eResult is when, counted from the first POST, the load was ingested
// and applied.
type e2eResult struct {
	// Ingest: the last POST was answered (every event acknowledged by
	// JetStream).
	Ingest time.Duration
	// Applied: per destination, its sink had applied every event.
	Applied map[string]time.Duration
	// All: every destination had applied every event.
	All time.Duration
}

// e2eSystem is what runE2E loads and verifyE2E checks: fairway's
// pipeline (e2ePipe) or BenchmarkEndToEndBare's plain one.
type e2eSystem interface {
	// Token is tenant's bearer token for the ingest API.
	Token(tenant string) string
	// Destinations are the destinations every event goes to.
	Destinations() []string
	// Applied is how many events dest has applied so far.
	Applied(dest string) int64
	// Exited is closed when a component stopped early.
	Exited() <-chan struct{}
	// DeadLetters counts the events given up on.
	DeadLetters(ctx context.Context) (uint64, error)
	// Stores locates what the destinations wrote.
	Stores() e2eStores
}

// e2eStores are where a system's destinations write: the PostgreSQL
// database (catalog.products), the ClickHouse database (product_events)
// and the partner receiver.
type e2eStores struct {
	DSN, ClickHouseAddr, Database string
	Receiver                      *b2btest.Receiver
}

// e2ePipe is fairway's pipeline with the demo's configuration
// (pipelinetest, demoConfig) as an e2eSystem: every tenant has the
// partner, and Tracker counts what each destination applied.
type e2ePipe struct {
	*pipelinetest.Pipeline
	Tracker  *demo.Tracker
	Receiver *b2btest.Receiver
}

func (p *e2ePipe) Token(tenant string) string { return p.Tokens[tenant] }
func (p *e2ePipe) Destinations() []string     { return p.Dests }
func (p *e2ePipe) Applied(dest string) int64  { return p.Tracker.Total(dest) }
func (p *e2ePipe) Stores() e2eStores {
	return e2eStores{DSN: p.DSN, ClickHouseAddr: p.ClickHouseAddr, Database: p.ClickHouseDatabase, Receiver: p.Receiver}
}

// e2ePipeline starts a pipeline with the demo's configuration and load's
// tenants on fresh databases (pipelinetest), serves its ingest API on a
// loopback port and returns the base URL. Its logs (info, as the demo's)
// go to a temporary file that is kept, and named, when tb fails.
func e2ePipeline(tb testing.TB, load e2eLoad) (*e2ePipe, string) {
	tb.Helper()
	logFile, err := os.CreateTemp("", "fairway-e2e-*.log")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		logFile.Close()
		if tb.Failed() {
			tb.Logf("pipeline logs: %s", logFile.Name())
			return
		}
		os.Remove(logFile.Name())
	})
	log, err := bootstrap.NewLogger(logFile, "text", "info")
	if err != nil {
		tb.Fatal(err)
	}
	p := &e2ePipe{Tracker: demo.NewTracker()}
	cfg := demoConfig("e2e", load.tenants(), log, p.Tracker)
	if load.ClickHouseBatch > 0 {
		cfg.Dispatcher.DestBatchSize = map[string]int{tenancy.DestClickHouse: load.ClickHouseBatch}
	}
	p.Pipeline = pipelinetest.Start(tb, pipelinetest.Config{Pipeline: cfg, Partners: []pipelinetest.Partner{{Name: pipelinePartner}}})
	p.Receiver = p.Receivers[pipelinePartner]
	return p, p.IngestURL()
}

// runE2E posts load to the ingest API at baseURL and waits until every
// destination of p applied all of it, a POST fails, an event is
// dead-lettered, a component stops, or deadline passes.
func runE2E(ctx context.Context, p e2eSystem, baseURL string, load e2eLoad, deadline time.Duration) (e2eResult, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	tenants := load.tenants()
	batches := (load.Events + load.Batch - 1) / load.Batch
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: load.Clients}, Timeout: time.Minute}
	defer client.CloseIdleConnections()

	var (
		next, posted atomic.Int64
		lastAnswer   atomic.Int64 // since start, ns
		wg           sync.WaitGroup
	)
	postErr := make(chan error, load.Clients)
	ingested := make(chan struct{})
	start := time.Now()
	for range load.Clients {
		wg.Go(func() {
			body := make([]byte, 0, load.Batch*(len(e2ePayload)+128))
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= batches {
					return
				}
				first, n := k*load.Batch, min(load.Batch, load.Events-k*load.Batch)
				body = appendE2EBatch(body[:0], first, n, time.Now())
				tenant := tenants[k%len(tenants)]
				if err := postE2EBatch(ctx, client, baseURL, tenant, p.Token(tenant), body, n); err != nil {
					postErr <- fmt.Errorf("POST batch %d (%s): %w", k, tenant, err)
					return
				}
				posted.Add(int64(n))
				since := int64(time.Since(start))
				for {
					old := lastAnswer.Load()
					if since <= old || lastAnswer.CompareAndSwap(old, since) {
						break
					}
				}
			}
		})
	}
	go func() { wg.Wait(); close(ingested) }()

	res := e2eResult{Applied: map[string]time.Duration{}}
	progress := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "%d of %d events ingested", posted.Load(), load.Events)
		for _, d := range p.Destinations() {
			fmt.Fprintf(&b, ", %d applied in %s", p.Applied(d), d)
		}
		return b.String()
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	lastDLQCheck := start
	for done := false; ; {
		select {
		case err := <-postErr:
			return res, err
		case <-ingested:
			select {
			case err := <-postErr: // a client failed before it returned
				return res, err
			default:
			}
			res.Ingest, ingested, done = time.Duration(lastAnswer.Load()), nil, true
		case <-p.Exited():
			return res, fmt.Errorf("a pipeline component stopped (%s)", progress())
		case <-ctx.Done():
			return res, fmt.Errorf("not done after %v: %s", deadline, progress())
		case <-tick.C:
		}
		now := time.Since(start)
		for _, d := range p.Destinations() {
			if _, ok := res.Applied[d]; !ok && p.Applied(d) >= int64(load.Events) {
				res.Applied[d] = now
				res.All = max(res.All, now)
			}
		}
		if done && len(res.Applied) == len(p.Destinations()) {
			return res, nil
		}
		if time.Since(lastDLQCheck) >= 500*time.Millisecond {
			lastDLQCheck = time.Now()
			switch n, err := p.DeadLetters(ctx); {
			case err != nil && ctx.Err() == nil:
				return res, fmt.Errorf("count dead letters: %w", err)
			case n > 0:
				return res, fmt.Errorf("%d events dead-lettered (%s)", n, progress())
			}
		}
	}
}

// appendE2EBatch appends n NDJSON events, products p-<first> …
// p-<first+n-1>, to b.
func appendE2EBatch(b []byte, first, n int, now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339Nano)
	for i := first; i < first+n; i++ {
		b = append(b, `{"product_id":"p-`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","version":1,"op":"upsert","occurred_at":"`...)
		b = append(b, ts...)
		b = append(b, `","payload":`...)
		b = append(b, e2ePayload...)
		b = append(b, "}\n"...)
	}
	return b
}

// postE2EBatch posts one batch and checks that all n events were accepted.
func postE2EBatch(ctx context.Context, client *http.Client, baseURL, tenant, token string, body []byte, n int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/tenants/"+tenant+"/events", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: %.500s", resp.Status, out)
	}
	var r struct {
		Accepted   int `json:"accepted"`
		Duplicates int `json:"duplicates"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("answer %.200q: %w", out, err)
	}
	if r.Accepted != n || r.Duplicates != 0 {
		return fmt.Errorf("%d of %d events accepted, %d duplicates", r.Accepted, n, r.Duplicates)
	}
	return nil
}

// verifyE2E checks what the destinations hold after runE2E: every product
// once in PostgreSQL and in ClickHouse and at the partner, and no dead
// letters. It tells an event applied twice (which the Tracker counts
// twice) from every event applied.
func verifyE2E(ctx context.Context, sys e2eSystem, load e2eLoad) error {
	var errs []error
	want := int64(load.Events)
	p := sys.Stores()
	conn, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var pg int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM catalog.products").Scan(&pg); err != nil {
		errs = append(errs, fmt.Errorf("PostgreSQL: %w", err))
	} else if pg != want {
		errs = append(errs, fmt.Errorf("PostgreSQL holds %d products, want %d", pg, want))
	}

	chConn, err := ch.Open(&ch.Options{Addr: []string{p.ClickHouseAddr}, Auth: ch.Auth{Database: p.Database}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer chConn.Close()
	var chEvents uint64
	if err := chConn.QueryRow(ctx, "SELECT uniqExact(tenant_id, product_id, version) FROM product_events").Scan(&chEvents); err != nil {
		errs = append(errs, fmt.Errorf("ClickHouse: %w", err))
	} else if int64(chEvents) != want {
		errs = append(errs, fmt.Errorf("ClickHouse holds %d distinct events, want %d", chEvents, want))
	}

	var partner int64
	for _, t := range load.tenants() {
		partner += int64(p.Receiver.Products(t))
	}
	if partner != want {
		errs = append(errs, fmt.Errorf("the partner holds %d products, want %d", partner, want))
	}
	if n, err := sys.DeadLetters(ctx); err != nil || n > 0 {
		errs = append(errs, fmt.Errorf("dead letters: %d (%v)", n, err))
	}
	return errors.Join(errs...)
}

func TestPipelineEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	load := e2eLoad{Events: 4_000, Tenants: 20, Batch: 100, Clients: 4}
	p, baseURL := e2ePipeline(t, load)
	res, err := runE2E(ctx, p, baseURL, load, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyE2E(ctx, p, load); err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Dests {
		if res.Applied[d] <= 0 || res.Applied[d] > res.All {
			t.Errorf("%s applied after %v, all after %v", d, res.Applied[d], res.All)
		}
	}
	if res.Ingest <= 0 || res.Ingest > res.All {
		t.Errorf("ingested after %v, all applied after %v", res.Ingest, res.All)
	}
	// The dispatcher's doorbell runs on a connection of its own, which the
	// server delivered every event's headers to.
	cz, err := p.NATSServer.Connz(&server.ConnzOptions{State: server.ConnOpen, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var bell *server.ConnInfo
	for _, c := range cz.Conns {
		if c.Name == "fairway-e2e-dispatcher-doorbell" {
			bell = c
		}
	}
	if bell == nil || bell.OutMsgs < int64(load.Events) {
		t.Errorf("doorbell connection %+v: want one that was delivered all %d events", bell, load.Events)
	}
	t.Logf("%d events: ingested in %v, all applied in %v", load.Events, res.Ingest, res.All)
}
