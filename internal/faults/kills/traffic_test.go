package kills_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Traffic shape: per tenant, requests of 1–4 events every 100–400 ms over
// productsPerTenant products, so every product gets several versions; some
// events are held back and sent after newer versions of their product,
// and a tenth are high and a fifth bulk, so a product's versions are
// dispatched in different priorities, out of stream order. The first floodTenants tenants are floods instead: requests of
// floodMin to floodMax events at the same pace, so their backlogs
// interleave in the stream in long runs, as catalogs imported at once do,
// and a restarted dispatcher finds them behind its cursors (the backfill,
// the index, carried bodies).
const (
	floodTenants      = 2
	floodMin          = 40
	floodMax          = 120
	productsPerTenant = 25
	deleteShare       = 0.05
	holdBackShare     = 0.15
	highShare         = 0.10
	bulkShare         = 0.20
	// answerTimeout bounds how long one request is retried until ingest
	// answers for every event. Ingest is never killed, so only a broken
	// ingest runs into it.
	answerTimeout = 3 * time.Minute
)

// key names one event: ingest's idempotency key is tenant:product:version.
type key struct {
	tenant, product string
	version         int64
}

// accepted is what ingest acknowledged for one event, and its priority
// ("": normal).
type accepted struct {
	op, prio string
	seq      uint64
}

// ledger holds every event ingest acknowledged.
type ledger struct {
	mu       sync.Mutex
	events   map[key]accepted
	bySeq    map[uint64]key
	requests int
	retries  int
	failures []string
}

func (l *ledger) snapshot() map[key]accepted {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[key]accepted, len(l.events))
	for k, v := range l.events {
		out[k] = v
	}
	return out
}

func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// keyOfSeq returns the event stored at a PRODUCTS sequence.
func (l *ledger) keyOfSeq(seq uint64) (key, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.bySeq[seq]
	return k, ok
}

// line is one NDJSON line of the events API.
type line struct {
	ProductID string          `json:"product_id"`
	Version   int64           `json:"version"`
	Op        string          `json:"op"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Priority  string          `json:"priority,omitempty"`
}

type traffic struct {
	c      *cluster
	ledger *ledger
	client *http.Client
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// startTraffic makes every tenant post events until stopTraffic.
func (c *cluster) startTraffic() *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{
		c:      c,
		ledger: &ledger{events: map[key]accepted{}, bySeq: map[uint64]key{}},
		client: &http.Client{Timeout: time.Minute},
		stop:   cancel,
	}
	for i, tenant := range c.tenants {
		per := [2]int{1, 4}
		if i < floodTenants {
			per = [2]int{floodMin, floodMax}
		}
		tr.wg.Go(func() { tr.tenantLoop(ctx, tenant, per) })
	}
	return tr
}

// stopTraffic stops new requests and waits for those in flight.
func (tr *traffic) stopTraffic() {
	tr.stop()
	tr.wg.Wait()
}

// tenantLoop posts requests of per[0] to per[1] events until ctx ends.
func (tr *traffic) tenantLoop(ctx context.Context, tenant string, per [2]int) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	next := make([]int64, productsPerTenant) // last version used per product
	var held []line
	for ctx.Err() == nil {
		var batch []line
		// Held-back events go out after newer versions of their product.
		if len(held) > 0 && rng.Float64() < 0.5 {
			batch, held = append(batch, held...), nil
		}
		for range per[0] + rng.IntN(per[1]-per[0]+1) {
			p := rng.IntN(productsPerTenant)
			next[p]++
			ev := line{ProductID: fmt.Sprintf("p%02d", p), Version: next[p], Op: "upsert"}
			// Some events of every tenant are urgent, some bulk: a product's
			// versions then go out in different priorities, out of order.
			switch f := rng.Float64(); {
			case f < highShare:
				ev.Priority = "high"
			case f < highShare+bulkShare:
				ev.Priority = "bulk"
			}
			if rng.Float64() < deleteShare {
				ev.Op = "delete"
			} else {
				ev.Payload = fmt.Appendf(nil, `{"v":%d,"name":"product %d of %s"}`, next[p], p, tenant)
			}
			if rng.Float64() < holdBackShare {
				held = append(held, ev)
				continue
			}
			batch = append(batch, ev)
		}
		if len(batch) > 0 && !tr.post(tenant, batch) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
		}
	}
}

type eventResult struct {
	Seq   uint64 `json:"seq"`
	Error string `json:"error"`
}

type eventsAnswer struct {
	Results []eventResult `json:"results"`
}

// post sends batch until ingest has stored every event (re-sending the
// whole request is safe: stored events come back as duplicates with their
// sequence) and records them. It returns false when ingest never answered.
func (tr *traffic) post(tenant string, batch []line) bool {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, ev := range batch {
		if err := enc.Encode(ev); err != nil {
			panic(err)
		}
	}
	deadline := time.Now().Add(answerTimeout)
	var last string
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		res, err := tr.send(tenant, body.Bytes())
		var perm permanentError
		if errors.As(err, &perm) {
			last = err.Error()
			break
		}
		if err != nil {
			last = err.Error()
			continue
		}
		stored := len(res) == len(batch)
		for _, r := range res {
			stored = stored && r.Seq > 0 && r.Error == ""
		}
		if !stored {
			last = fmt.Sprintf("not every event stored: %+v", res)
			continue
		}
		tr.ledger.mu.Lock()
		tr.ledger.requests++
		if attempt > 0 {
			tr.ledger.retries += attempt
		}
		for i, ev := range batch {
			k := key{tenant, ev.ProductID, ev.Version}
			tr.ledger.events[k] = accepted{op: ev.Op, prio: ev.Priority, seq: res[i].Seq}
			tr.ledger.bySeq[res[i].Seq] = k
		}
		tr.ledger.mu.Unlock()
		return true
	}
	tr.ledger.mu.Lock()
	tr.ledger.failures = append(tr.ledger.failures, fmt.Sprintf("%s: ingest did not store a request of %d events: %s", tenant, len(batch), last))
	tr.ledger.mu.Unlock()
	return false
}

// permanentError is an answer that re-sending cannot change (4xx).
type permanentError struct{ error }

func (tr *traffic) send(tenant string, body []byte) ([]eventResult, error) {
	req, err := http.NewRequest(http.MethodPost, tr.c.ingestURL+"/v1/tenants/"+tenant+"/events", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tr.c.tokens[tenant])
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := tr.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, permanentError{fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
	case resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusMultiStatus:
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var a eventsAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("answer %q: %w", b, err)
	}
	return a.Results, nil
}
