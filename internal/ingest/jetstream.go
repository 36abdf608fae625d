package ingest

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/pkg/events"
)

// NewJetStream returns the JetStream context ingest publishes through. Its
// async publishes time out after events.AckTimeoutDefault (the Publisher's
// own ack wait): a publish the server never answers — the stream has no
// quorum, so nobody acks — is otherwise kept pending in the context until
// the connection reconnects. While a cluster lacks quorum those pile up
// (one per event posted), and once they reach the context's window (4,000)
// every later publish stalls and fails even after quorum is back: ingest
// would not recover without a restart.
func NewJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(events.AckTimeoutDefault))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// NewPublisher returns the Publisher ingest stores events with: events
// arrive validated by the request decoder, and a duplicate is checked to
// be the tenant's own (events.WithDuplicateOwnerCheck), so no other
// tenant's message id can swallow an event.
func NewPublisher(js jetstream.JetStream) (*events.Publisher, error) {
	return events.NewPublisher(js, events.WithValidatedEvents(), events.WithDuplicateOwnerCheck())
}
