package dashboard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestMetricsURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:9102":                      "http://127.0.0.1:9102/metrics",
		" http://sinks-1:9102 ":               "http://sinks-1:9102/metrics",
		"http://sinks-1:9102/":                "http://sinks-1:9102/metrics",
		"https://sinks.example.com/x/metrics": "https://sinks.example.com/x/metrics",
		"[::1]:9102":                          "http://[::1]:9102/metrics",
	} {
		if got, err := MetricsURL(in); err != nil || got != want {
			t.Errorf("MetricsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ftp://x/metrics", "http://", "http://:9102", "http://u:p@x:9102", "http://x:9102:1"} {
		if got, err := MetricsURL(in); !errors.Is(err, ErrConfig) {
			t.Errorf("MetricsURL(%q) = %q, %v; want ErrConfig", in, got, err)
		}
	}
}

// sinksEndpoint serves a registry's /metrics as a sinks process does; with
// no registry set it answers 503.
type sinksEndpoint struct {
	reg atomic.Pointer[prometheus.Registry]
	srv *httptest.Server
}

func newSinksEndpoint(t *testing.T, reg *prometheus.Registry) *sinksEndpoint {
	t.Helper()
	e := &sinksEndpoint{}
	e.reg.Store(reg)
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg := e.reg.Load()
		if reg == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// TestSamplerScrapesSinks reads three sinks processes over HTTP, as
// `fairway serve --sink-metrics` does, and one address where nothing
// listens: the replicas of a destination add up (rates and the latency
// histogram), a process that answers only later and one that restarts
// count what they applied after, never their whole counter, and the state
// of each source says which one fails and why.
func TestSamplerScrapesSinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	regA, appliedA, e2eA := sinkMetrics(t)
	regB, appliedB, e2eB := sinkMetrics(t)
	regLate, appliedLate, _ := sinkMetrics(t)
	a, b := newSinksEndpoint(t, regA), newSinksEndpoint(t, regB)
	late := newSinksEndpoint(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()

	var sources []MetricsSource
	for _, u := range []string{a.srv.URL, b.srv.URL + "/metrics", late.srv.URL, down} {
		src, err := Scrape(u, nil)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, src)
	}
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := NewSampler(&SamplerConfig{Interval: 2 * time.Second, Window: time.Minute, Summary: 2 * time.Second,
		Timeout: 2 * time.Second, Now: clock.now}, sources...)
	if err != nil {
		t.Fatal(err)
	}
	appliedA.WithLabelValues("postgres").Add(500) // before the sampler: no throughput
	appliedLate.WithLabelValues("postgres").Add(1000)
	step := func(nA, nB, nLate int) DestStats {
		t.Helper()
		appliedA.WithLabelValues("postgres").Add(float64(nA))
		for range nA {
			e2eA.WithLabelValues("postgres").Observe(0.1)
		}
		appliedB.WithLabelValues("postgres").Add(float64(nB))
		for range nB {
			e2eB.WithLabelValues("postgres").Observe(1)
		}
		appliedLate.WithLabelValues("postgres").Add(float64(nLate))
		err := s.Sample(ctx)
		if err == nil || !strings.Contains(err.Error(), down) {
			t.Errorf("sample error %v, want one naming %s", err, down)
		}
		clock.advance(2 * time.Second)
		for _, st := range s.DestStats() {
			if st.Dest == "postgres" {
				return st
			}
		}
		return DestStats{}
	}
	step(0, 0, 0)
	pg := step(10, 30, 0)
	// 10 events at 0.1 s and 30 at 1 s in 2 s: 20 events/s, and the p95
	// lies in the bucket of 1 s, (0.488, 1.22], which neither replica
	// alone would give for the 10.
	if pg.EventsPerSecond != 20 || pg.P95Seconds == nil || *pg.P95Seconds <= 0.488 || *pg.P95Seconds > 1.221 {
		t.Errorf("two replicas: %v events/s, p95 %v; want 20 and within (0.488, 1.22]", pg.EventsPerSecond, pg.P95Seconds)
	}
	states := s.Sources()
	if len(states) != 4 || states[0].Error != "" || states[0].LastOK.IsZero() || states[1].Source != b.srv.URL+"/metrics" ||
		!strings.Contains(states[2].Error, "503") || !strings.Contains(states[3].Error, "refused") || !states[3].LastOK.IsZero() {
		t.Errorf("source states %+v", states)
	}

	late.reg.Store(regLate) // answers from now on, its counter at 1000
	if pg := step(4, 0, 0); pg.EventsPerSecond != 2 {
		t.Errorf("a source's first answer counted %v events/s, want 2 (its counter is the base)", pg.EventsPerSecond)
	}
	if pg := step(0, 0, 6); pg.EventsPerSecond != 3 {
		t.Errorf("after its first answer: %v events/s, want 3", pg.EventsPerSecond)
	}
	// A restarts: a fresh registry whose counter is below the last one.
	regA2, appliedA2, _ := sinkMetrics(t)
	appliedA2.WithLabelValues("postgres").Add(8)
	a.reg.Store(regA2)
	if pg := step(0, 0, 0); pg.EventsPerSecond != 4 {
		t.Errorf("after a restart: %v events/s, want 4 (the new counter from zero)", pg.EventsPerSecond)
	}
	if s := s.Sources(); s[2].Error != "" {
		t.Errorf("the late source still fails: %+v", s[2])
	}
}
