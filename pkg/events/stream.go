package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for StreamConfig.
const (
	StreamReplicasDefault   = 1
	StreamMaxAgeDefault     = 7 * 24 * time.Hour
	StreamDuplicatesDefault = 10 * time.Minute
)

// StreamConfig is the configuration of the events stream.
type StreamConfig struct {
	// Name of the stream. Default StreamName ("PRODUCTS").
	Name string
	// Replicas is 1 for a single node, 3 in production. Default 1.
	Replicas int
	// MaxAge is how long events are kept: the replay horizon. Default 7
	// days.
	MaxAge time.Duration
	// Duplicates is the window in which a repeated Nats-Msg-Id is dropped.
	// Default 10 minutes; at most MaxAge.
	Duplicates time.Duration
	// MaxBytes bounds the stream size; the oldest events go first. Default
	// -1, unlimited (0 also means the default).
	MaxBytes int64
	// Storage is jetstream.FileStorage (the zero value, default) or
	// jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// Partitions is the number of partitions the stream splits its
	// tenants into (partition.go), 1..PartitionsMax. Default
	// PartitionsDefault (8). It applies when the stream is created: an
	// existing stream keeps its layout.
	Partitions int
}

// WithDefaults returns c with every zero field set to its default.
func (c StreamConfig) WithDefaults() StreamConfig {
	c.Name = cmp.Or(c.Name, StreamName)
	c.Replicas = cmp.Or(c.Replicas, StreamReplicasDefault)
	c.MaxAge = cmp.Or(c.MaxAge, StreamMaxAgeDefault)
	c.Duplicates = cmp.Or(c.Duplicates, StreamDuplicatesDefault)
	c.MaxBytes = cmp.Or(c.MaxBytes, -1)
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	return c
}

func (c StreamConfig) validate() error {
	switch {
	case strings.ContainsAny(c.Name, ".*> \t\r\n"):
		return fmt.Errorf("%w: stream name %s must not contain '.', '*', '>' or whitespace", ErrInvalidConfig, quote(c.Name))
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("%w: stream replicas %d, want 1..5", ErrInvalidConfig, c.Replicas)
	case c.MaxAge < 0:
		return fmt.Errorf("%w: stream max age %v is negative", ErrInvalidConfig, c.MaxAge)
	case c.Duplicates < 0 || c.Duplicates > c.MaxAge:
		return fmt.Errorf("%w: stream duplicate window %v, want 0..max age (%v)", ErrInvalidConfig, c.Duplicates, c.MaxAge)
	case c.MaxBytes < -1:
		return fmt.Errorf("%w: stream max bytes %d, want -1 (unlimited) or more than 0", ErrInvalidConfig, c.MaxBytes)
	case c.Partitions < 1 || c.Partitions > PartitionsMax:
		return fmt.Errorf("%w: stream partitions %d, want 1..%d", ErrInvalidConfig, c.Partitions, PartitionsMax)
	case c.Storage != jetstream.FileStorage && c.Storage != jetstream.MemoryStorage:
		return fmt.Errorf("%w: stream storage %v", ErrInvalidConfig, c.Storage)
	}
	return nil
}

// JetStreamConfig is the stream configuration EnsureStream applies:
// subjects products.*.upsert and products.*.delete (StreamSubjects), so a
// message on another op's subject is refused rather than stored, limits
// retention, discard old, direct get allowed (the
// dispatcher reads a tenant's batch with a direct get), and the subject
// transform that stores each event in its tenant's partition
// (partition.go).
func (c StreamConfig) JetStreamConfig() jetstream.StreamConfig {
	c = c.WithDefaults()
	return jetstream.StreamConfig{
		Name:             c.Name,
		Description:      "fairway product events, one subject per tenant and op",
		Subjects:         StreamSubjects(),
		Retention:        jetstream.LimitsPolicy,
		Discard:          jetstream.DiscardOld,
		MaxAge:           c.MaxAge,
		MaxBytes:         c.MaxBytes,
		MaxMsgs:          -1,
		Duplicates:       c.Duplicates,
		Storage:          c.Storage,
		Replicas:         c.Replicas,
		AllowDirect:      true,
		SubjectTransform: Layout{Partitions: c.Partitions}.transform(),
	}
}

// EnsureStream creates the events stream or updates it to c (after
// WithDefaults). It is idempotent; changing MaxAge, Duplicates or MaxBytes of
// an existing stream works, changing Storage does not (JetStream refuses).
// An existing stream keeps its partitions, or none (partition.go):
// c.Partitions applies only to a stream it creates.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	cfg := c.JetStreamConfig()
	switch s, err := js.Stream(ctx, c.Name); {
	case err == nil:
		have := s.CachedInfo().Config
		if _, err := LayoutOf(have); err != nil {
			return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
		}
		cfg.SubjectTransform = have.SubjectTransform
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
	}
	s, err := EnsureJetStream(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
	}
	return s, nil
}

// EnsureJetStream creates the stream cfg names, or updates it when its
// configuration differs from cfg in a field fairway sets (subjects,
// retention, storage, replicas, limits, duplicates window, discard, direct
// get, description). A stream already as configured is left alone: every
// service start would otherwise send an update, and nats-server 2.15
// applies an update's file-store change without the lock a concurrent
// consumer create takes (seen as a data race under -race when a sink
// restarted while another created its consumer).
func EnsureJetStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return EnsureJetStreamKeeping(ctx, js, cfg, nil)
}

// EnsureJetStreamKeeping is EnsureJetStream where keep, unless nil, first
// carries into cfg what an existing stream's configuration (have) is to
// keep, such as a storage JetStream cannot change: the stream is looked up
// once.
func EnsureJetStreamKeeping(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, keep func(have jetstream.StreamConfig, cfg *jetstream.StreamConfig)) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		if keep != nil {
			keep(s.CachedInfo().Config, &cfg)
		}
		if sameStreamConfig(s.CachedInfo().Config, cfg) {
			return s, nil
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, err
	}
	return js.CreateOrUpdateStream(ctx, cfg)
}

// sameStreamConfig compares the fields fairway sets; the server's defaults
// for unset limits (-1) equal 0.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	limit := func(v int64) int64 {
		if v <= 0 {
			return -1
		}
		return v
	}
	return have.Description == want.Description &&
		slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		max(have.Replicas, 1) == max(want.Replicas, 1) &&
		have.MaxAge == want.MaxAge &&
		limit(have.MaxBytes) == limit(want.MaxBytes) &&
		limit(have.MaxMsgs) == limit(want.MaxMsgs) &&
		have.Duplicates == want.Duplicates &&
		have.Discard == want.Discard &&
		have.AllowDirect == want.AllowDirect &&
		sameTransform(have.SubjectTransform, want.SubjectTransform)
}

func sameTransform(a, b *jetstream.SubjectTransformConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
