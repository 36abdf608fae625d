package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// This file is the baseline of BenchmarkEndToEnd: the same load, through
// the same servers, to the same three destinations, written the way a
// team without fairway would — an HTTP handler that decodes each NDJSON
// line with encoding/json and publishes it with a Nats-Msg-Id, then one
// shared durable JetStream consumer per destination whose workers fetch a
// batch, decode it, write it with plain SQL or a plain signed POST, and
// ack. No tenants, slots, cursors, fairness, dispatcher, work items,
// classification, dead letters or metrics. It tells how much of the
// machine the writes themselves take, so that the end-to-end figure can
// be read against what this machine allows at all.

// bareConsumer is how one destination consumes: Workers goroutines
// fetching up to Batch events (waiting at most 200 ms for a batch to
// fill). The batches are the sizes of the dispatcher's items (500; 5,000
// for ClickHouse); the workers are 4 everywhere, as fairway's runners
// default to, except ClickHouse's, which applies 16 items at once.
type bareConsumer struct {
	Dest           string
	Workers, Batch int
}

var bareConsumers = []bareConsumer{
	{Dest: tenancy.DestPostgres, Workers: 4, Batch: 500},
	{Dest: tenancy.DestClickHouse, Workers: 4, Batch: 5000},
	{Dest: tenancy.DestB2BPrefix + pipelinePartner, Workers: 4, Batch: 500},
}

// bareEvent is one NDJSON line as the bare system decodes it.
type bareEvent struct {
	ProductID  string          `json:"product_id"`
	Version    int64           `json:"version"`
	Op         string          `json:"op"`
	OccurredAt time.Time       `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload"`
}

// bareSystem is the bare pipeline: embedded JetStream as the pipeline's,
// the ingest handler, the consumers, and the same databases and partner
// receiver as the pipeline. It implements e2eSystem.
type bareSystem struct {
	stores  e2eStores
	js      jetstream.JetStream
	pool    *pgxpool.Pool
	chConn  ch.Conn
	client  *http.Client
	applied map[string]*atomic.Int64
	exited  chan struct{}
	once    sync.Once
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	failed  atomic.Pointer[error]
}

func (s *bareSystem) Token(string) string { return "" }
func (s *bareSystem) Destinations() []string {
	out := make([]string, len(bareConsumers))
	for i, c := range bareConsumers {
		out[i] = c.Dest
	}
	return out
}
func (s *bareSystem) Applied(dest string) int64                   { return s.applied[dest].Load() }
func (s *bareSystem) Exited() <-chan struct{}                     { return s.exited }
func (s *bareSystem) DeadLetters(context.Context) (uint64, error) { return 0, s.err() }
func (s *bareSystem) Stores() e2eStores                           { return s.stores }

func (s *bareSystem) err() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// stop ends the consumers and waits for them.
func (s *bareSystem) stop() {
	s.cancel()
	s.wg.Wait()
}

// fail records the first error of a component and ends the run.
func (s *bareSystem) fail(err error) {
	s.failed.CompareAndSwap(nil, &err)
	s.once.Do(func() { close(s.exited) })
}

