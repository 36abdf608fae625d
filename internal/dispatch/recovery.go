package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// recoverBatch is how many orphans of one destination a recovery pass
// takes on.
const recoverBatch = 256

// recoverLoop re-dispatches orphaned batches every RecoverInterval and
// whenever a slot of a tenant with a waiting orphan is released. A pass
// first sweeps expired leases, which records the expired batch leases as
// orphans (trigger slots_keep_orphan), then re-leases each orphan under a
// new token and publishes a work item for the same range.
func (d *Dispatcher) recoverLoop(ctx, workCtx context.Context) {
	t := time.NewTicker(d.cfg.RecoverInterval)
	defer t.Stop()
	var pruned time.Time
	for {
		d.recoverOnce(workCtx)
		if d.cfg.BatchLogRetention > 0 && time.Since(pruned) >= batchLogPruneEvery {
			pruned = time.Now()
			d.pruneBatchLog(workCtx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.recoverKick:
		}
	}
}

// The batch log is pruned about every batchLogPruneEvery, in statements of
// batchLogPruneChunk rows, at most batchLogPrunePass rows a pass: a log
// that fell far behind (retention shortened, pruning off for a while)
// shrinks over several passes rather than in one long delete.
const (
	batchLogPruneEvery = time.Minute
	batchLogPruneChunk = 10_000
	batchLogPrunePass  = 100_000
)

// pruneBatchLog deletes batch-log rows older than BatchLogRetention.
func (d *Dispatcher) pruneBatchLog(ctx context.Context) {
	for done := 0; done < batchLogPrunePass && ctx.Err() == nil; {
		n, err := d.st.PruneBatches(ctx, d.cfg.BatchLogRetention, batchLogPruneChunk)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("pruning the batch log failed", "err", err)
				d.m.errors.WithLabelValues("", "prune").Inc()
			}
			return
		}
		d.m.pruned.Add(float64(n))
		done += n
		if n < batchLogPruneChunk {
			return
		}
	}
}

// recoverOnce runs one recovery pass and returns how many orphans it
// re-dispatched.
func (d *Dispatcher) recoverOnce(ctx context.Context) int {
	if _, err := d.st.Sweep(ctx); err != nil {
		if ctx.Err() == nil {
			d.log.Warn("sweep failed", "err", err)
			d.m.errors.WithLabelValues("", "sweep").Inc()
		}
		return 0
	}
	done := 0
	for _, x := range d.allDests() {
		if x.win.sinkless() {
			continue // its orphans wait for its first sink (workWindow.sinkless)
		}
		os, err := d.st.Orphans(ctx, x.name, recoverBatch)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("list orphans failed", "dest", x.name, "err", err)
				d.m.errors.WithLabelValues(x.name, "orphans").Inc()
			}
			continue
		}
		for _, o := range os {
			if ctx.Err() != nil {
				return done
			}
			if d.redispatch(ctx, x, o) {
				done++
			}
		}
	}
	return done
}

func (d *Dispatcher) redispatch(ctx context.Context, x *destination, o tenancy.Orphan) bool {
	lease, err := d.st.Redispatch(ctx, o, d.cfg.Holder)
	switch {
	case errors.Is(err, tenancy.ErrAtLimit):
		lane := x
		if o.Slot < 0 { // a replay's batch waits for one of the replay's slots
			lane = x.replays
		}
		lane.markOrphan(o.Tenant) // retried when one of its slots is released
		return false
	case isStale(err):
		return false // another dispatcher took it
	case err != nil:
		d.log.Warn("redispatch failed", "tenant", o.Tenant, "dest", o.Dest, "err", err)
		d.m.errors.WithLabelValues(x.name, "redispatch").Inc()
		return false
	}
	n, err := d.countRange(ctx, o.Tenant, o.Priority, lease.FromSeq, lease.ToSeq)
	if err != nil {
		d.log.Warn("redispatch: reading the range failed; handing it back", "lease", lease.ID, "err", err)
		d.handBack(lease)
		return false
	}
	if n == 0 {
		// The stream no longer holds the range (MaxAge, MaxBytes): there
		// is nothing to apply. Loud, because it is a loss the sink never saw.
		d.log.Error("orphaned range is gone from the stream; nothing to re-dispatch",
			"tenant", o.Tenant, "dest", o.Dest, "from", lease.FromSeq, "to", lease.ToSeq)
		d.m.errors.WithLabelValues(x.name, "range_gone").Inc()
		_ = d.st.Release(ctx, lease.ID, lease.Token)
		return false
	}
	it := work.Item{
		Tenant: o.Tenant, Dest: o.Dest, FromSeq: lease.FromSeq, ToSeq: lease.ToSeq, Count: n,
		LeaseID: lease.ID, Token: lease.Token, DispatchedAt: d.cfg.Clock().UTC(), Replay: o.Slot < 0, Priority: o.Priority,
	}
	seq, size, err := d.publish(ctx, it, nil)
	if err != nil {
		d.m.errors.WithLabelValues(x.name, "publish").Inc()
		d.handBack(lease)
		return false
	}
	x.win.published(seq, size)
	d.log.Info("re-dispatched an orphaned batch", "tenant", o.Tenant, "dest", o.Dest,
		"from", lease.FromSeq, "to", lease.ToSeq, "old_holder", o.Holder, "lease", lease.ID)
	d.m.recovered.WithLabelValues(x.name).Inc()
	d.m.items.WithLabelValues(x.name).Inc()
	d.m.events.WithLabelValues(x.name).Add(float64(n))
	return true
}

// countRange counts tenant's events of priority p ("": all) in from..to.
func (d *Dispatcher) countRange(ctx context.Context, tenant string, p events.Priority, from, to uint64) (int, error) {
	n := 0
	for from <= to {
		b, err := d.rd.Next(ctx, tenant, from, to, work.ReadOptions{Max: 1000, NoData: true, Priority: p})
		if err != nil {
			return n, err
		}
		if len(b.Msgs) == 0 {
			break
		}
		n += len(b.Msgs)
		from = b.Msgs[len(b.Msgs)-1].Seq + 1
	}
	return n, nil
}
