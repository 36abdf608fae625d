package b2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// rawReceiver is a partner endpoint that verifies the Standard Webhooks
// signature under testSecret and keeps each body as it came, for partners
// whose events are mapped to their own shape.
type rawReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []rawBody
}

type rawBody struct {
	WebhookID string
	Tenant    string            `json:"tenant"`
	Partner   string            `json:"partner"`
	Events    []json.RawMessage `json:"events"`
}

func (e *env) rawReceiver(t testing.TB) *rawReceiver {
	r := &rawReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := b2b.SigningStandard.Verify([]byte(testSecret), req.Header, body, e.clock.Now(), b2b.VerifyToleranceDefault); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		b := rawBody{WebhookID: req.Header.Get("webhook-id")}
		if err := json.Unmarshal(body, &b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, b)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rawReceiver) bodies() []rawBody {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rawBody(nil), r.got...)
}

// events returns the events of every body received, as JSON text.
func (r *rawReceiver) events() []string {
	var out []string
	for _, b := range r.bodies() {
		for _, e := range b.Events {
			out = append(out, string(e))
		}
	}
	return out
}

func priced(id string, v int64, payload string) sink.Record {
	r := sinktest.Records(sinktest.Upsert("acme", id, v))[0]
	r.Event.Payload = json.RawMessage(payload)
	return r
}

// A partner's map gives each event its shape; its filter drops events,
// acked without delivery and counted; an event the map cannot map is
// refused, permanently, with CEL's error, and the rest of the batch is
// delivered.
func TestTransformMapsFiltersAndRefusesPerEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := e.rawReceiver(t)
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.srv.URL})
	if _, err := e.reg.SetTransform(ctx(t), "acme", p.Name, b2b.Transform{
		Filter: `event.op == "upsert"`,
		Map:    `{"sku": event.product_id, "cents": int(math.round(event.payload.price * 100.0))}`,
	}); err != nil {
		t.Fatal(err)
	}
	s := e.sink(t, p.Name, b2b.Config{})
	batch := []sink.Record{
		priced("p1", 1, `{"price":1.5}`),
		priced("p2", 1, `{"name":"no price"}`),
		sinktest.Records(sinktest.Delete("acme", "p3", 2))[0],
		priced("p4", 1, `{"price":2}`),
	}
	for i := range batch {
		batch[i].Seq = uint64(i + 1)
	}
	errs, err := s.Apply(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "no such key: price", "", ""} {
		switch {
		case want == "" && errs[i] != nil:
			t.Errorf("record %d: %v; want it applied", i, errs[i])
		case want != "" && (!sink.IsPermanent(errs[i]) || !errors.Is(errs[i], b2b.ErrTransform) || !strings.Contains(errs[i].Error(), want)):
			t.Errorf("record %d: %v; want a permanent ErrTransform saying %q", i, errs[i], want)
		}
	}
	if got := strings.Join(rcv.events(), " "); got != `{"sku":"p1","cents":150} {"sku":"p4","cents":200}` {
		t.Fatalf("partner received %s", got)
	}
	if b := rcv.bodies()[0]; b.Tenant != "acme" || b.Partner != p.Name || b.WebhookID == "" {
		t.Fatalf("body envelope %+v", b)
	}
	if s.Filtered() != 1 || s.TransformErrors() != 1 {
		t.Fatalf("filtered %v, transform errors %v; want 1 and 1", s.Filtered(), s.TransformErrors())
	}
}

