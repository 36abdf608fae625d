package bootstrap

import "errors"

// Errors of the NATS start-up checks; the messages wrapping them name the
// server, its version and what fairway needs.
var (
	// ErrNATSTooOld: the server is older than NATSVersionMin.
	ErrNATSTooOld = errors.New("nats-server too old")
	// ErrNoJetStream: the server, or the client's account, runs without
	// JetStream.
	ErrNoJetStream = errors.New("JetStream not enabled")
)
