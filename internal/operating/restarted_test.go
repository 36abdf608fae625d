package operating

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// A NATS server restarted with its store, while a work item waits in WORK
// for a sink: PRODUCTS is on file and comes back, WORK is in memory
// (--work-storage memory) and does not. The dispatcher
// creates WORK again without a restart, the lost item's lease expires and
// its batch is dispatched again as an orphan, and the sink, started after
// the restart, applies both events.
func TestServerRestartedLosesNoWork(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := newAcmeStack(ctx, t)
	ingest := st.startIngest(t)
	dispatcher := st.start(t, "dispatcher", "--dest", "postgres", "--work-storage", "memory",
		"--lease-ttl", "5s", "--recover-interval", "1s", "--listen", freeAddr(t))
	st.postChairAndTable(ctx, t)
	testenv.Eventually(t, 30*time.Second, "acme's batch dispatched (no sink runs yet)", func() error {
		var n int
		if err := st.pool.QueryRow(ctx, "SELECT count(*) FROM fairway.batches WHERE tenant = 'acme'").Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no batch yet")
		}
		return nil
	})

	st.nats.Stop()
	st.nats.Restart(t)
	began := time.Now()
	t.Logf("NATS server restarted with its store")
	sinks := st.start(t, "sinks", "--dest", "postgres", "--listen", freeAddr(t))
	waitProduct(ctx, t, st.pool, "acme", "p1")
	waitProduct(ctx, t, st.pool, "acme", "p2")
	t.Logf("both events applied %s after the restart", time.Since(began).Round(time.Millisecond))
	if err, exited := dispatcher.wait(0); exited {
		t.Fatalf("the dispatcher exited (%v); it should have created WORK again:\n%s", err, dispatcher.out.String())
	}
	if !strings.Contains(dispatcher.out.String(), "stream WORK was gone; created it again") {
		t.Errorf("the dispatcher does not say it created WORK again:\n%s", dispatcher.out.String())
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.signal()
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.stop(t)
	}
}