// A bad expression is refused with CEL's error and the partner keeps its
// transform; a new one reaches the sink when its cache expires, and
// clearing it sends events as BodyEvents again.
func TestSetTransformValidatesAndSinksFollow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := e.rawReceiver(t)
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.srv.URL})
	first := b2b.Transform{Map: `{"id": event.product_id}`}
	if got, err := e.reg.SetTransform(ctx(t), "acme", p.Name, first); err != nil || got.Transform != first {
		t.Fatalf("SetTransform = %v, %v", got.Transform, err)
	}
	_, err := e.reg.SetTransform(ctx(t), "acme", p.Name, b2b.Transform{Map: `{"id": event.product_id`})
	if !errors.Is(err, b2b.ErrInvalidTransform) || !strings.Contains(err.Error(), "Syntax error") {
		t.Fatalf("SetTransform(bad) = %v; want ErrInvalidTransform with CEL's syntax error", err)
	}
	if got, err := e.reg.Get(ctx(t), "acme", p.Name); err != nil || got.Transform != first {
		t.Fatalf("after a refused transform the partner has %+v, %v; want %+v", got.Transform, err, first)
	}
	if _, err := e.reg.SetTransform(ctx(t), "acme", "nobody", first); !errors.Is(err, b2b.ErrUnknownPartner) {
		t.Fatalf("SetTransform(unknown partner) = %v; want ErrUnknownPartner", err)
	}

	s := e.sink(t, p.Name, b2b.Config{})
	mustApply(t, s, one("p1", 1))
	if _, err := e.reg.SetTransform(ctx(t), "acme", p.Name, b2b.Transform{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(b2b.PartnerCacheTTLDefault + 1)
	rec := one("p2", 1)
	rec[0].Seq = 2
	mustApply(t, s, rec)
	evs := rcv.events()
	if len(evs) != 2 || evs[0] != `{"id":"p1"}` {
		t.Fatalf("partner received %q", evs)
	}
	var plain b2b.BodyEvent
	if err := json.Unmarshal([]byte(evs[1]), &plain); err != nil || plain.ProductID != "p2" || plain.Version != 1 {
		t.Fatalf("after clearing the transform the partner received %s (%v); want a BodyEvent", evs[1], err)
	}
}

// MaxEvents splits a batch into requests of at most that many events, each
// with its own idempotency key; 1 sends every event on its own.
func TestBatchMaxEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct{ max, requests int }{{1, 5}, {2, 3}, {0, 1}} {
		s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
		name := strings.TrimPrefix(s.Name(), "b2b:")
		p, err := e.reg.SetMaxEvents(ctx(t), "acme", name, tc.max)
		if err != nil || p.MaxEvents != tc.max {
			t.Fatalf("SetMaxEvents(%d) = %v, %v", tc.max, p.MaxEvents, err)
		}
		batch := sinktest.Records(sinktest.Upsert("acme", "a", 1), sinktest.Upsert("acme", "b", 1), sinktest.Upsert("acme", "c", 1),
			sinktest.Upsert("acme", "d", 1), sinktest.Upsert("acme", "e", 1))
		mustApply(t, s, batch)
		if rcv.Count() != tc.requests || rcv.Products("acme") != 5 || len(rcv.IdempotencyKeys()) != tc.requests {
			t.Fatalf("max events %d: %d requests, %d keys, %d products; want %d requests with their own keys and 5 products",
				tc.max, rcv.Count(), len(rcv.IdempotencyKeys()), rcv.Products("acme"), tc.requests)
		}
	}
	name := e.partnerName()
	e.partner(t, b2b.Partner{Tenant: "acme", Name: name, URL: "http://127.0.0.1:9/hook"})
	for _, bad := range []int{-1, b2b.MaxEventsMax + 1} {
		if _, err := e.reg.SetMaxEvents(ctx(t), "acme", name, bad); !errors.Is(err, b2b.ErrInvalidPartner) {
			t.Fatalf("SetMaxEvents(%d) = %v; want ErrInvalidPartner", bad, err)
		}
	}
	if _, err := e.reg.SetMaxEvents(context.Background(), "acme", "nobody", 1); !errors.Is(err, b2b.ErrUnknownPartner) {
		t.Fatalf("SetMaxEvents(unknown partner) = %v; want ErrUnknownPartner", err)
	}
}

// A large batch is mapped on several goroutines: the body keeps the
// events in product order and each refusal stays with its record.
func TestTransformLargeBatchKeepsOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rcv := e.rawReceiver(t)
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.srv.URL, MaxRequestBytes: 4 << 20})
	if _, err := e.reg.SetTransform(ctx(t), "acme", p.Name, b2b.Transform{Map: `{"id": event.product_id, "n": event.payload.n}`}); err != nil {
		t.Fatal(err)
	}
	s := e.sink(t, p.Name, b2b.Config{})
	const n = 1000
	batch := make([]sink.Record, n)
	for i := range batch {
		// Shuffled product ids; every 97th event has no n.
		id := fmt.Sprintf("p%04d", (i*379)%n)
		payload := fmt.Sprintf(`{"n":%d}`, i)
		if i%97 == 0 {
			payload = `{}`
		}
		batch[i] = priced(id, 1, payload)
		batch[i].Seq = uint64(i + 1)
	}
	errs, err := s.Apply(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range batch {
		if (i%97 == 0) != (errs[i] != nil) {
			t.Fatalf("record %d: error %v", i, errs[i])
		}
	}
	for id := range n {
		i := slices.IndexFunc(batch, func(r sink.Record) bool { return r.Event.ProductID == fmt.Sprintf("p%04d", id) })
		if i%97 != 0 {
			want = append(want, fmt.Sprintf(`{"id":"p%04d","n":%d}`, id, i))
		}
	}
	if got := rcv.events(); !slices.Equal(got, want) {
		t.Fatalf("partner received %d events, want %d in product order; first %q", len(got), len(want), got[:min(3, len(got))])
	}
}
