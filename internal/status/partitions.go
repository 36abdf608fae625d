package status

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Partition is one partition of PRODUCTS (events.Layout): the dispatcher
// that reads it and what waits in it.
type Partition struct {
	Partition int `json:"partition"`
	// Dispatcher is the dispatcher reading it, as the dispatchers last
	// recorded (tenancy.Store.SetPartitions), "" when no dispatcher seen
	// within DispatcherSeen reads it; in a stream without partitions,
	// every dispatcher, comma-separated (they split the pairs).
	Dispatcher string `json:"dispatcher"`
	// Seen is how long ago that dispatcher last heartbeat.
	Seen time.Duration `json:"seen_ns"`
	// Backlog is the events waiting behind its tenants' cursors, summed
	// over their destinations; Tenants how many of its tenants have any.
	Backlog uint64 `json:"backlog"`
	Tenants int    `json:"tenants"`
}

// DispatcherSeen is how recent a dispatcher's heartbeat must be for
// Partitions to name it.
const DispatcherSeen = time.Minute

// Dispatchers is what Partitions needs from pkg/tenancy.
type Dispatchers interface {
	Dispatchers(ctx context.Context, ttl time.Duration) ([]tenancy.Dispatcher, error)
}

// Partitions returns the stream's partitions (one, numbered 0, for a
// stream without) with the dispatcher reading each and their backlog
// from rows (Rows). Without s.Dispatchers no dispatcher is named.
func (s *Source) Partitions(ctx context.Context, rows []Row) (events.Layout, []Partition, error) {
	layout, err := s.Reader.Layout(ctx)
	if err != nil {
		return layout, nil, err
	}
	var ds []tenancy.Dispatcher
	if s.Dispatchers != nil {
		if ds, err = s.Dispatchers.Dispatchers(ctx, DispatcherSeen); err != nil {
			return layout, nil, err
		}
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	out := make([]Partition, layout.Count())
	for i := range out {
		out[i].Partition = i
	}
	if layout.Partitions == 0 {
		var names []string
		var seen time.Duration = -1
		for _, d := range ds {
			names = append(names, d.Holder)
			if age := now().Sub(d.SeenAt); seen < 0 || age < seen {
				seen = age
			}
		}
		out[0].Dispatcher, out[0].Seen = strings.Join(names, ","), max(seen, 0)
	} else {
		// The most recently seen dispatcher that records a partition
		// reads it: a dead one's record stays until its row is pruned.
		slices.SortFunc(ds, func(a, b tenancy.Dispatcher) int { return a.SeenAt.Compare(b.SeenAt) })
		for _, d := range ds {
			for _, p := range d.Partitions {
				if p >= 0 && p < len(out) {
					out[p].Dispatcher, out[p].Seen = d.Holder, max(now().Sub(d.SeenAt), 0)
				}
			}
		}
	}
	waiting := map[string]bool{}
	for _, r := range rows {
		p := layout.PartitionOf(r.Tenant)
		out[p].Backlog += r.Backlog
		if r.Backlog > 0 && !waiting[r.Tenant] {
			waiting[r.Tenant] = true
			out[p].Tenants++
		}
	}
	return layout, out, nil
}
