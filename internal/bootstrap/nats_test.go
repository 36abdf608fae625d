package bootstrap_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// DrainNATS returns only when every message already delivered to a
// subscription was handled and the connection is closed.
func TestDrainNATSWaits(t *testing.T) {
	t.Parallel()
	srv, _ := testenv.NATS(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := bootstrap.ConnectNATS(context.Background(), srv.ClientURL(), "drain-test", log)
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	got := make(chan struct{}, 1)
	if _, err := nc.Subscribe("slow", func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
		time.Sleep(20 * time.Millisecond)
		handled.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for range n {
		if err := nc.Publish("slow", nil); err != nil {
			t.Fatal(err)
		}
	}
	<-got // the messages reached the subscription
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	if !nc.IsClosed() {
		t.Error("connection not closed")
	}
	if h := handled.Load(); h != n {
		t.Errorf("%d of %d delivered messages handled when DrainNATS returned", h, n)
	}
}