// startBare starts a bare system on fresh databases (testenv) and serves
// its ingest handler on a loopback port; it returns the system and the
// base URL.
func startBare(tb testing.TB, ctx context.Context) (*bareSystem, string) {
	tb.Helper()
	s := &bareSystem{applied: map[string]*atomic.Int64{}, exited: make(chan struct{})}
	for _, c := range bareConsumers {
		s.applied[c.Dest] = &atomic.Int64{}
	}
	dsn := testenv.NewDatabase(tb)
	chAddr, db := testenv.NewClickHouseDatabase(tb)
	// The destinations' tables, created by the sinks as in the pipeline;
	// the writes below are plain SQL.
	var err error
	if s.pool, err = pgxpool.New(ctx, dsn); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.pool.Close)
	if _, err := postgres.New(ctx, &postgres.Config{Pool: s.pool}); err != nil {
		tb.Fatal(err)
	}
	cs, err := clickhouse.New(ctx, &clickhouse.Config{Addr: chAddr, Database: db})
	if err != nil {
		tb.Fatal(err)
	}
	_ = cs.Close()
	if s.chConn, err = ch.Open(&ch.Options{Addr: []string{chAddr}, Auth: ch.Auth{Database: db}, DialTimeout: 5 * time.Second, MaxOpenConns: 8}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.chConn.Close() })
	rcv := b2btest.Start(b2btest.Options{Secret: pipelineSecret})
	tb.Cleanup(rcv.Close)
	s.stores = e2eStores{DSN: dsn, ClickHouseAddr: chAddr, Database: db, Receiver: rcv}
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	tb.Cleanup(s.client.CloseIdleConnections)

	// JetStream as the pipeline runs it: embedded (the same server
	// options), file storage, the PRODUCTS stream's configuration
	// (duplicate window included).
	ns := testenv.NATSServer(tb, tb.TempDir())
	connect := func(name string) jetstream.JetStream {
		nc, err := nats.Connect(ns.ClientURL(), nats.Name(name))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			tb.Fatal(err)
		}
		return js
	}
	s.js = connect("bare-ingest")
	if _, err := events.EnsureStream(ctx, s.js, events.StreamConfig{}); err != nil {
		tb.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	tb.Cleanup(s.stop)
	for _, c := range bareConsumers {
		name := strings.ReplaceAll(c.Dest, ":", "_")
		js := connect("bare-" + name) // a process of its own
		cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamName, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
			MaxAckPending: 100_000, AckWait: time.Minute})
		if err != nil {
			tb.Fatal(err)
		}
		apply := s.applier(c.Dest)
		for range c.Workers {
			s.wg.Go(func() { s.consume(runCtx, cons, c, apply) })
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.ingest), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return s, "http://" + ln.Addr().String()
}

// ingest is the bare HTTP entry: POST /v1/tenants/<tenant>/events with
// NDJSON; every line is decoded, published with a Nats-Msg-Id, and the
// answer comes once JetStream acknowledged them all.
func (s *bareSystem) ingest(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tenants/")
	tenant, ok2 := strings.CutSuffix(rest, "/events")
	if !ok || !ok2 || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var futures []jetstream.PubAckFuture
	for sc.Scan() {
		var e bareEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.ProductID == "" {
			http.Error(w, fmt.Sprintf("line %d: %v", len(futures)+1, err), http.StatusBadRequest)
			return
		}
		m := nats.NewMsg("products." + tenant + "." + e.Op)
		m.Data = bytes.Clone(sc.Bytes())
		m.Header.Set(nats.MsgIdHdr, tenant+"/"+e.ProductID+"/"+strconv.FormatInt(e.Version, 10))
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		futures = append(futures, f)
	}
	if err := sc.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	dups := 0
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				dups++
			}
		case err := <-f.Err():
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"accepted":%d,"duplicates":%d}`, len(futures)-dups, dups)
}

// bareRecord is a consumed event.
type bareRecord struct {
	tenant string
	seq    uint64
	stored time.Time
	e      bareEvent
}

// consume is one worker of a destination: fetch, decode, apply, ack.
func (s *bareSystem) consume(ctx context.Context, cons jetstream.Consumer, c bareConsumer, apply func(context.Context, []bareRecord) error) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(c.Batch, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			if ctx.Err() == nil {
				s.fail(fmt.Errorf("%s: fetch: %w", c.Dest, err))
			}
			return
		}
		var msgs []jetstream.Msg
		var recs []bareRecord
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				s.fail(fmt.Errorf("%s: %w", c.Dest, err))
				return
			}
			var r bareRecord
			if err := json.Unmarshal(m.Data(), &r.e); err != nil {
				s.fail(fmt.Errorf("%s: seq %d: %w", c.Dest, md.Sequence.Stream, err))
				return
			}
			if r.tenant, _, _, err = events.ParseSubject(m.Subject()); err != nil {
				s.fail(fmt.Errorf("%s: seq %d: %w", c.Dest, md.Sequence.Stream, err))
				return
			}
			r.seq, r.stored = md.Sequence.Stream, md.Timestamp
			msgs, recs = append(msgs, m), append(recs, r)
		}
		if len(recs) == 0 {
			continue
		}
		if err := apply(ctx, recs); err != nil {
			if ctx.Err() == nil {
				s.fail(fmt.Errorf("%s: apply %d events: %w", c.Dest, len(recs), err))
			}
			return
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				s.fail(fmt.Errorf("%s: ack: %w", c.Dest, err))
				return
			}
		}
		s.applied[c.Dest].Add(int64(len(recs)))
	}
}

func (s *bareSystem) applier(dest string) func(context.Context, []bareRecord) error {
	switch dest {
	case tenancy.DestPostgres:
		return s.applyPostgres
	case tenancy.DestClickHouse:
		return s.applyClickHouse
	}
	return s.applyPartner
}

// applyPostgres is BenchmarkBareUnnest's upsert (sinks/postgres).
func (s *bareSystem) applyPostgres(ctx context.Context, recs []bareRecord) error {
	var t, p, pl []string
	var v []int64
	var d []bool
	var at []time.Time
	for _, r := range recs {
		t, p, v, d = append(t, r.tenant), append(p, r.e.ProductID), append(v, r.e.Version), append(d, r.e.Op == string(events.OpDelete))
		pl, at = append(pl, string(r.e.Payload)), append(at, r.e.OccurredAt)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO catalog.products AS p (tenant_id, product_id, version, deleted, payload, updated_at, applied_at)
SELECT u.t, u.p, u.v, u.d, u.pl::jsonb, u.at, now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::text[], $6::timestamptz[]) AS u(t, p, v, d, pl, at)
ON CONFLICT (tenant_id, product_id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted,
	payload = EXCLUDED.payload, updated_at = EXCLUDED.updated_at, applied_at = EXCLUDED.applied_at
WHERE p.version < EXCLUDED.version`, t, p, v, d, pl, at)
	return err
}

