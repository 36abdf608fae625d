package testenv

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SyncDisk writes out what a benchmark's bulk publish left dirty in the
// page cache (hundreds of MB of the server's files for a million events)
// before its clock starts. Else the kernel writes it back about 30 s after
// the publish (vm.dirty_expire_centisecs), into whatever is measured then:
// a write-back raises the latencies of the window it falls in several
// times over, with or without what the benchmark compares.
func SyncDisk() { syscall.Sync() }

// EnvInt reads a benchmark knob: the positive integer in the environment
// variable name (underscores allowed: 1_000_000), or def when it is unset.
func EnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// EnvDuration reads a benchmark knob: the positive duration in the
// environment variable name, or def when it is unset.
func EnvDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// Percentile is the nearest-rank percentile p (0..100) of sorted ds, in
// milliseconds; 0 for none.
func Percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds))*p/100+0.5) - 1
	i = max(0, min(len(ds)-1, i))
	return float64(ds[i].Microseconds()) / 1000
}

// WaitUntil polls cond every 10 ms until it holds (true), or until deadline
// passes or ctx ends (false): for benchmarks, which decide themselves what
// a wait that ran out means. Tests wait with Eventually.
func WaitUntil(ctx context.Context, deadline time.Time, cond func() bool) bool {
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
