package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterBy adds up the counter name over the registries gs by the value
// of its label: fairway_dispatcher_grants_total by "source", say.
func CounterBy(tb testing.TB, name, label string, gs ...prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, g := range gs {
		mfs, err := g.Gather()
		if err != nil {
			tb.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}
