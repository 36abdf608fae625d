package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestReplayCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	srv, _, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js)
	var last uint64
	for i := range 5 {
		r := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: fmt.Sprint(i), Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		last = r.Seq
	}
	store, _ := tenancy.New(pool, nil)
	l, err := store.Dispatch(ctx, "acme", "postgres", "d", 1, last)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}
		cmd := newRootCmd(func(k string) string { return env[k] }, &out, &errOut)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), errOut.String(), err
	}
	_, errOut, err := run("replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--slots", "2", "--no-wait")
	if err != nil || !strings.Contains(errOut, "replay 1: acme → postgres, sequences 2..5, 4 events") {
		t.Fatalf("replay: %q %v", errOut, err)
	}
	if ps, err := store.PairStatuses(ctx, "acme"); err != nil || len(ps) != 1 || ps[0].ReplaySlots != 2 || ps[0].ReplayNext != 2 || ps[0].NextSeq != last+1 {
		t.Fatalf("pair %+v %v, want the replay from 2 with 2 slots beside the cursor %d", ps, err, last+1)
	}
	out, _, err := run("replay", "status")
	if err != nil || !strings.Contains(out, "running") || !strings.Contains(out, "acme") {
		t.Fatalf("status: %q %v", out, err)
	}
	if out, _, err := run("replay", "cancel", "1"); err != nil || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %q %v", out, err)
	}
	if ps, _ := store.PairState(ctx, "acme", "postgres"); ps.Replaying() || ps.NextSeq != last+1 {
		t.Fatalf("pair after cancel %+v, want not replaying, cursor %d", ps, last+1)
	}
	// --to-seq bounds the range.
	_, errOut, err = run("replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--to-seq", "3", "--rate", "250", "--no-wait")
	if err != nil || !strings.Contains(errOut, "replay 2: acme → postgres, sequences 2..3, 2 events, rate 250/s") {
		t.Fatalf("replay --to-seq: %q %v", errOut, err)
	}
	if out, _, err := run("replay", "status"); err != nil || !strings.Contains(out, "250/s") {
		t.Fatalf("status does not show the rate: %q %v", out, err)
	}
	if out, _, err := run("replay", "cancel", "2"); err != nil || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %q %v", out, err)
	}
	for _, bad := range [][]string{
		{"replay", "--tenant", "ghost", "--dest", "postgres", "--from-seq", "1"},
		{"replay", "--tenant", "acme", "--dest", "s3", "--since", "1h"},
		{"replay", "--tenant", "acme", "--dest", "postgres"},
		{"replay", "--tenant", "acme", "--dest", "postgres", "--from", "yesterday"},
		{"replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--rate", "fast"},
		{"replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--rate", "0"},
		{"replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--slots", "0"},
		{"replay", "--tenant", "acme", "--dest", "postgres", "--from-seq", "2", "--slots", "65"},
	} {
		if _, _, err := run(bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	// The --wait path: a replay whose range was dispatched again ends.
	if _, errOut, err := run("replay", "--tenant", "acme", "--dest", "postgres", "--since", "1h", "--rate", "unlimited", "--no-wait"); err != nil || !strings.Contains(errOut, "rate unlimited") {
		t.Fatalf("since: %q %v", errOut, err)
	}
	if _, err := store.DispatchReplay(ctx, "acme", "postgres", "d2", 1, []tenancy.Range{{From: 1, To: last}}); err != nil {
		t.Fatal(err)
	}
	out, _, err = run("replay", "status", "--all")
	if err != nil || !strings.Contains(out, "done") || !strings.Contains(out, "cancelled") {
		t.Fatalf("status --all: %q %v", out, err)
	}
}
