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
// scripts/dev-services.sh starts its private servers.
var freePortRanges = [][2]int{{20000, 25000}, {30000, 0}} // 0: up to the ephemeral range

// ephemeralLowDefault is Linux's default start of the ephemeral range,
// used when /proc does not say.
const ephemeralLowDefault = 32768

var freePorts struct {
	sync.Mutex
	given map[int]bool // ports this process handed out
}

// FreePort returns a loopback TCP port nothing listens on right now, for
// a process the test starts to listen on. It never returns the same port
// twice in one test binary. Where the ephemeral range leaves fewer than
// 1000 ports below it, it returns one the kernel picks, as a port-0
// listener gets.
func FreePort(t testing.TB) int {
	t.Helper()
	ranges := portRanges(ephemeralLow())
	n := 0
	for _, r := range ranges {
		n += r[1] - r[0]
	}
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.given == nil {
		freePorts.given = map[int]bool{}
	}
	for try := 0; n >= 1000 && try < 1000; try++ {
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
// low, without the empty ones.
func portRanges(low int) [][2]int {
	var out [][2]int
	for _, r := range freePortRanges {
		hi := r[1]
		if hi == 0 || hi > low {
			hi = low
		}
		if r[0] < hi {
			out = append(out, [2]int{r[0], hi})
		}
	}
	return out
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

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	var lo, hi int
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		_, err = fmt.Sscan(string(b), &lo, &hi)
	}
	if err != nil || lo <= 0 {
		return ephemeralLowDefault
	}
	return lo
}
