package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults for StreamConfig.
const (
	StreamMaxAgeDefault     = 30 * 24 * time.Hour
	StreamDuplicatesDefault = 10 * time.Minute
)

// StreamConfig configures the DLQ stream.
type StreamConfig struct {
	// Name of the stream. Default StreamName ("DLQ").
	Name string
	// Replicas: 1 on a single node, 3 in a cluster. Default 1.
	Replicas int
	// MaxAge is how long a letter waits for an operator. Default 30 days.
	MaxAge time.Duration
	// Duplicates is the window in which the same letter is stored once.
	// Default 10 minutes.
	Duplicates time.Duration
}

// WithDefaults fills zero fields.
func (c StreamConfig) WithDefaults() StreamConfig {
	c.Name = cmp.Or(c.Name, StreamName)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.MaxAge = cmp.Or(c.MaxAge, StreamMaxAgeDefault)
	c.Duplicates = cmp.Or(c.Duplicates, StreamDuplicatesDefault)
	return c
}

// EnsureStream creates or updates the DLQ stream (limits retention, file
// storage, direct get allowed for list and show).
func EnsureStream(ctx context.Context, js jetstream.JetStream, c StreamConfig) (jetstream.Stream, error) {
	c = c.WithDefaults()
	s, err := events.EnsureJetStream(ctx, js, jetstream.StreamConfig{
		Name:        c.Name,
		Description: "fairway dead letters: events a destination refused or gave up on, and lost ranges",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.MaxAge,
		Duplicates:  c.Duplicates,
		Discard:     jetstream.DiscardOld,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Name, err)
	}
	return s, nil
}

// Queue reads and writes letters in the DLQ stream.
type Queue struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open returns a Queue on an existing stream (default StreamName).
func Open(ctx context.Context, js jetstream.JetStream, name string) (*Queue, error) {
	name = cmp.Or(name, StreamName)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open dead-letter stream %s: %w", name, err)
	}
	return &Queue{js: js, stream: s}, nil
}

// Publish stores letters and waits until JetStream acknowledged all of them.
// A letter already stored inside the duplicate window is not stored again.
func (q *Queue) Publish(ctx context.Context, letters []Letter) error {
	name := q.stream.CachedInfo().Config.Name
	futures := make([]jetstream.PubAckFuture, 0, len(letters))
	for i := range letters {
		f, err := q.js.PublishMsgAsync(letters[i].Msg(), jetstream.WithExpectStream(name))
		if err != nil {
			return fmt.Errorf("dead-letter %s: %w", letters[i].MsgID(), err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("dead-letter %s: %w", f.Msg().Header.Get("Nats-Msg-Id"), err)
		case <-ctx.Done():
			return fmt.Errorf("dead-letter: waiting for ack: %w", ctx.Err())
		}
	}
	return nil
}

// Filter selects letters. Zero fields match everything.
type Filter struct {
	Dest   string
	Tenant string
	// IDs selects these letters only (Dest and Tenant still apply).
	IDs []uint64
	// Limit bounds the result; 0 means no limit.
	Limit int
}

// List returns the letters matching f, oldest first.
func (q *Queue) List(ctx context.Context, f Filter) ([]Letter, error) {
	var out []Letter
	add := func(l Letter) bool {
		if (f.Dest != "" && l.Dest != f.Dest) || (f.Tenant != "" && l.Tenant != f.Tenant) {
			return true
		}
		out = append(out, l)
		return f.Limit == 0 || len(out) < f.Limit
	}
	if len(f.IDs) > 0 {
		for _, id := range f.IDs {
			l, err := q.Get(ctx, id)
			if err != nil {
				return out, err
			}
			if !add(l) {
				break
			}
		}
		return out, nil
	}
	subj := FilterSubject(f.Dest, f.Tenant)
	for seq := uint64(1); ; {
		m, err := q.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("list dead letters: %w", err)
		}
		seq = m.Sequence + 1
		l, err := Parse(m)
		if err != nil {
			continue // not ours; list what is
		}
		if !add(l) {
			return out, nil
		}
	}
}

// Get returns one letter.
func (q *Queue) Get(ctx context.Context, id uint64) (Letter, error) {
	m, err := q.stream.GetMsg(ctx, id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Letter{}, fmt.Errorf("get dead letter %d: %w", id, err)
	}
	return Parse(m)
}

// Delete removes a letter.
func (q *Queue) Delete(ctx context.Context, id uint64) error {
	if err := q.stream.DeleteMsg(ctx, id); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return fmt.Errorf("%w: %d", ErrNotFound, id)
		}
		return fmt.Errorf("delete dead letter %d: %w", id, err)
	}
	return nil
}
