package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectNATS connects to url and keeps reconnecting for ever, logging
// disconnects and reconnects. The first connection attempt is retried until
// ctx ends, so a service can start before NATS does.
func ConnectNATS(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.Timeout(5 * time.Second),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), err)
	}
	// RetryOnFailedConnect returns at once; wait for the first connection.
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nc, nil
}

// DrainNATS drains nc and waits until it is closed, at most timeout:
// subscriptions stop, messages already delivered to them are handled, and
// what the connection buffered (acks, publishes) is flushed. nc.Drain alone
// returns at once and drains in the background, so a Close right after it
// (a deferred one, say) cut the drain short.
func DrainNATS(nc *nats.Conn, timeout time.Duration, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "name", nc.Opts.Name, "err", err)
		nc.Close()
		return
	}
	deadline := time.Now().Add(timeout)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			log.Warn("nats drain did not finish; closing", "name", nc.Opts.Name, "after", timeout)
			nc.Close()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
