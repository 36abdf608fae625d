package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Ports FreePort hands out lie below the kernel's ephemeral range, from
// freePortLow up: a port the kernel gives an outgoing connection (to
// PostgreSQL, NATS) or a listener on port 0 is never one of them, so a
// port FreePort returned stays free until the process it is meant for
// binds it, unless another test process drew the same one.
const (
	freePortLow       = 20000
	ephemeralLowStart = 32768 // Linux's default: used when /proc does not say, or leaves no room below
)

var freePorts struct {
	sync.Mutex
	given map[int]bool // ports this process handed out
}

// FreePort returns a loopback TCP port nothing listens on right now, for
// a process the test starts to listen on. It never returns the same port
// twice in one test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	high := ephemeralLow()
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.given == nil {
		freePorts.given = map[int]bool{}
	}
	for range 1000 {
		port := freePortLow + rand.IntN(high-freePortLow)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		ln.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatalf("no free loopback port in %d-%d", freePortLow, high-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	var lo, hi int
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		_, err = fmt.Sscan(string(b), &lo, &hi)
	}
	if err != nil || lo <= freePortLow+1000 {
		return ephemeralLowStart
	}
	return lo
}
