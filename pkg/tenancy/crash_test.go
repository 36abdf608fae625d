package tenancy_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

const (
	crashSlots = 3
	crashTTL   = 2 * time.Second
)

// TestCrash: a process holding slots is killed with SIGKILL. Its slots stay
// held until their leases expire, are acquirable within the lease time plus
// one second without any sweeper, and the dead leases' tokens can neither
// release nor extend the re-leased slots.
func TestCrash(t *testing.T) {
	t.Parallel()
	st, pool, dsn := setup(t, &tenancy.Config{LeaseTTL: crashTTL})
	ctx := testCtx(t)
	if _, err := st.EnsureTenant(ctx, "crash"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "crash", tenancy.DestPostgres, crashSlots); err != nil {
		t.Fatal(err)
	}
	cmd, out := startHelper(t, "crash", dsn, envTTL+"="+crashTTL.String())
	var dead []tenancy.Lease
	for o := range out {
		if o.Lease != nil {
			dead = append(dead, *o.Lease)
		}
		if o.Ready {
			break
		}
	}
	if len(dead) != crashSlots {
		t.Fatalf("helper acquired %d leases, want %d", len(dead), crashSlots)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	latest := dead[0].ExpiresAt
	for _, l := range dead {
		if l.ExpiresAt.After(latest) {
			latest = l.ExpiresAt
		}
	}
	// Still held while the leases live (checked only if they do; on a very
	// slow machine they may already have expired).
	if now := dbClock(ctx, t, pool); now.Add(200 * time.Millisecond).Before(dead[0].ExpiresAt) {
		if _, err := st.Acquire(ctx, "crash", tenancy.DestPostgres, "survivor"); !errors.Is(err, tenancy.ErrAtLimit) {
			t.Fatalf("acquired a slot of a live lease of the killed process: %v", err)
		}
	}
	// Poll until every slot is reacquired, up to lease time + 1s past the
	// latest expiry (database clock), plus slack for the poll itself.
	var got []tenancy.Lease
	testenv.Eventually(t, time.Until(latest)+crashTTL+5*time.Second, "the killed process's slots to come back", func() error {
		for len(got) < crashSlots {
			l, err := st.Acquire(ctx, "crash", tenancy.DestPostgres, "survivor")
			if errors.Is(err, tenancy.ErrAtLimit) {
				return fmt.Errorf("%d of %d came back", len(got), crashSlots)
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, l)
		}
		return nil
	})
	for _, l := range got {
		acquiredAt := l.ExpiresAt.Add(-crashTTL) // database clock
		if acquiredAt.After(latest.Add(time.Second)) {
			t.Errorf("slot %d came back at %s, more than 1s after the dead lease expired at %s", l.Slot, acquiredAt, latest)
		}
	}
	// Late finishers from the dead leases are fenced out.
	for _, l := range dead {
		if err := st.Release(ctx, l.ID, l.Token); !errors.Is(err, tenancy.ErrStaleLease) {
			t.Errorf("late release of dead lease %s: %v, want ErrStaleLease", l.ID, err)
		}
		if _, err := st.Extend(ctx, l); !errors.Is(err, tenancy.ErrStaleLease) {
			t.Errorf("late extend of dead lease %s: %v, want ErrStaleLease", l.ID, err)
		}
	}
	if err := st.ReleaseMany(ctx, dead); !errors.Is(err, tenancy.ErrStaleLease) {
		t.Errorf("late release many: %v", err)
	}
	if n, err := st.InUse(ctx, "crash", tenancy.DestPostgres); err != nil || n != crashSlots {
		t.Fatalf("in use %d (%v) after late releases, want %d", n, err, crashSlots)
	}
}
