package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// view draws the live table: redrawn in place on a terminal, a plain line
// every few seconds otherwise.
type view struct {
	cfg      Config
	out      io.Writer
	tty      bool
	lines    int
	lastLine time.Time
}

func newView(cfg Config) *view {
	v := &view{cfg: cfg, out: cfg.Out}
	if f, ok := cfg.Out.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			v.tty = true
		}
	}
	return v
}

func smallNames(small []*tenantStats) []string {
	out := make([]string, len(small))
	for i, s := range small {
		out[i] = s.name
	}
	return out
}

func (v *view) draw(elapsed time.Duration, noisy *tenantStats, small []*tenantStats) {
	noisy.mu.Lock()
	done, total, status := noisy.importDone, noisy.importTotal, noisy.importStatus
	noisy.mu.Unlock()
	tr := v.cfg.Tracker
	if !v.tty {
		if time.Since(v.lastLine) < 5*time.Second {
			return
		}
		v.lastLine = time.Now()
		line := fmt.Sprintf("%5.0fs  noisy: import %s %d/%d rows stored", elapsed.Seconds(), status, done, total)
		if tr != nil {
			for _, d := range v.cfg.Dests {
				line += fmt.Sprintf(", %s %d", d, tr.Applied(noisy.name, d))
			}
			_, np99, _ := tr.Latency(noisy.name)
			_, sp99, _ := tr.Latency(smallNames(small)...)
			line += fmt.Sprintf("  |  end-to-end p99: noisy %s, small tenants %s", round(np99), round(sp99))
		}
		fmt.Fprintln(v.out, line)
		return
	}
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	n := 0
	line := func(format string, a ...any) {
		fmt.Fprintf(&b, "\x1b[2K"+format+"\n", a...)
		n++
	}
	line(" fairway demo — %s elapsed — stops when every destination applied everything; Ctrl-C stops now", elapsed.Round(time.Second))
	rate := float64(done) / max(elapsed.Seconds(), 0.001)
	line(" noisy import %s %d/%d rows stored (%.0f rows/s) %s", bar(done, total, 24), done, total, rate, status)
	line("")
	head := fmt.Sprintf(" %-9s %8s", "tenant", "stored")
	for _, d := range v.cfg.Dests {
		head += fmt.Sprintf(" %22s", "→ "+d)
	}
	if tr != nil {
		head += fmt.Sprintf(" %9s %9s", "e2e p50", "e2e p99")
	}
	line("%s", head)
	row := func(name string, stored int64) {
		r := fmt.Sprintf(" %-9s %8d", name, stored)
		if tr != nil {
			for _, d := range v.cfg.Dests {
				a := tr.Applied(name, d)
				if name == noisy.name {
					r += fmt.Sprintf(" %s %9d", bar(a, max(stored, 1), 12), a)
				} else {
					r += fmt.Sprintf(" %22d", a)
				}
			}
			p50, p99, _ := tr.Latency(name)
			r += fmt.Sprintf(" %9s %9s", round(p50), round(p99))
		}
		line("%s", r)
	}
	row(noisy.name, done)
	for _, s := range small {
		s.mu.Lock()
		stored := int64(s.accepted)
		s.mu.Unlock()
		row(s.name, stored)
	}
	if v.cfg.Footer != "" {
		line(" %s", v.cfg.Footer)
	}
	v.lines = n
	fmt.Fprint(v.out, b.String())
}

func round(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func bar(done, total int64, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	n := int(min(done, total) * int64(width) / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// summary prints what the run did; why says why it stopped.
func summary(ctx context.Context, cfg Config, elapsed time.Duration, why string, noisy *tenantStats, small []*tenantStats) {
	out := cfg.Out
	noisy.mu.Lock()
	fmt.Fprintf(out, "\nsummary after %s (stopped: %s)\n  noisy: import %s, %d of %d rows stored\n", elapsed.Round(time.Second), why, noisy.importStatus, noisy.importDone, noisy.importTotal)
	noisy.mu.Unlock()
	var all []time.Duration
	sent, errs := 0, 0
	for _, s := range small {
		s.mu.Lock()
		all = append(all, s.latencies...)
		sent += s.sent
		errs += s.errors
		s.mu.Unlock()
	}
	agg := &tenantStats{latencies: all}
	p50, p99, n := agg.percentiles()
	fmt.Fprintf(out, "  small tenants (%d): %d events stored, %d errors; ingest answer p50 %s p99 %s over %d requests\n",
		len(small), sent-errs, errs, round(p50), round(p99), n)
	tr := cfg.Tracker
	if tr == nil {
		return
	}
	fmt.Fprintf(out, "  events applied per destination:\n")
	names := append([]string{noisy.name}, smallNames(small)...)
	w := 0
	for _, d := range cfg.Dests {
		w = max(w, len(d))
	}
	behind := pending(cfg, append([]*tenantStats{noisy}, small...))
	for _, d := range cfg.Dests {
		var parts []string
		var smallSum int64
		for _, name := range names {
			if name == noisy.name {
				parts = append(parts, fmt.Sprintf("noisy %d", tr.Applied(name, d)))
			} else {
				smallSum += tr.Applied(name, d)
			}
		}
		parts = append(parts, fmt.Sprintf("small tenants %d (", smallSum))
		var per []string
		for _, s := range small {
			per = append(per, fmt.Sprintf("%d", tr.Applied(s.name, d)))
		}
		note := ""
		if n := behind[d]; n > 0 {
			note = fmt.Sprintf("; %d stored events not applied yet when the demo stopped", n)
		}
		fmt.Fprintf(out, "    %-*s  %s%s)%s\n", w, d, strings.Join(parts, ", "), strings.Join(per, " "), note)
	}
	np50, np99, nn := tr.Latency(noisy.name)
	sp50, sp99, sn := tr.Latency(smallNames(small)...)
	fmt.Fprintf(out, "  end-to-end latency (stored → applied, recent events, all destinations):\n")
	fmt.Fprintf(out, "    noisy          p50 %-9s p99 %-9s (%d applications)\n", round(np50), round(np99), nn)
	fmt.Fprintf(out, "    small tenants  p50 %-9s p99 %-9s (%d applications)\n", round(sp50), round(sp99), sn)
	if cfg.DeadLetters != nil {
		if dl, err := cfg.DeadLetters(ctx); err == nil {
			fmt.Fprintf(out, "  dead letters: %d\n", dl)
		} else {
			fmt.Fprintf(out, "  dead letters: unknown (%v)\n", err)
		}
	}
}
