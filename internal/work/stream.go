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

// The storages WORK may have (StreamConfig.Storage).
const (
	// StorageFile writes every work item to disk, the default: an item
	// survives a restart of a lone server, for the price of the server
	// writing each carried body a second time, after PRODUCTS.
	StorageFile = "file"
	// StorageMemory keeps work items in the servers' memory (replicated in
	// a cluster): an item lives from its publish to its sink's ack and
	// WORK holds about the work window, and an item lost with a server's
	// memory is dispatched again once its lease expires, as an orphan
	// (docs/design.md, "WORK on file, or in memory").
	StorageMemory = "memory"
)

// StreamConfig configures the WORK stream.
type StreamConfig struct {
	Name       string        // default WORK
	Replicas   int           // default 1 (3 in a cluster)
	MaxAge     time.Duration // default 7 days, as PRODUCTS
	Duplicates time.Duration // default 10 minutes
	Storage    string        // StorageFile (default) or StorageMemory
}

// WithDefaults fills zero fields.
func (c StreamConfig) WithDefaults() StreamConfig {
	c.Name = cmp.Or(c.Name, StreamName)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.MaxAge = cmp.Or(c.MaxAge, StreamMaxAgeDefault)
	c.Duplicates = cmp.Or(c.Duplicates, StreamDuplicatesDefault)
	c.Storage = cmp.Or(c.Storage, StorageFile)
	return c
}

// storages maps each storage's name to JetStream's.
var storages = map[string]jetstream.StorageType{StorageMemory: jetstream.MemoryStorage, StorageFile: jetstream.FileStorage}

// StorageType is the JetStream storage of name, one of StorageFile and
// StorageMemory.
func StorageType(name string) (jetstream.StorageType, error) {
	if st, ok := storages[name]; ok {
		return st, nil
	}
	return 0, fmt.Errorf("WORK storage %q: want %s or %s", name, StorageFile, StorageMemory)
}

// EnsureStream creates or updates the WORK stream. JetStream cannot change
// a stream's storage, so a WORK that exists keeps its own whatever
// c.Storage says; the caller compares the stream's (KeptStorage).
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	storage, err := StorageType(c.Storage)
	if err != nil {
		return nil, err
	}
	s, err := events.EnsureJetStreamKeeping(ctx, js, jetstream.StreamConfig{
		Name:        c.Name,
		Description: "fairway work items: ranges of PRODUCTS sequences per tenant and destination",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    c.Replicas,
		MaxAge:      c.MaxAge,
		Duplicates:  c.Duplicates,
		Discard:     jetstream.DiscardOld,
	}, func(have jetstream.StreamConfig, cfg *jetstream.StreamConfig) { cfg.Storage = have.Storage })
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
	}
	return s, nil
}

// KeptStorage says, for a WORK stream that EnsureStream returned, which
// storage it has when that is not the one c asks for: "" when it is.
func KeptStorage(s jetstream.Stream, c StreamConfig) string {
	want, err := StorageType(c.WithDefaults().Storage)
	have := s.CachedInfo().Config.Storage
	if err != nil || have == want {
		return ""
	}
	for name, st := range storages {
		if st == have {
			return name
		}
	}
	return have.String()
}
