package dispatch_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/internal/work"
)

// stallProbe looks, while a benchmark drains, for which part of the
// machine stalls: every probeEvery, each probe in a goroutine of its own
// times one small operation and keeps those slower than probeSlow, with
// when they began (since t0). FAIRWAY_BENCH_PROBE=1 turns it on in
// BenchmarkNoisyNeighbor; its log line is then read next to the slowest
// small-tenant events'.
//
//   - timer: how late a 1 ms sleep of this process wakes up (its
//     scheduler and garbage collector);
//   - nats: a round trip to the server on a connection of its own (the
//     server's client handling, nothing of the stream);
//   - stream: a direct get of one small tenant's last event from PRODUCTS
//     (the stream's read path);
//   - work: a publish to the WORK stream on a subject no sink reads
//     (work.probe.p: the stream's write path, as the dispatcher's work
//     items take it);
//   - postgres: SELECT 1 on a connection of its own.
type stallProbe struct {
	t0   time.Time
	mu   sync.Mutex
	slow map[string][]probeSample
	runs map[string]int
	wg   sync.WaitGroup
	stop context.CancelFunc
}

type probeSample struct{ at, took time.Duration }

const (
	probeEvery = 5 * time.Millisecond
	probeSlow  = 20 * time.Millisecond
)

func startProbe(b *testing.B, ctx context.Context, e *benchEnv, t0 time.Time, tenant string) *stallProbe {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	p := &stallProbe{t0: t0, slow: map[string][]probeSample{}, runs: map[string]int{}, stop: cancel}
	nc := e.conn("probe")
	reader := work.NewReader(e.conn("probe-stream"), "")
	wjs := e.js(e.conn("probe-work"))
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		b.Fatal(err)
	}
	probes := map[string]func() error{
		"timer":  func() error { time.Sleep(time.Millisecond); return nil },
		"nats":   func() error { _, err := nc.RTT(); return err },
		"stream": func() error { _, err := reader.LastSeq(ctx, tenant, ""); return err },
		"work":   func() error { _, err := wjs.Publish(ctx, work.SubjectPrefix+".probe.p", nil); return err },
		"postgres": func() error {
			var one int
			return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
		},
	}
	for name, f := range probes {
		p.wg.Go(func() {
			tick := time.NewTicker(probeEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				start := time.Now()
				if err := f(); err != nil && ctx.Err() == nil {
					b.Errorf("probe %s: %v", name, err)
					return
				}
				took := time.Since(start)
				if name == "timer" {
					took -= time.Millisecond
				}
				p.mu.Lock()
				p.runs[name]++
				if took >= probeSlow {
					p.slow[name] = append(p.slow[name], probeSample{at: start.Sub(p.t0), took: took})
				}
				p.mu.Unlock()
			}
		})
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return p
}

// report stops the probes and says, per probe, how many ran and the
// slowest ones with when they began.
func (p *stallProbe) report() string {
	p.stop()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.runs))
	for n := range p.runs {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		s := p.slow[n]
		slices.SortFunc(s, func(a, b probeSample) int { return cmp.Compare(b.took, a.took) })
		fmt.Fprintf(&b, "%s: %d probes, %d ≥ %v", n, p.runs[n], len(s), probeSlow)
		for i, x := range s[:min(len(s), 8)] {
			if i == 0 {
				b.WriteString(":")
			}
			fmt.Fprintf(&b, " +%.2fs %v", x.at.Seconds(), x.took.Round(time.Millisecond))
		}
		b.WriteString("; ")
	}
	return b.String()
}
