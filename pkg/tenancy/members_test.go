package tenancy_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Heartbeat lists the dispatchers seen within the ttl, itself included;
// one that left or went quiet drops out.
func TestHeartbeatMembers(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)
	beat := func(holder string, ttl time.Duration) []string {
		t.Helper()
		m, err := st.Heartbeat(ctx, holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rel, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members := func(what string) {
		t.Helper()
		select {
		case r := <-rel:
			if !r.Members || r.Tenant != "" {
				t.Fatalf("%s: notification %+v, want Members", what, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no members notification", what)
		}
	}
	if got := beat("b", time.Minute); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("alone: %v", got)
	}
	members("b joined")
	beat("b", time.Minute) // an existing member's beat notifies nobody
	select {
	case r := <-rel:
		t.Fatalf("a heartbeat of a known dispatcher notified: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	beat("a", time.Minute)
	beat("c", time.Minute)
	if got := beat("b", time.Minute); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("three: %v", got)
	}
	members("a joined")
	members("c joined")
	if err := st.Leave(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	members("c left")
	if got := beat("b", time.Minute); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after c left: %v", got)
	}
	// a goes quiet: its heartbeat is older than the ttl.
	if _, err := pool.Exec(ctx, `UPDATE fairway.dispatchers SET seen_at = now() - interval '2 minutes' WHERE holder = 'a'`); err != nil {
		t.Fatal(err)
	}
	if got := beat("b", time.Minute); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after a went quiet: %v", got)
	}
	if _, err := st.Heartbeat(ctx, "", time.Minute); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("empty holder: %v", err)
	}
	if _, err := st.Heartbeat(ctx, "b", 0); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("zero ttl: %v", err)
	}
}
