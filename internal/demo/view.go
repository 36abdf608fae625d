package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// view draws the live table: redrawn in place on a terminal, a plain line
// every few seconds otherwise.
type view struct {
	out      io.Writer
	tty      bool
	lines    int
	lastLine time.Time
}

func newView(out io.Writer) *view {
	v := &view{out: out}
	if f, ok := out.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			v.tty = true
		}
	}
	return v
}

func (v *view) draw(elapsed time.Duration, noisy *tenantStats, small []*tenantStats) {
	noisy.mu.Lock()
	done, total, status := noisy.importDone, noisy.importTotal, noisy.importStatus
	noisy.mu.Unlock()
	if !v.tty {
		if time.Since(v.lastLine) < 5*time.Second {
			return
		}
		v.lastLine = time.Now()
		var worst time.Duration
		for _, s := range small {
			_, p99, _ := s.percentiles()
			worst = max(worst, p99)
		}
		fmt.Fprintf(v.out, "%5.0fs  noisy import %s %d/%d rows  small tenants worst p99 %s\n",
			elapsed.Seconds(), status, done, total, worst.Round(100*time.Microsecond))
		return
	}
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	fmt.Fprintf(&b, "\x1b[2K fairway demo — %s elapsed (Ctrl-C stops and prints a summary)\n", elapsed.Round(time.Second))
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	fmt.Fprintf(&b, "\x1b[2K noisy     %s %7d/%d rows  %8.0f rows/s  %s\n", bar(done, total, 30), done, total, rate, status)
	fmt.Fprintf(&b, "\x1b[2K %-9s %8s %8s %10s %10s\n", "tenant", "sent", "errors", "p50", "p99")
	for _, s := range small {
		p50, p99, _ := s.percentiles()
		s.mu.Lock()
		sent, errs := s.sent, s.errors
		s.mu.Unlock()
		fmt.Fprintf(&b, "\x1b[2K %-9s %8d %8d %10s %10s\n", s.name, sent, errs, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
	}
	v.lines = 3 + len(small)
	fmt.Fprint(v.out, b.String())
}

func bar(done, total int64, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(" ", width) + "]"
	}
	n := int(min(done, total) * int64(width) / total)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func summary(out io.Writer, elapsed time.Duration, noisy *tenantStats, small []*tenantStats) {
	noisy.mu.Lock()
	fmt.Fprintf(out, "\nsummary after %s\n  noisy: import %s, %d of %d rows stored\n", elapsed.Round(time.Second), noisy.importStatus, noisy.importDone, noisy.importTotal)
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
	fmt.Fprintf(out, "  small tenants (%d): %d events stored, %d errors, ingest latency p50 %s p99 %s over %d requests\n",
		len(small), sent-errs, errs, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), n)
	fmt.Fprintln(out, "  (dispatch and sinks join this view as they land: see the open issues)")
}
