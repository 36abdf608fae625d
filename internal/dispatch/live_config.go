package dispatch

import (
	"context"
	"slices"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Operators' changes reach a running dispatcher through tenancy.Listen,
// at once rather than at the next poll (routeReleases): a moved cursor
// (replay, cancel, cursor reset) and a new weight reload the pair from
// PostgreSQL (reloadPair); a partner added, changed or removed
// (`fairway partners`) lists the tenant's partners again (partnerChanged).

// partnerChanged applies a change to one of a tenant's partners: it lists
// the tenant's partners again, so a partner added or enabled becomes a
// destination of the tenant at once (its pair created with defaults if
// new, its backlog probed and seeded as the scan does), and one removed or
// disabled is no longer rung and its backlog hint is dropped, so that its
// events wait in the stream.
func (d *Dispatcher) partnerChanged(ctx context.Context, r tenancy.Released) {
	if d.partners == nil {
		return
	}
	dests := d.destsOf(ctx, r.Tenant, true)
	serving := slices.ContainsFunc(dests, func(x *destination) bool { return x.name == r.Dest })
	d.log.Info("partner "+r.Partner, "tenant", r.Tenant, "dest", r.Dest, "dispatching", serving)
	if serving {
		if _, err := d.st.Cursor(ctx, r.Tenant, r.Dest); err != nil { // creates a new pair
			if ctx.Err() == nil {
				d.log.Warn("a new partner's cursor could not be read; the next poll picks it up", "tenant", r.Tenant, "dest", r.Dest, "err", err)
				d.m.errors.WithLabelValues(r.Dest, "reload").Inc()
			}
			return
		}
		d.reloadPair(ctx, r.Tenant, r.Dest)
		return
	}
	d.mu.Lock()
	x := d.dests[r.Dest]
	d.mu.Unlock()
	if x != nil {
		for _, l := range x.lanes() {
			l.idle(ctx, r.Tenant)
		}
	}
}

// idle drops tenant's backlog hint, once no grant of it is in flight (its
// outcome would set the hint again).
func (x *destination) idle(ctx context.Context, tenant string) {
	for ctx.Err() == nil {
		x.mu.Lock()
		lanes := x.lanesOf(tenant)
		if !slices.ContainsFunc(lanes, func(ts *tenantState) bool { return ts.granted }) {
			for _, ts := range lanes {
				x.setBacklog(ts, 0)
			}
			x.mu.Unlock()
			return
		}
		x.mu.Unlock()
		sleepCtx(ctx, 20*time.Millisecond)
	}
}
