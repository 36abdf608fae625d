package testenv

import (
	"slices"
	"testing"
)

// FreePort's ports lie below the kernel's ephemeral range, where no
// outgoing connection or port-0 listener can take one before the process
// it is meant for binds it, outside the ports the private services use,
// and no two are the same.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	if _, n := portRanges(low); n == 0 { // FreePort falls back to a port the kernel picks
		if p := FreePort(t); !bindable(p) {
			t.Fatalf("FreePort returned %d, which does not bind", p)
		}
		t.Logf("the ephemeral range starts at %d: FreePort picks ports in it", low)
		return
	}
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < 20000 || p >= low || (p >= 25000 && p < 30000) {
			t.Fatalf("FreePort returned %d, want a port in 20000-24999 or 30000-%d", p, low-1)
		}
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
	}
}

// The ranges are cut at the ephemeral range's start, whatever it is, and
// dropped when too few ports are left in them.
func TestPortRanges(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		low  int
		want [][2]int
		n    int
	}{
		{32768, [][2]int{{20000, 25000}, {30000, 32768}}, 7768},
		{27000, [][2]int{{20000, 25000}}, 5000},
		{20500, nil, 0},
		{1024, nil, 0},
	} {
		if got, n := portRanges(c.low); !slices.Equal(got, c.want) || n != c.n {
			t.Fatalf("portRanges(%d) = %v, %d; want %v, %d", c.low, got, n, c.want, c.n)
		}
	}
}
