package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A cursor past the end of PRODUCTS (the stream was created anew) is held
// when the stream is checked, `fairway status` says `stream reset`, and
// `fairway cursors reset` moves it; cursors inside the stream stay.
func TestCursorsReset(t *testing.T) {
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
	for i := range 3 {
		if r := pub.PublishOne(ctx, events.Event{Tenant: "acme", ProductID: fmt.Sprint(i), Version: 1, Op: events.OpUpsert, OccurredAt: time.Now(), Payload: []byte(`{}`)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	st, _ := tenancy.New(pool, nil)
	for pair, next := range map[[2]string]uint64{{"acme", "postgres"}: 50, {"acme", "clickhouse"}: 40, {"globex", "postgres"}: 2} {
		if err := st.SetCursor(ctx, pair[0], pair[1], next); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		env := map[string]string{"DATABASE_URL": dsn, "NATS_URL": srv.ClientURL()}
		cmd := newRootCmd(func(k string) string { return env[k] }, &out, &errOut)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), errOut.String(), err
	}
	for _, args := range [][]string{
		{"cursors", "reset", "--to", "first"},
		{"cursors", "reset", "--tenant", "acme", "--all", "--to", "first"},
		{"cursors", "reset", "--all"},
		{"cursors", "reset", "--all", "--to", "middle"},
	} {
		var usage usageError
		if _, _, err := run(args...); !errors.As(err, &usage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}

	// globex's cursor is inside the stream: nothing to move, but the check
	// holds acme's.
	out, errOut, err := run("cursors", "reset", "--tenant", "globex", "--to", "first")
	if err != nil || !strings.Contains(out, "nothing moved") || !strings.Contains(errOut, "holds sequences 1..3") {
		t.Fatalf("reset globex: %q %q %v", out, errOut, err)
	}
	out, _, err = run("status", "--tenant", "acme")
	if err != nil || strings.Count(out, "stream reset: cursor") != 2 {
		t.Fatalf("status:\n%s%v\nwant both of acme's pairs held for a stream reset", out, err)
	}
	out, _, err = run("cursors", "reset", "--tenant", "acme", "--dest", "postgres", "--to", "first")
	if err != nil || out != "acme postgres: cursor 50 → 1\n" {
		t.Fatalf("reset acme postgres: %q %v", out, err)
	}
	out, _, err = run("cursors", "reset", "--all", "--to", "last")
	if err != nil || out != "acme clickhouse: cursor 40 → 4\n" {
		t.Fatalf("reset --all: %q %v", out, err)
	}
	out, _, err = run("status")
	if err != nil || strings.Contains(out, "stream reset") {
		t.Fatalf("status after the resets:\n%s%v", out, err)
	}
	if c, _ := st.Cursor(ctx, "globex", "postgres"); c != 2 {
		t.Fatalf("globex's cursor moved to %d", c)
	}
}
