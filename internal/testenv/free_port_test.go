package testenv

import (
	"cmp"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// FreePort's ports lie below the kernel's ephemeral range, where no
// outgoing connection or port-0 listener can take one before the process
// it is meant for binds it, outside the ports the private services use,
// and no two are the same.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	ranges, n := portRanges(low)
	if n == 0 { // FreePort falls back to a port the kernel picks
		if p := FreePort(t); !bindable(p) {
			t.Fatalf("FreePort returned %d, which does not bind", p)
		}
		t.Logf("the ephemeral range starts at %d: FreePort picks ports in it", low)
		return
	}
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if !slices.ContainsFunc(ranges, func(r [2]int) bool { return p >= r[0] && p < r[1] }) {
			t.Fatalf("FreePort returned %d, want a port in %v (below the ephemeral range at %d)", p, ranges, low)
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

// The first ports scripts/dev-services.sh tries for its private servers
// lie in the gap FreePort skips, with room above each for the next ones it
// tries when a port is taken: a test's port and a private server's never
// collide.
func TestFreePortSkipsPrivateServicesPorts(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../scripts/dev-services.sh")
	if err != nil {
		t.Fatal(err)
	}
	firsts := regexp.MustCompile(`(?m)^([A-Z_]+_FIRST)=(\d+)$`).FindAllStringSubmatch(string(script), -1)
	if len(firsts) == 0 {
		t.Fatal("scripts/dev-services.sh sets no *_FIRST port")
	}
	const room = 100 // ports above the first that the script may try
	for _, m := range firsts {
		first, _ := strconv.Atoi(m[2])
		for _, r := range freePortRanges {
			if end := cmp.Or(r[1], 65536); first+room > r[0] && first < end {
				t.Errorf("dev-services.sh's %s=%d (and the %d ports above it) overlaps FreePort's range %d-%d", m[1], first, room, r[0], end-1)
			}
		}
	}
}
