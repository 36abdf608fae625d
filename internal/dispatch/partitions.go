package dispatch

import (
	"context"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Partitions. A partitioned PRODUCTS (events.Layout) stores each tenant's
// events under one of P partitions. Dispatchers split the partitions,
// not the pairs: each owns the partitions rendezvous hashing gives it
// among the dispatchers alive (members.go) and grants every pair of
// their tenants, and its doorbell and backfill are filtered on them, so
// that each dispatcher reads only its share of the stream. A dispatcher
// reading one partition runs the same code as one reading all of them;
// an unpartitioned stream is one partition, read whole, and its
// dispatchers split the pairs as before.
//
// When the dispatchers alive change, a dispatcher that loses partitions
// forgets their tenants' indexes and bodies (their new owner dispatches
// them), and one that gains partitions restarts its doorbell from the
// sequence after the last it delivered with the new filter, and scans the
// gained partitions for their tenants' backlogs as at start. Its index
// covers a gained partition from that sequence on only (partReads.live);
// whatever a gained tenant has waiting before it is read from PRODUCTS,
// which is always right. While two dispatchers' views differ both may
// grant a pair; the cursor check in tenancy.DispatchMany decides, as for
// pairs.

// memberTTL is how many heartbeats old a dispatcher's row may be and the
// dispatcher still taken for alive: one that died is taken over at the
// first heartbeat of another after that, so within memberTTL+1
// heartbeats of its last (3: a dead dispatcher's partitions move within
// 3 heartbeats of its death). A heartbeat a whole interval late makes its
// partitions move and move back, which costs reads, not correctness.
const memberTTL = 2

// partReads is what this dispatcher reads of each partition.
type partReads struct {
	layout events.Layout
	// live[p] is the sequence from which the doorbell delivers partition
	// p's events (0: it does not); back[p] says the start-up backfill
	// delivered (or delivers) p's events in [backFrom, liveFrom).
	live []atomic.Uint64
	back []atomic.Bool

	mu    sync.Mutex
	owned []int // sorted; nil before the first heartbeat
}

func newPartReads(l events.Layout) *partReads {
	return &partReads{layout: l, live: make([]atomic.Uint64, l.Count()), back: make([]atomic.Bool, l.Count())}
}

// liveFrom is where the doorbell's delivery of partition p began (0:
// not delivered).
func (r *partReads) liveFrom(p int) uint64 { return r.live[p].Load() }

// backfilled says the start-up backfill delivers partition p's events.
func (r *partReads) backfilled(p int) bool { return r.back[p].Load() }

// partitioned says whether the stream has partitions: dispatchers then
// split partitions, not pairs.
func (r *partReads) partitioned() bool { return r.layout.Partitions > 0 }

// filters are the subject filters of a consumer reading parts: none when
// parts is every partition (the server then matches nothing).
func (r *partReads) filters(parts []int) []string {
	if len(parts) == r.layout.Count() {
		return nil
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = r.layout.PartitionSubjects(p)
	}
	return out
}

// ownedNow is the partitions this dispatcher reads now: the one of an
// unpartitioned stream, else those it owns (moveParts).
func (r *partReads) ownedNow() []int {
	if !r.partitioned() {
		return []int{0}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned
}

// partOwner is the member that owns partition p: rendezvous hashing, as
// for pairs (owner).
func partOwner(members []string, p int) string {
	return owner(members, "partition", strconv.Itoa(p))
}

// ownedParts is the partitions holder owns among members: every one when
// alone.
func ownedParts(members []string, holder string, n int) []int {
	out := []int{}
	for p := range n {
		if len(members) < 2 || partOwner(members, p) == holder {
			out = append(out, p)
		}
	}
	return out
}

// ownedParts is the partitions this dispatcher owns in its last view of
// the dispatchers alive; the one partition of an unpartitioned stream,
// which every dispatcher reads.
func (d *Dispatcher) ownedParts() []int {
	if !d.parts.partitioned() {
		return []int{0}
	}
	var members []string
	if m := d.members.Load(); m != nil {
		members = m.members
	}
	return ownedParts(members, d.cfg.Holder, d.parts.layout.Count())
}

// moveParts takes over the partitions this dispatcher gained at the last
// heartbeat and lets go of those it lost (the package comment above):
// it refilters the doorbell and scans what it gained. Before the doorbell
// started (the first heartbeat) it only records what it owns.
func (d *Dispatcher) moveParts(ctx context.Context) {
	if !d.parts.partitioned() {
		return
	}
	owned := d.ownedParts()
	r := d.parts
	r.mu.Lock()
	old := r.owned
	if old != nil && slices.Equal(old, owned) {
		r.mu.Unlock()
		return
	}
	r.owned = owned
	r.mu.Unlock()
	d.m.partitions.Set(float64(len(owned)))
	d.reloads.Go(func() {
		if err := d.st.SetPartitions(ctx, d.cfg.Holder, owned); err != nil && ctx.Err() == nil {
			d.log.Warn("recording this dispatcher's partitions failed; status shows the last recorded", "err", err)
		}
	})
	bell := d.bell.Load()
	if old == nil || bell == nil {
		return // Run starts the doorbell on what is owned now
	}
	var gained, lost []int
	for _, p := range owned {
		if !slices.Contains(old, p) {
			gained = append(gained, p)
		}
	}
	for _, p := range old {
		if !slices.Contains(owned, p) {
			lost = append(lost, p)
		}
	}
	d.log.Info("partitions moved", "holder", d.cfg.Holder, "owned", owned, "gained", gained, "lost", lost)
	for _, p := range lost {
		r.live[p].Store(0)
		r.back[p].Store(false)
	}
	from := bell.refilter(ctx, r.filters(owned), len(owned) == 0, gained)
	for _, x := range d.allLanes() {
		x.dropParts(lost, from)
	}
	if len(gained) == 0 {
		return
	}
	d.reloads.Go(func() {
		stream, err := d.js.Stream(ctx, d.cfg.Stream)
		if err == nil {
			_, _, _, err = d.scan(ctx, stream, gained)
		}
		if err != nil && ctx.Err() == nil {
			d.log.Warn("scanning gained partitions failed; the next poll scans them", "partitions", gained, "err", err)
			d.m.errors.WithLabelValues("", "scan").Inc()
		}
		for _, x := range d.allLanes() {
			x.kick()
		}
	})
}

// dropParts forgets the indexes and held bodies of the tenants of the
// partitions this dispatcher lost: their new owner dispatches them, and
// the doorbell no longer rings them here. from is where the doorbell
// restarted: the live indexes knew nothing past it of those tenants.
func (x *destination) dropParts(lost []int, from uint64) {
	if len(lost) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ts := range x.tenants {
		if slices.Contains(lost, ts.part) {
			ts.live.trim(max(from, ts.live.floor))
			ts.back.trim(math.MaxUint64)
			ts.backExpect, ts.backRung = 0, 0
		}
	}
}

// streamLast is the stream's last sequence now.
func (d *Dispatcher) streamLast(ctx context.Context) (uint64, error) {
	s, err := d.js.Stream(ctx, d.cfg.Stream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}
