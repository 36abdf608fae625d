package clickhouse

import (
	"context"

	"github.com/fairwayhq/fairway/internal/sink"
)

// Inserts returns how many insert rounds (one INSERT per table) s has run:
// combined, alone, or retried alone.
func Inserts(s *Sink) int64 { return s.inserts.Load() }

// SetInsertHook makes every insert round of s call f first with its ctx and
// the records it carries; an error from f fails the round without sending
// it. Set it before the first Apply.
func SetInsertHook(s *Sink, f func(ctx context.Context, recs []sink.Record) error) { s.insertHook = f }

// Queued returns how many Apply calls wait in s's group-commit queue.
func Queued(s *Sink) int {
	if s.group == nil {
		return 0
	}
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.queue)
}

// Lingers returns how many insert rounds of s waited for the linger.
func Lingers(s *Sink) int64 {
	if s.group == nil {
		return 0
	}
	return s.group.lingers.Load()
}

// Fills returns how many insert rounds of s waited to fill.
func Fills(s *Sink) int64 {
	if s.group == nil {
		return 0
	}
	return s.group.fills.Load()
}
