package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Ports FreePort hands out lie below the kernel's ephemeral range, where
// a port the kernel gives an outgoing connection (to PostgreSQL, NATS) or
// a listener on port 0 is never one of them, so a port FreePort returned
// stays free until the process it is meant for binds it, unless another
// test process drew the same one. They skip 25000-29999, where
// scripts/dev-services.sh starts its private servers
// (TestFreePortSkipsPrivateServicesPorts).
var freePortRanges = [][2]int{{20000, 25000}, {30000, 0}} // 0: up to the ephemeral range

// ephemeralLowDefault is Linux's default start of the ephemeral range,
// used when /proc does not say.
const ephemeralLowDefault = 32768

var freePorts struct {
	sync.Mutex
	given map[int]bool // ports this process handed out
}

// freePortsMin is the fewest ports the ranges must hold below the
// ephemeral range for FreePort to draw from them.
const freePortsMin = 1000

// FreePort returns a loopback TCP port nothing listens on right now, for
// a process the test starts to listen on. From freePortRanges it never
// returns the same port twice in one test binary. Where the ephemeral
// range leaves fewer than freePortsMin of them below it (portRanges is
// empty), it returns one the kernel picks, as a port-0 listener gets.
func FreePort(t testing.TB) int {
	t.Helper()
	ranges, n := portRanges(ephemeralLow())
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.given == nil {
		freePorts.given = map[int]bool{}
	}
	for try := 0; n > 0 && try < 1000; try++ {
		port := nth(ranges, rand.IntN(n))
		if freePorts.given[port] || !bindable(port) {
			continue
		}
		freePorts.given[port] = true
		return port
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free loopback port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// portRanges returns freePortRanges cut at the ephemeral range's start
// low, without the empty ones, and how many ports they hold; none when
// that is fewer than freePortsMin.
func portRanges(low int) (ranges [][2]int, n int) {
	for _, r := range freePortRanges {
		hi := r[1]
		if hi == 0 || hi > low {
			hi = low
		}
		if r[0] < hi {
			ranges, n = append(ranges, [2]int{r[0], hi}), n+hi-r[0]
		}
	}
	if n < freePortsMin {
		return nil, 0
	}
	return ranges, n
}

// nth returns the i-th port of ranges.
func nth(ranges [][2]int, i int) int {
	for _, r := range ranges {
		if i < r[1]-r[0] {
			return r[0] + i
		}
		i -= r[1] - r[0]
	}
	panic("testenv: port index out of range")
}

func bindable(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range, read
// once.
var ephemeralLow = sync.OnceValue(func() int {
	var lo, hi int
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		_, err = fmt.Sscan(string(b), &lo, &hi)
	}
	if err != nil || lo <= 0 {
		return ephemeralLowDefault
	}
	return lo
})
