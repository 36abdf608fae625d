package work

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults for StreamConfig.
const (
	StreamMaxAgeDefault     = 7 * 24 * time.Hour
	StreamDuplicatesDefault = 10 * time.Minute
)

// StreamConfig configures the WORK stream.
type StreamConfig struct {
	Name       string        // default WORK
	Replicas   int           // default 1 (3 in a cluster)
	MaxAge     time.Duration // default 7 days, as PRODUCTS
	Duplicates time.Duration // default 10 minutes
}

// WithDefaults fills zero fields.
func (c StreamConfig) WithDefaults() StreamConfig {
	c.Name = cmp.Or(c.Name, StreamName)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.MaxAge = cmp.Or(c.MaxAge, StreamMaxAgeDefault)
	c.Duplicates = cmp.Or(c.Duplicates, StreamDuplicatesDefault)
	return c
}

// EnsureStream creates or updates the WORK stream.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	s, err := events.EnsureJetStream(ctx, js, jetstream.StreamConfig{
		Name:        c.Name,
		Description: "fairway work items: ranges of PRODUCTS sequences per tenant and destination",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.MaxAge,
		Duplicates:  c.Duplicates,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
	}
	return s, nil
}
