// Package demo drives `fairway demo`: a noisy tenant uploads a large CSV
// catalog while many small tenants publish a few events per second each,
// all over the real ingest HTTP API, and a live view shows what every
// tenant gets. It is a client only; cmd/fairway wires the servers.
package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config sets up a demo run. Zero values take defaults.
type Config struct {
	BaseURL      string        // ingest base URL (required)
	Client       *http.Client  // default: 30 s timeout
	Out          io.Writer     // live view and summary (required)
	Duration     time.Duration // the longest run; 0: no limit (Run says when it stops)
	NoisyRows    int           // default 200,000
	SmallTenants int           // default 12
	SmallRate    float64       // events/s per small tenant, default 5
	// Tokens returns a bearer token for a tenant, creating it if needed.
	Tokens func(ctx context.Context, tenant string) (string, error)
	// Refresh is the live view period, default 500 ms.
	Refresh time.Duration
	// Tracker sees what the sinks applied; Dests are the destinations every
	// tenant's events go to, in display order. Without a Tracker the demo
	// shows ingest only.
	Tracker *Tracker
	Dests   []string
	// DeadLetters counts the dead-letter stream, for the summary. Optional.
	DeadLetters func(ctx context.Context) (uint64, error)
	// Footer is printed under the live view (e.g. where logs go).
	Footer string
}

func (c Config) withDefaults() Config {
	c.NoisyRows = cmp.Or(c.NoisyRows, 200_000)
	c.SmallTenants = cmp.Or(c.SmallTenants, 12)
	c.SmallRate = cmp.Or(c.SmallRate, 5)
	c.Refresh = cmp.Or(c.Refresh, 500*time.Millisecond)
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 30 * time.Second}
	}
	return c
}

// tenantStats is what the view shows per tenant.
type tenantStats struct {
	mu        sync.Mutex
	name      string
	sent      int
	accepted  int
	errors    int
	latencies []time.Duration
	// noisy tenant only
	importTotal, importDone int64
	importStatus            string
}

func (s *tenantStats) record(d time.Duration, accepted, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent += accepted + failed
	s.accepted += accepted
	s.errors += failed
	s.latencies = append(s.latencies, d)
}

func (s *tenantStats) percentiles() (p50, p99 time.Duration, n int) {
	s.mu.Lock()
	l := slices.Clone(s.latencies)
	s.mu.Unlock()
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	return l[len(l)*50/100], l[min(len(l)-1, len(l)*99/100)], len(l)
}

// Run runs the demo and prints a summary. The load runs until the noisy
// tenant's import is stored and every destination applied it; then Run
// waits, up to settleMax, until every destination applied every event
// stored. Duration, when set, bounds the whole run: the load and the wait
// stop when it passes, and the summary says what was not applied yet. ctx
// ending (Ctrl-C) stops at once, without the wait.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if cfg.BaseURL == "" || cfg.Out == nil || cfg.Tokens == nil {
		return errors.New("demo: BaseURL, Out and Tokens are required")
	}
	parent := ctx
	var stop context.CancelFunc
	if cfg.Duration > 0 {
		ctx, stop = context.WithTimeout(ctx, cfg.Duration)
	} else {
		ctx, stop = context.WithCancel(ctx)
	}
	defer stop()
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()

	noisy := &tenantStats{name: "noisy", importTotal: int64(cfg.NoisyRows), importStatus: "uploading"}
	small := make([]*tenantStats, cfg.SmallTenants)
	tokens := map[string]string{}
	for i := range small {
		small[i] = &tenantStats{name: fmt.Sprintf("small-%02d", i+1)}
	}
	all := append([]*tenantStats{noisy}, small...)
	for _, s := range all {
		tok, err := cfg.Tokens(ctx, s.name)
		if err != nil {
			return fmt.Errorf("demo: token for %s: %w", s.name, err)
		}
		tokens[s.name] = tok
	}

	start := time.Now()
	var wg sync.WaitGroup
	importDone := make(chan struct{})
	wg.Go(func() {
		defer close(importDone)
		runImport(load, cfg, tokens[noisy.name], noisy)
	})
	for _, s := range small {
		wg.Go(func() { runSmall(load, cfg, tokens[s.name], s) })
	}
	// The small tenants run on while the import is stored and until every
	// destination applied it: that is what the demo shows.
	go func() {
		select {
		case <-importDone:
		case <-load.Done():
			return
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for !caughtUp(cfg, noisy) {
			select {
			case <-load.Done():
				return
			case <-tick.C:
			}
		}
		stopLoad()
	}()

	v := newView(cfg)
	tick := time.NewTicker(cfg.Refresh)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-load.Done():
			done = true
		case <-tick.C:
			v.draw(time.Since(start), noisy, small)
		}
	}
	wg.Wait()
	// The load has stopped; events stored just before may still be on
	// their way (a sink holds a caught-up tenant's last events for a
	// moment). Wait for them, unless the user interrupted or Duration
	// passed.
	settled := waitSettled(ctx, cfg, all, settleMax, func() { v.draw(time.Since(start), noisy, small) })
	v.draw(time.Since(start), noisy, small)
	var why string
	switch {
	case parent.Err() != nil:
		why = "interrupted"
	case settled:
		why = "every destination applied every event stored"
	case ctx.Err() != nil:
		why = fmt.Sprintf("--duration %s passed", cfg.Duration)
	default:
		why = fmt.Sprintf("not everything was applied %s after the load stopped", settleMax)
	}
	summary(context.WithoutCancel(ctx), cfg, time.Since(start), why, noisy, small)
	return nil
}

