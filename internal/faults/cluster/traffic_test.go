package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/fairwayhq/fairway/internal/ingest"
)

// event is one event the test sends: a product of its own, so that its row
// in catalog.products proves exactly this event was applied.
type event struct {
	tenant, product string
	version         int64
}

func (e event) line() string {
	return fmt.Sprintf(`{"product_id":%q,"version":%d,"op":"upsert","payload":{"v":%d}}`+"\n", e.product, e.version, e.version)
}

// postResult is the outcome of one POST of a batch of events.
type postResult struct {
	status   int // 0 when the request failed before an answer
	header   http.Header
	start    time.Time     // when the request was sent
	took     time.Duration // until the answer (or the error)
	body     []byte
	err      error
	accepted []event // stored: a result with a seq and no error
	failed   []event // not stored, or unknown: the client must retry them
}

// client posts events to ingest over HTTP, as an upstream system does.
type client struct {
	base   string
	http   *http.Client
	tokens map[string]string
}

func (c *client) post(ctx context.Context, tenant string, evs []event) postResult {
	var body bytes.Buffer
	for _, e := range evs {
		body.WriteString(e.line())
	}
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/tenants/"+tenant+"/events", &body)
	if err != nil {
		return postResult{err: err, failed: evs}
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[tenant])
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.http.Do(req)
	if err != nil {
		return postResult{start: start, took: time.Since(start), err: err, failed: evs}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := postResult{status: resp.StatusCode, header: resp.Header, start: start, took: time.Since(start), body: b, err: err}
	if err != nil {
		r.failed = evs
		return r
	}
	var er ingest.EventsResponse
	if json.Unmarshal(b, &er) != nil || len(er.Results) != len(evs) {
		// An error body without per-event results: nothing is known
		// stored.
		r.failed = evs
		return r
	}
	for i, res := range er.Results {
		if res.Error == "" && res.Seq > 0 {
			r.accepted = append(r.accepted, evs[i])
		} else {
			r.failed = append(r.failed, evs[i])
		}
	}
	return r
}

// ledger is what the upstream clients know: which events ingest
// acknowledged, which they still must retry, and how posts went.
type ledger struct {
	mu        sync.Mutex
	accepted  map[event]bool
	retry     []event
	posts     int
	failPosts int            // answered with an error status, or not at all
	oks       [][2]time.Time // sent and answered, of every fully accepted post
}

func newLedger() *ledger { return &ledger{accepted: map[event]bool{}} }

func (l *ledger) record(r postResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts++
	for _, e := range r.accepted {
		l.accepted[e] = true
	}
	l.retry = append(l.retry, r.failed...)
	if len(r.failed) > 0 || r.status != http.StatusAccepted {
		l.failPosts++
		return
	}
	l.oks = append(l.oks, [2]time.Time{r.start, r.start.Add(r.took)})
}

func (l *ledger) counts() (accepted, retry, posts, failPosts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted), len(l.retry), l.posts, l.failPosts
}

// firstOKAfter returns when the first post sent after t was answered with
// every event accepted; ok is false if none was yet.
func (l *ledger) firstOKAfter(t time.Time) (answered time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.oks {
		if s[0].After(t) && (!ok || s[1].Before(answered)) {
			answered, ok = s[1], true
		}
	}
	return answered, ok
}

func (l *ledger) takeRetries() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.retry
	l.retry = nil
	return out
}

func (l *ledger) snapshot() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]event, 0, len(l.accepted))
	for e := range l.accepted {
		out = append(out, e)
	}
	return out
}

// traffic posts batches of new events for every tenant, one request at a
// time per tenant with a short pause, until ctx ends.
func traffic(ctx context.Context, c *client, l *ledger, tenants []string, batch int, pause time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, tn := range tenants {
		wg.Go(func() {
			var next int64
			for ctx.Err() == nil {
				evs := make([]event, batch)
				for i := range evs {
					next++
					evs[i] = event{tenant: tn, product: fmt.Sprintf("%s-p%06d", tn, next), version: next}
				}
				r := c.post(ctx, tn, evs)
				if ctx.Err() != nil && r.status == 0 {
					// Cancelled by the test, not failed by ingest: retry later.
					l.mu.Lock()
					l.retry = append(l.retry, evs...)
					l.mu.Unlock()
					return
				}
				l.record(r)
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	return &wg
}
