package dispatch_test

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
)

// A tenant first seen after the dispatcher started (none of its events
// were in the stream at the start-up scan) is dispatched at its pair's
// rate from its first events, not from the next poll's (its weight:
// TestWeightedSharesInterleaved/live).
func TestNewTenantRate(t *testing.T) {
	t.Parallel()
	const rate, events = 200, 1200
	e := setup(t, time.Minute)
	e.tenant("paced", 1, 100, pg)
	if err := e.st.SetDestRate(e.ctx, "paced", pg, rate); err != nil {
		t.Fatal(err)
	}
	var log commitLog
	e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour}, log.hook)
	e.waitFor("the dispatcher running", d.Running)
	e.publish("paced", events)
	e.waitFor("the events dispatched", func() bool { n, _, _ := log.total(); return n >= events })
	log.checkRate(t, rate)
}
