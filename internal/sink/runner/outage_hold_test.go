package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A destination down for longer than the retry budget does not turn the
// batch into dead letters: the batch is held with its slot, the pair says
// "destination down" with the last error, and once the destination is
// back everything is applied and nothing is dead-lettered. Only a hold
// longer than MaxHold dead-letters.
func TestDestinationDownIsHeldNotDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxHold time.Duration
		outage  time.Duration
		letters bool
	}{
		{"back within the hold", time.Minute, 3 * time.Second, false},
		{"down past the hold", 2 * time.Second, time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var down atomic.Bool
			down.Store(true)
			start := time.Now()
			w := &wrapSink{inner: e.pg, before: func(context.Context, int, []sink.Record) error {
				if down.Load() && time.Since(start) < tc.outage {
					return fmt.Errorf("postgres sink: apply: %w", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"})
				}
				return nil
			}}
			cfg := e.fastConfig()
			cfg.Backoff = runner.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, MaxElapsed: time.Second}
			cfg.MaxHold = tc.maxHold
			r, _ := e.start(w, cfg)
			e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1))
			e.dispatch("acme", "postgres", 2)

			// Past the retry budget the pair says why it waits.
			testenv.Eventually(t, waitMax, "the pair held as destination down", func() error {
				ps, err := e.store.PairStatuses(context.Background(), "acme")
				if err != nil {
					return err
				}
				for _, p := range ps {
					if p.Dest == "postgres" && p.Wait == tenancy.WaitDown && strings.Contains(p.WaitDetail, "destination down since") &&
						strings.Contains(p.WaitDetail, "starting up") {
						return nil
					}
				}
				return fmt.Errorf("pair statuses %+v", ps)
			})
			if ls := e.letters(dlq.Filter{}); len(ls) != 0 {
				t.Fatalf("%d dead letters once the retry budget was spent, want none while the batch is held", len(ls))
			}
			e.drained(r.Config().Consumer)
			letters := e.letters(dlq.Filter{})
			if !tc.letters {
				if len(letters) != 0 || e.rows("acme") != 2 {
					t.Fatalf("%d dead letters and %d rows after the destination came back, want none and 2", len(letters), e.rows("acme"))
				}
				return
			}
			if len(letters) != 2 || !strings.Contains(letters[0].Reason, "gave up after holding the batch for 2s") {
				t.Fatalf("after the hold: %d letters %+v, want 2 saying the hold ended", len(letters), letters)
			}
		})
	}
}
