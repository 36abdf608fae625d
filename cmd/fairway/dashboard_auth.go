package main

import (
	"net"

	"github.com/fairwayhq/fairway/internal/bearer"
)

// dashboardTokens decides whether the dashboard served on ln asks for a
// token: always when ln listens beyond loopback (a wildcard address
// included), and on loopback when require is set, for a proxy on the same
// host that forwards other people's requests. It returns what to set as
// dashboard.Deps.Tokens (nil: open) and how to say so at start.
func dashboardTokens(ln net.Listener, require bool, tokens bearer.Verifier) (bearer.Verifier, string) {
	const asks = "an admin token shows every tenant, a tenant token its own rows; the page asks for it"
	addr, _ := ln.Addr().(*net.TCPAddr)
	switch {
	case addr == nil || !addr.IP.IsLoopback():
		return tokens, "asks for a token, as it listens beyond loopback: " + asks
	case require:
		return tokens, "asks for a token (--require-token): " + asks
	}
	return nil, "is open without a token to anyone on this host, as it listens on loopback only"
}
