package work_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
)

// WORK is created on file unless told memory; one that exists keeps its
// storage (JetStream cannot change it), EnsureStream still succeeds, and
// KeptStorage names the storage kept; a storage of another name is
// refused.
func TestWorkStreamStorage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		first string // the storage WORK is created with
		then  string // the storage asked for next
		want  jetstream.StorageType
		kept2 string // KeptStorage asking for then
	}{
		{name: "default", first: "", then: work.StorageMemory, want: jetstream.FileStorage, kept2: work.StorageFile},
		{name: "memory kept", first: work.StorageMemory, then: "", want: jetstream.MemoryStorage, kept2: work.StorageMemory},
		{name: "file asked again", first: work.StorageFile, then: work.StorageFile, want: jetstream.FileStorage},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, js := testenv.JetStream(t)
			s, err := work.EnsureStream(ctx, js, work.StreamConfig{Storage: c.first})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Storage; got != c.want {
				t.Fatalf("created with %q: storage %v, want %v", c.first, got, c.want)
			}
			if kept := work.KeptStorage(s, work.StreamConfig{Storage: c.first}); kept != "" {
				t.Errorf("KeptStorage right after creation: %q, want none", kept)
			}
			s, err = work.EnsureStream(ctx, js, work.StreamConfig{Storage: c.then})
			if err != nil {
				t.Fatalf("ensure again with %q: %v", c.then, err)
			}
			if got := s.CachedInfo().Config.Storage; got != c.want {
				t.Fatalf("after asking for %q: storage %v, want %v kept", c.then, got, c.want)
			}
			if kept := work.KeptStorage(s, work.StreamConfig{Storage: c.then}); kept != c.kept2 {
				t.Errorf("KeptStorage asking for %q: %q, want %q", c.then, kept, c.kept2)
			}
		})
	}
	_, _, js := testenv.JetStream(t)
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{Storage: "disk"}); err == nil {
		t.Fatal(`storage "disk" accepted`)
	}
}
