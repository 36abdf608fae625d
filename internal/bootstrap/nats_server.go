package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSVersionMin is the oldest nats-server fairway works with. The
// dispatcher and the sinks read PRODUCTS with batched direct gets
// (internal/work.Reader: "batch", "multi_last" and "start_time" in
// $JS.API.DIRECT.GET, answered by a 204 end-of-batch message carrying
// Nats-Num-Pending), which nats-server 2.11.0 introduced. An older server
// answers such a request with a single message and no end of batch, so
// every read would time out.
const NATSVersionMin = "2.11.0"

// natsServerDoc is where an operator reads which server to run.
const natsServerDoc = "docs/operating.md, \"A NATS server\""

// CheckNATSServer checks that the server nc is connected to is
// NATSVersionMin or newer and has JetStream for nc's account. A server
// that refuses the JetStream request (a permissions violation) fails it
// at once, with the server's reason.
func CheckNATSServer(ctx context.Context, nc *nats.Conn) error {
	if err := checkNATSVersion(nc); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return UntilRefused(ctx, nc, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
			return fmt.Errorf("%w: NATS server at %s: %v; fairway needs nats-server %s or newer with JetStream (%s)",
				ErrNoJetStream, nc.ConnectedUrlRedacted(), err, NATSVersionMin, natsServerDoc)
		}
		return fmt.Errorf("JetStream account info from %s: %w", nc.ConnectedUrlRedacted(), err)
	})
}

// checkNATSVersion compares the connected server's version with
// NATSVersionMin.
func checkNATSVersion(nc *nats.Conn) error {
	have := nc.ConnectedServerVersion()
	if versionAtLeast(have, NATSVersionMin) {
		return nil
	}
	return fmt.Errorf("%w: NATS server at %s runs nats-server %s; fairway needs nats-server %s or newer with JetStream (%s)",
		ErrNATSTooOld, nc.ConnectedUrlRedacted(), have, NATSVersionMin, natsServerDoc)
}

// versionAtLeast reports whether version (major.minor.patch, perhaps with
// a suffix such as -RC.1 that is ignored) is min or newer. A version that
// does not parse is not.
func versionAtLeast(version, min string) bool {
	have, ok := versionNumbers(version)
	want, _ := versionNumbers(min)
	if !ok {
		return false
	}
	for i := range have {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

func versionNumbers(v string) ([3]int, bool) {
	var n [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return n, false
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return n, false
		}
		n[i] = x
	}
	return n, true
}