// settleMax bounds how long Run waits, once the load stopped, for every
// destination to apply what was stored before it prints the summary.
const settleMax = 10 * time.Second

// stored is how many of the tenant's events were stored (for the noisy
// tenant, the import's rows stored so far).
func (s *tenantStats) stored() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.accepted)
}

// pending is, per destination, how many stored events it has not applied
// yet (only destinations with some).
func pending(cfg Config, tenants []*tenantStats) map[string]int64 {
	out := map[string]int64{}
	if cfg.Tracker == nil {
		return out
	}
	for _, s := range tenants {
		want := s.stored()
		for _, d := range cfg.Dests {
			if got := cfg.Tracker.Applied(s.name, d); got < want {
				out[d] += want - got
			}
		}
	}
	return out
}

// waitSettled waits until every destination applied every event stored
// by tenants, ctx ends, or max passes, calling draw now and then. It
// reports whether everything was applied.
func waitSettled(ctx context.Context, cfg Config, tenants []*tenantStats, max time.Duration, draw func()) bool {
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for len(pending(cfg, tenants)) > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
		if time.Since(last) >= cfg.Refresh {
			draw()
			last = time.Now()
		}
	}
	return true
}

// caughtUp reports whether every destination applied all of the noisy
// tenant's stored rows.
func caughtUp(cfg Config, noisy *tenantStats) bool {
	return len(pending(cfg, []*tenantStats{noisy})) == 0
}

// runSmall publishes one event at a time at cfg.SmallRate and records the
// latency of each acknowledged request.
func runSmall(ctx context.Context, cfg Config, token string, s *tenantStats) {
	period := time.Duration(float64(time.Second) / cfg.SmallRate)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for v := int64(1); ; v++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		body := fmt.Sprintf(`{"product_id":"sku-%d","version":%d,"op":"upsert","payload":{"price":%d}}`+"\n", v%50, v, v)
		t0 := time.Now()
		res, err := post(ctx, cfg, "/v1/tenants/"+s.name+"/events", token, "application/x-ndjson", strings.NewReader(body))
		if ctx.Err() != nil {
			return
		}
		if err != nil || res.Accepted != 1 {
			s.record(time.Since(t0), 0, 1)
			continue
		}
		s.record(time.Since(t0), 1, 0)
	}
}

type eventsResponse struct {
	Accepted int `json:"accepted"`
}

func post(ctx context.Context, cfg Config, path, token, ctype string, body io.Reader) (eventsResponse, error) {
	var out eventsResponse
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.BaseURL+path, body)
	if err != nil {
		return out, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", ctype)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if resp.StatusCode >= 300 {
		return out, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return out, json.Unmarshal(b, &out)
}

// runImport streams a generated CSV catalog to the imports endpoint (the
// file is never built in memory) and polls the job until it finishes.
func runImport(ctx context.Context, cfg Config, token string, s *tenantStats) {
	pr, pw := io.Pipe()
	go func() {
		w := &errWriter{w: pw}
		fmt.Fprintln(w, "product_id,version,op,name,price,category")
		for i := 1; i <= cfg.NoisyRows && w.err == nil; i++ {
			fmt.Fprintf(w, "item-%d,1,upsert,Product %d,%d.%02d,cat-%d\n", i, i, i%500, i%100, i%40)
		}
		_ = pw.CloseWithError(w.err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.BaseURL+"/v1/tenants/"+s.name+"/imports", pr)
	if err != nil {
		s.setImport("failed: "+err.Error(), 0)
		return
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/csv")
	client := *cfg.Client
	client.Timeout = 0 // a large upload; ctx bounds it
	resp, err := client.Do(req)
	if err != nil {
		s.setImport("failed: "+err.Error(), 0)
		return
	}
	var acc struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}
	err = json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	if err != nil || acc.URL == "" {
		s.setImport(fmt.Sprintf("failed: upload answered %s", resp.Status), 0)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.BaseURL+acc.URL, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := cfg.Client.Do(req)
		if err != nil {
			continue
		}
		var job struct {
			Status    string `json:"status"`
			RowsTotal int64  `json:"rows_total"`
			RowsOK    int64  `json:"rows_ok"`
		}
		err = json.NewDecoder(resp.Body).Decode(&job)
		resp.Body.Close()
		if err != nil {
			continue
		}
		s.setImport(job.Status, job.RowsTotal)
		if job.Status != "queued" && job.Status != "running" {
			return
		}
	}
}

func (s *tenantStats) setImport(status string, done int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.importStatus, s.importDone = status, done
	s.accepted = int(done)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
