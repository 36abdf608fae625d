package b2b_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// A partner's declared request rate is never exceeded, whichever of
// several sink replicas sends the requests: the partner counts at most
// that many requests in any second of its clock, and every event arrives.
func TestPartnerRequestRate(t *testing.T) {
	t.Parallel()
	const (
		perSec   = 10
		replicas = 2
		events   = 24 // per replica, one event a request
	)
	e := setup(t)
	var (
		mu        sync.Mutex
		perSecond = map[int64]int{}
		total     int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perSecond[time.Now().Unix()]++
		total++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: srv.URL})
	if _, err := e.reg.SetMaxEvents(ctx(t), "acme", p.Name, 1); err != nil {
		t.Fatal(err)
	}
	got, err := e.reg.SetRequestRate(ctx(t), "acme", p.Name, perSec)
	if err != nil || got.RequestsPerSec != perSec {
		t.Fatalf("SetRequestRate = %+v, %v", got.RequestsPerSec, err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for r := range replicas {
		s := e.sink(t, p.Name, b2b.Config{Clock: time.Now})
		batch := make([]sink.Record, events)
		for i := range batch {
			batch[i] = sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("r%d-p%d", r, i), 1))[0]
		}
		wg.Go(func() { mustApply(t, s, batch) })
	}
	wg.Wait()
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if total != replicas*events {
		t.Fatalf("the partner received %d requests, want %d", total, replicas*events)
	}
	for sec, n := range perSecond {
		if n > perSec {
			t.Errorf("second %d: %d requests, the partner's limit is %d", sec, n, perSec)
		}
	}
	if minimum := time.Duration(replicas*events-1) * time.Second / perSec; took < minimum*9/10 {
		t.Errorf("%d requests in %v: faster than %d a second allows (%v)", total, took, perSec, minimum)
	}
	for _, bad := range []int{-1, b2b.RequestsPerSecMax + 1} {
		if _, err := e.reg.SetRequestRate(ctx(t), "acme", p.Name, bad); !errors.Is(err, b2b.ErrInvalidPartner) {
			t.Errorf("SetRequestRate(%d) = %v; want ErrInvalidPartner", bad, err)
		}
	}
}
