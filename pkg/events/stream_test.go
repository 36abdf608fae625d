package events

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
)

func TestStreamConfigWithDefaults(t *testing.T) {
	t.Parallel()
	got := StreamConfig{Replicas: 3}.WithDefaults()
	want := StreamConfig{Name: "PRODUCTS", Replicas: 3, MaxAge: 7 * 24 * time.Hour, Duplicates: 10 * time.Minute, MaxBytes: -1, Storage: jetstream.FileStorage, Partitions: 8}
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
}

func TestEnsureStream(t *testing.T) {
	t.Parallel()
	_, nc, js := testenv.JetStream(t)
	ctx := context.Background()
	s, err := EnsureStream(ctx, js, StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", cfg.Name, "PRODUCTS"},
		{"subjects", cfg.Subjects, []string{"products.*.upsert", "products.*.delete", "products.*.upsert.high", "products.*.delete.high", "products.*.upsert.bulk", "products.*.delete.bulk"}},
		{"retention", cfg.Retention, jetstream.LimitsPolicy},
		{"discard", cfg.Discard, jetstream.DiscardOld},
		{"max age", cfg.MaxAge, 7 * 24 * time.Hour},
		{"duplicates", cfg.Duplicates, 10 * time.Minute},
		{"max bytes", cfg.MaxBytes, int64(-1)},
		{"max msgs", cfg.MaxMsgs, int64(-1)},
		{"storage", cfg.Storage, jetstream.FileStorage},
		{"replicas", cfg.Replicas, 1},
		{"allow direct", cfg.AllowDirect, true},
		{"subject transform", *cfg.SubjectTransform, jetstream.SubjectTransformConfig{Source: "products.*.>", Destination: "products.{{partition(8,1)}}.{{wildcard(1)}}.>"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	p := newPublisher(t, js)
	if r := p.PublishOne(ctx, validEvent()); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Idempotent: the same config again changes nothing, keeps data and
	// sends no update (an update races a concurrent consumer create in
	// nats-server 2.15); a changed one is sent.
	updates, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.PRODUCTS")
	if err != nil {
		t.Fatal(err)
	}
	s, err = EnsureStream(ctx, js, StreamConfig{})
	if err != nil {
		t.Fatalf("second EnsureStream: %v", err)
	}
	if got := s.CachedInfo().Config; !reflect.DeepEqual(got, cfg) {
		t.Errorf("config changed:\n got %+v\nwant %+v", got, cfg)
	}
	if m, err := updates.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("an unchanged stream was updated: %s", m.Data)
	}
	// Changing the replay horizon of an existing stream works.
	s, err = EnsureStream(ctx, js, StreamConfig{MaxAge: 48 * time.Hour, Duplicates: time.Minute})
	if err != nil {
		t.Fatalf("update MaxAge: %v", err)
	}
	if _, err := updates.NextMsg(time.Second); err != nil {
		t.Errorf("a changed stream was not updated: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 48*time.Hour || info.Config.Duplicates != time.Minute {
		t.Errorf("after update: max age %v, duplicates %v", info.Config.MaxAge, info.Config.Duplicates)
	}
	if info.State.Msgs != 1 {
		t.Errorf("update lost messages: %d left, want 1", info.State.Msgs)
	}
	// Direct get, which the dispatcher relies on, answers.
	m, err := s.GetLastMsgForSubject(ctx, fmt.Sprintf("products.%d.acme.upsert", Layout{Partitions: 8}.PartitionOf("acme")))
	if err != nil || m.Sequence != 1 {
		t.Errorf("direct get: %v, %v", m, err)
	}
}

func TestEnsureStreamInvalid(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.JetStream(t)
	for name, c := range map[string]StreamConfig{
		"dotted name":          {Name: "A.B"},
		"wildcard name":        {Name: "A*"},
		"replicas":             {Replicas: 7},
		"negative max age":     {MaxAge: -time.Second},
		"duplicates > max age": {MaxAge: time.Minute, Duplicates: time.Hour},
		"max bytes":            {MaxBytes: -5},
		"storage":              {Storage: 9},
		"partitions":           {Partitions: PartitionsMax + 1},
	} {
		if _, err := EnsureStream(context.Background(), js, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := js.Stream(context.Background(), "A.B"); err == nil {
		t.Errorf("an invalid config created a stream")
	}
}
