package runner_test

import (
	"slices"
	"testing"
)

// The runner observes every applied event's end-to-end latency under its
// tenant while there is room in the top K (Config.LatencyTopK), under
// "other" beyond; a replayed event's age is the replay's, not counted.
func TestTenantLatencyOfAppliedEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tenant := range []string{"a", "b", "c"} {
		e.publish(upsert(tenant, "p1", 1), upsert(tenant, "p2", 1))
		e.dispatch(tenant, "postgres", 2)
	}
	seqs := e.publish(upsert("d", "p1", 1))
	e.dispatchFrom("d", "postgres", seqs[0], 1, true)
	cfg := e.fastConfig()
	cfg.LatencyTopK = 2
	r, reg := e.start(e.pg, cfg)
	e.drained(r.Config().Consumer)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var tenants []string
	var samples uint64
	for _, mf := range mfs {
		if mf.GetName() != "fairway_sink_tenant_end_to_end_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "tenant" {
					tenants = append(tenants, lp.GetValue())
				}
			}
			samples += m.GetHistogram().GetSampleCount()
		}
	}
	slices.Sort(tenants)
	if len(tenants) != 3 || tenants[2] != "other" || slices.Contains(tenants, "d") {
		t.Errorf("tenant series %v: want two of a, b, c and other", tenants)
	}
	if samples != 6 {
		t.Errorf("%d latencies observed, want 6 (the replayed event not among them)", samples)
	}
	if n := counter(t, reg, "fairway_sink_end_to_end_seconds", "dest", "postgres"); n != 6 {
		t.Errorf("fairway_sink_end_to_end_seconds counts %v, want 6 as well", n)
	}
}