// applyClickHouse inserts into both tables of sinks/clickhouse, as its
// bare benchmark does.
func (s *bareSystem) applyClickHouse(ctx context.Context, recs []bareRecord) error {
	now := time.Now()
	evb, err := s.chConn.PrepareBatch(ctx, "INSERT INTO product_events (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, idempotency_key, seq, published_at, applied_at)")
	if err != nil {
		return err
	}
	latest, err := s.chConn.PrepareBatch(ctx, "INSERT INTO products_latest (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, applied_at)")
	if err != nil {
		return errors.Join(err, evb.Abort())
	}
	for _, r := range recs {
		del := uint8(0)
		if r.e.Op == string(events.OpDelete) {
			del = 1
		}
		key := r.tenant + "/" + r.e.ProductID + "/" + strconv.FormatInt(r.e.Version, 10)
		if err := evb.Append(r.tenant, r.e.ProductID, r.e.Version, del, string(r.e.Payload), r.e.OccurredAt, r.e.OccurredAt.UnixNano(), key, r.seq, r.stored, now); err != nil {
			return errors.Join(err, evb.Abort(), latest.Abort())
		}
		if err := latest.Append(r.tenant, r.e.ProductID, r.e.Version, del, string(r.e.Payload), r.e.OccurredAt, r.e.OccurredAt.UnixNano(), now); err != nil {
			return errors.Join(err, evb.Abort(), latest.Abort())
		}
	}
	if err := evb.Send(); err != nil {
		return errors.Join(err, latest.Abort())
	}
	return latest.Send()
}

// applyPartner POSTs each tenant's events as one b2b.Body built with
// encoding/json and signed with b2b.SigningDefault.Sign
// (BenchmarkBareSignedPost's request).
func (s *bareSystem) applyPartner(ctx context.Context, recs []bareRecord) error {
	byTenant := map[string]*b2b.Body{}
	for _, r := range recs {
		body := byTenant[r.tenant]
		if body == nil {
			body = &b2b.Body{Tenant: r.tenant, Partner: pipelinePartner}
			byTenant[r.tenant] = body
		}
		body.Events = append(body.Events, b2b.BodyEvent{Seq: r.seq, ProductID: r.e.ProductID, Version: r.e.Version,
			Op: events.Op(r.e.Op), OccurredAt: r.e.OccurredAt, Payload: r.e.Payload})
	}
	for _, body := range byTenant {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		now := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.stores.Receiver.URL(), bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		b2b.SigningDefault.Sign(req.Header, fmt.Sprintf("%s-%d-%d", body.Tenant, body.Events[0].Seq, len(body.Events)), now, raw, pipelineSecret)
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("partner answered %s", resp.Status)
		}
	}
	return nil
}

// TestBareEndToEnd checks the baseline with a small load: every event
// reaches every destination once, as TestPipelineEndToEnd checks fairway.
func TestBareEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	load := e2eLoad{Events: 4_000, Tenants: 20, Batch: 100, Clients: 4}
	s, baseURL := startBare(t, ctx)
	if _, err := runE2E(ctx, s, baseURL, load, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := verifyE2E(ctx, s, load); err != nil {
		t.Fatal(err)
	}
}
