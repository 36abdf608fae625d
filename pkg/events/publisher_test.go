package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// bare starts an embedded JetStream server with no stream.
func bare(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc, js := testenv.JetStream(t)
	return nc, js
}

// setup starts an embedded JetStream server with the PRODUCTS stream.
func setup(t testing.TB) (*nats.Conn, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, js := bare(t)
	s, err := EnsureStream(context.Background(), js, StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, s
}

func newPublisher(t testing.TB, js jetstream.JetStream, opts ...PublisherOption) *Publisher {
	t.Helper()
	p, err := NewPublisher(js, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func streamMsgs(t testing.TB, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestPublisherStores(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js)

	a := validEvent()
	b := validEvent()
	b.Tenant, b.ProductID, b.Op, b.Payload, b.IdempotencyKey = "beta-2", "sku-9", OpDelete, nil, "del-9"
	ctx := ContextWithRequestID(context.Background(), "req-123")
	res := p.Publish(ctx, []Event{a, b})
	for i, r := range res {
		if r.Err != nil || r.Duplicate || r.Seq != uint64(i+1) {
			t.Fatalf("result %d = %+v, want seq %d", i, r, i+1)
		}
	}
	for i, e := range []Event{a, b} {
		m, err := s.GetMsg(context.Background(), res[i].Seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("products.%d.%s.%s", Layout{Partitions: PartitionsDefault}.PartitionOf(e.Tenant), e.Tenant, e.Op); m.Subject != want {
			t.Errorf("event %d stored on %q, want %q", i, m.Subject, want)
		}
		want := map[string]string{
			HeaderMsgID:     e.MsgID(),
			HeaderRequestID: "req-123",
		}
		for k, v := range want {
			if got := m.Header.Get(k); got != v {
				t.Errorf("event %d header %s = %q, want %q", i, k, got, v)
			}
		}
		got, err := Decode(m.Data)
		if err != nil {
			t.Fatalf("event %d: Decode: %v", i, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(e) {
			t.Errorf("event %d stored as %+v, want %+v", i, got, e)
		}
	}

	// Without a request id the header is absent.
	c := validEvent()
	c.Version = 4
	r := p.PublishOne(context.Background(), c)
	m, err := s.GetMsg(context.Background(), r.Seq)
	if err != nil {
		t.Fatal(r.Err, err)
	}
	if _, ok := m.Header[HeaderRequestID]; ok {
		t.Errorf("header %s set without a request id", HeaderRequestID)
	}
}

func TestPublisherDuplicate(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js)
	e := validEvent()
	first := p.PublishOne(context.Background(), e)
	if first.Err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v", first)
	}
	changed := e
	changed.Payload = json.RawMessage(`{"other":true}`) // same Key, so a duplicate
	res := p.Publish(context.Background(), []Event{e, changed})
	for i, r := range res {
		if r.Err != nil || !r.Duplicate || r.Seq != first.Seq {
			t.Errorf("repeat %d = %+v, want Duplicate of seq %d", i, r, first.Seq)
		}
	}
	if n := streamMsgs(t, s); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
	e.Version++ // another key
	if r := p.PublishOne(context.Background(), e); r.Err != nil || r.Duplicate {
		t.Errorf("new version: %+v", r)
	}
}

func TestPublisherInvalidEventsDoNotBlock(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js, WithLimits(Limits{MaxPayloadBytes: 64}))
	good := func(v int64) Event { e := validEvent(); e.Version = v; return e }
	badVersion := good(0)
	badTenant := good(5)
	badTenant.Tenant = "acme.*"
	tooBig := good(6)
	tooBig.Payload = json.RawMessage(`{"s":"` + strings.Repeat("x", 64) + `"}`)
	res := p.Publish(context.Background(), []Event{good(1), badVersion, good(2), badTenant, tooBig, good(3)})
	wantErr := []string{"", "version is required", "", `tenant "acme.*" contains '.' at byte 4 (allowed: a-z 0-9 _ -)`, "payload is 72 bytes, limit 64", ""}
	for i, r := range res {
		if wantErr[i] == "" {
			if r.Err != nil || r.Seq == 0 {
				t.Errorf("result %d = %+v, want stored", i, r)
			}
			continue
		}
		if r.Err == nil || r.Err.Error() != wantErr[i] || !errors.Is(r.Err, ErrInvalidEvent) || r.Seq != 0 {
			t.Errorf("result %d = %+v, want ErrInvalidEvent %q", i, r, wantErr[i])
		}
	}
	if n := streamMsgs(t, s); n != 3 {
		t.Errorf("stream holds %d messages, want 3", n)
	}
}

// TestPublisherWindow: a window far smaller than the batches, shared by
// concurrent callers, neither deadlocks nor loses events.
func TestPublisherWindow(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js, WithMaxInFlight(3))
	const callers, perCall = 4, 250
	var wg sync.WaitGroup
	errs := make(chan error, callers*perCall)
	for c := range callers {
		wg.Go(func() {
			evs := make([]Event, perCall)
			for i := range evs {
				evs[i] = validEvent()
				evs[i].ProductID = fmt.Sprintf("c%d-p%d", c, i)
			}
			var last uint64
			for i, r := range p.Publish(context.Background(), evs) {
				switch {
				case r.Err != nil:
					errs <- fmt.Errorf("caller %d event %d: %w", c, i, r.Err)
				case r.Seq <= last:
					errs <- fmt.Errorf("caller %d event %d: seq %d after %d", c, i, r.Seq, last)
				}
				last = r.Seq
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := streamMsgs(t, s); n != callers*perCall {
		t.Errorf("stream holds %d messages, want %d", n, callers*perCall)
	}
	if got := len(p.sem); got != 0 {
		t.Errorf("%d window slots still taken", got)
	}
}

func TestPublisherWrongStreamFailsLoudly(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js, WithStream("ORDERS"))
	r := p.PublishOne(context.Background(), validEvent())
	var apiErr *jetstream.APIError
	if r.Err == nil || !errors.As(r.Err, &apiErr) {
		t.Fatalf("publish into the wrong stream: %+v, want a JetStream API error", r)
	}
	if n := streamMsgs(t, s); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

// silentJS is a JetStream context whose subjects have a plain subscriber
// that never answers: acks never come. The subscription counts what was sent.
func silentJS(t *testing.T) (jetstream.JetStream, func() int) {
	t.Helper()
	_, nc := testenv.NATS(t)
	sub, err := nc.SubscribeSync(SubjectWildcard)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sent := func() int {
		if err := nc.Flush(); err != nil { // the server has seen all we sent
			t.Fatal(err)
		}
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return js, sent
}

func TestPublisherAckTimeout(t *testing.T) {
	t.Parallel()
	js, sent := silentJS(t)
	p := newPublisher(t, js, WithAckTimeout(100*time.Millisecond), WithMaxInFlight(2))
	evs := []Event{validEvent(), validEvent(), validEvent()}
	evs[1].Version, evs[2].Version = 0, 9
	res := p.Publish(context.Background(), evs)
	for _, i := range []int{0, 2} {
		if !errors.Is(res[i].Err, jetstream.ErrAsyncPublishTimeout) {
			t.Errorf("result %d = %+v, want ErrAsyncPublishTimeout", i, res[i])
		}
	}
	if !errors.Is(res[1].Err, ErrInvalidEvent) {
		t.Errorf("result 1 = %+v, want ErrInvalidEvent", res[1])
	}
	if got := len(p.sem); got != 0 {
		t.Errorf("%d window slots still taken", got)
	}
	if n := sent(); n != 2 {
		t.Errorf("%d messages sent, want 2", n)
	}
}

func TestPublisherContext(t *testing.T) {
	t.Parallel()
	t.Run("canceled before", func(t *testing.T) {
		t.Parallel()
		_, js, s := setup(t)
		p := newPublisher(t, js)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for i, r := range p.Publish(ctx, []Event{validEvent(), validEvent()}) {
			if !errors.Is(r.Err, context.Canceled) {
				t.Errorf("result %d = %+v, want context.Canceled", i, r)
			}
		}
		if n := streamMsgs(t, s); n != 0 {
			t.Errorf("stream holds %d messages, want 0", n)
		}
	})
	t.Run("ends while waiting for acks", func(t *testing.T) {
		t.Parallel()
		js, sent := silentJS(t)
		p := newPublisher(t, js, WithMaxInFlight(1))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		evs := []Event{validEvent(), validEvent(), validEvent()}
		for i, r := range p.Publish(ctx, evs) {
			if !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Errorf("result %d = %+v, want context.DeadlineExceeded", i, r)
			}
		}
		// The window held one message; once the context ended nothing
		// more was sent.
		if n := sent(); n != 1 {
			t.Errorf("%d messages sent, want 1", n)
		}
	})
	t.Run("bad request id", func(t *testing.T) {
		t.Parallel()
		_, js, s := setup(t)
		p := newPublisher(t, js)
		ctx := ContextWithRequestID(context.Background(), "req\r\nX-Evil: 1")
		r := p.PublishOne(ctx, validEvent())
		if !errors.Is(r.Err, ErrInvalidRequestID) {
			t.Errorf("result = %+v, want ErrInvalidRequestID", r)
		}
		if n := streamMsgs(t, s); n != 0 {
			t.Errorf("stream holds %d messages, want 0", n)
		}
	})
}

func TestNewPublisherOptions(t *testing.T) {
	t.Parallel()
	_, js, _ := setup(t)
	for name, opt := range map[string]PublisherOption{
		"window 0":      WithMaxInFlight(0),
		"ack timeout 0": WithAckTimeout(0),
		"empty stream":  WithStream(""),
	} {
		if _, err := NewPublisher(js, opt); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := NewPublisher(nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil js: err = %v", err)
	}
	p := newPublisher(t, js)
	if cap(p.sem) != MaxInFlightDefault || p.ackTimeout != AckTimeoutDefault || p.stream != StreamName {
		t.Errorf("defaults: window %d, ack timeout %v, stream %q", cap(p.sem), p.ackTimeout, p.stream)
	}
}

// --- benchmarks ---

const benchBatch = 500

// benchEvents returns n events whose JSON body is 256 bytes, with keys that
// start at version from.
func benchEvents(n int, from int64) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{
			Tenant:     fmt.Sprintf("tenant-%d", i%10),
			ProductID:  fmt.Sprintf("sku-%05d", i),
			Version:    from + int64(i),
			Op:         OpUpsert,
			OccurredAt: t0,
		}
		evs[i].Payload = json.RawMessage(`{"d":""}`)
		pad := 256 - len(evs[i].appendJSON(nil))
		evs[i].Payload = json.RawMessage(`{"d":"` + strings.Repeat("x", pad) + `"}`)
	}
	return evs
}

func awaitAll(b *testing.B, pafs []jetstream.PubAckFuture) {
	for _, f := range pafs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
}

// BenchmarkRawAsyncPublish is the baseline: bare js.PublishMsgAsync of
// 256-byte bodies without headers, waiting for all acks of each batch.
func BenchmarkRawAsyncPublish(b *testing.B) {
	_, js, _ := setup(b)
	msgs := make([]*nats.Msg, benchBatch)
	for i, e := range benchEvents(benchBatch, 1) {
		msgs[i] = &nats.Msg{Subject: "products." + e.Tenant + ".upsert", Data: e.appendJSON(nil)}
	}
	pafs := make([]jetstream.PubAckFuture, benchBatch)
	b.ResetTimer()
	for b.Loop() {
		for i, m := range msgs {
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: m.Subject, Data: m.Data})
			if err != nil {
				b.Fatal(err)
			}
			pafs[i] = f
		}
		awaitAll(b, pafs)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRawAsyncPublishMsgID publishes the event bodies Publisher builds
// with a unique Nats-Msg-Id and bare js.PublishMsgAsync: the difference to
// BenchmarkRawAsyncPublish is the server's cost of dedup (which the
// idempotency contract needs), the difference to BenchmarkPublisher is the
// client's (validation, encoding, result bookkeeping).
func BenchmarkRawAsyncPublishMsgID(b *testing.B) {
	_, js, _ := setup(b)
	evs := benchEvents(benchBatch, 1)
	pafs := make([]jetstream.PubAckFuture, benchBatch)
	var round int64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		msgs := make([]*nats.Msg, benchBatch)
		for i := range evs {
			evs[i].Version = round*benchBatch + int64(i) + 1
			msgs[i] = evs[i].msg(callContext{}, "")
		}
		round++
		b.StartTimer()
		for i, m := range msgs {
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			pafs[i] = f
		}
		awaitAll(b, pafs)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPublisher sends the same events through Publisher.Publish in
// batches of 500: validation, encoding, headers and ack bookkeeping included.
func BenchmarkPublisher(b *testing.B) {
	_, js, _ := setup(b)
	p := newPublisher(b, js)
	evs := benchEvents(benchBatch, 1)
	var round int64
	b.ResetTimer()
	for b.Loop() {
		for i := range evs {
			evs[i].Version = round*benchBatch + int64(i) + 1
		}
		round++
		for i, r := range p.Publish(context.Background(), evs) {
			if r.Err != nil || r.Duplicate {
				b.Fatalf("event %d: %+v", i, r)
			}
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// WithValidatedEvents skips the full validation but never lets an
// unvalidated tenant or op become a subject.
func TestPublisherWithValidatedEventsStillGuardsSubjects(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js, WithValidatedEvents())
	tooBig := validEvent()
	tooBig.Payload = []byte(`{"x":"` + strings.Repeat("y", 300<<10) + `"}`) // over the default limit: trusted
	badTenant := validEvent()
	badTenant.Tenant = "acme.>"
	badOp := validEvent()
	badOp.Op = "drop"
	res := p.Publish(context.Background(), []Event{tooBig, badTenant, badOp})
	if res[0].Err != nil {
		t.Fatalf("trusted event rejected: %v", res[0].Err)
	}
	if !errors.Is(res[1].Err, ErrInvalidTenant) || !errors.Is(res[2].Err, ErrInvalidEvent) {
		t.Fatalf("subject guards: %v, %v", res[1].Err, res[2].Err)
	}
	if n := streamMsgs(t, s); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
}
