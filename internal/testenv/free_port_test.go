package testenv

import "testing"

// FreePort's ports lie below the kernel's ephemeral range, where no
// outgoing connection or port-0 listener can take one before the process
// it is meant for binds it, and no two are the same.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < freePortLow || p >= low {
			t.Fatalf("FreePort returned %d, want a port in %d-%d", p, freePortLow, low-1)
		}
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
	}
}
