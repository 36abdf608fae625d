package outage_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// tcpProxy forwards loopback connections to a target. Down takes the
// target "down" as a client sees it: the listener closes (new connections
// are refused) and every proxied connection is cut. Up listens again on
// the same address.
type tcpProxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	down  bool
	wg    sync.WaitGroup
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.serve(ln) })
	t.Cleanup(func() {
		p.Down()
		p.wg.Wait()
	})
	return p
}

// Addr is where clients connect.
func (p *tcpProxy) Addr() string { return p.addr }

func (p *tcpProxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// track registers c; false (and c closed) when the proxy went down.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) pipe(client net.Conn) {
	if !p.track(client) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(server) {
		_ = client.Close()
		return
	}
	var both sync.WaitGroup
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One direction ended: cut both, as a dying server would.
		_ = dst.Close()
		_ = src.Close()
	}
	both.Go(func() { cp(server, client) })
	both.Go(func() { cp(client, server) })
	both.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// Down closes the listener and every proxied connection.
func (p *tcpProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return
	}
	p.down = true
	_ = p.ln.Close()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as from a killed server
		}
		_ = c.Close()
	}
	clear(p.conns)
}

// Up listens again on the same address.
func (p *tcpProxy) Up() {
	p.t.Helper()
	testenv.Eventually(p.t, 30*time.Second, "the proxy listening again on "+p.addr, func() error {
		ln, err := net.Listen("tcp", p.addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		if err != nil {
			p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
		}
		p.mu.Lock()
		p.ln, p.down = ln, false
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(ln) })
		return nil
	})
}
