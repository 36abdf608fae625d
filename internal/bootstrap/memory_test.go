package bootstrap_test

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/fairwayhq/fairway/internal/bootstrap"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "448MiB": 448 << 20, "1GiB": 1 << 30, "64 KiB": 64 << 10, "10B": 10, "2TiB": 2 << 40} {
		got, err := bootstrap.ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5GiB", "12MB", "lots", "9999999999TiB"} {
		if _, err := bootstrap.ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	b := bootstrap.Bytes(448 << 20)
	if s := b.String(); s != "448MiB" {
		t.Errorf("String() = %q, want 448MiB", s)
	}
}

// A process given a memory limit collects at GC percent 200 unless GOGC
// says otherwise; one without a limit keeps Go's default.
func TestSetMemoryLimitRaisesGCPercent(t *testing.T) {
	// Not parallel: the collector's settings are the whole process's.
	limit0, percent0 := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetMemoryLimit(limit0); debug.SetGCPercent(percent0) })
	percent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }

	t.Setenv("GOGC", "")
	debug.SetMemoryLimit(math.MaxInt64)
	bootstrap.SetMemoryLimit(0)
	if p := percent(); p != 100 {
		t.Fatalf("without a limit: GC percent %d, want 100", p)
	}
	bootstrap.SetMemoryLimit(448 << 20)
	if l := debug.SetMemoryLimit(-1); l != 448<<20 {
		t.Fatalf("memory limit %d, want %d", l, 448<<20)
	}
	if p := percent(); p != 200 {
		t.Fatalf("with a limit: GC percent %d, want 200", p)
	}

	// A limit GOMEMLIMIT set (the flag left at 0) counts too.
	debug.SetGCPercent(100)
	bootstrap.SetMemoryLimit(0)
	if p := percent(); p != 200 {
		t.Fatalf("with GOMEMLIMIT's limit: GC percent %d, want 200", p)
	}

	// GOGC set: the operator's choice stands.
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	bootstrap.SetMemoryLimit(448 << 20)
	if p := percent(); p != 150 {
		t.Fatalf("with GOGC=150: GC percent %d, want 150", p)
	}
}
